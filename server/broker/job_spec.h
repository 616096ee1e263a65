// A request resolved to the sandbox's launch spec: pure functions of the
// request, the policy and what the server learnt at start-up, no I/O, so
// that what a job gets can be tested without a runner (tests/unit/job_spec_test).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/broker/job.h"
#include "server/policy/policy.h"
#include "server/sandbox/spec.h"
#include "server/store/store.h"
#include "server/util/result.h"

namespace broker {

// Fixed for the server's life; every spec carries it.
struct SpecHost {
  std::string state_dir;           // scratch directories are <state_dir>/run/<sandbox id>
  uint32_t host_uid = 0;           // the host identity the sandbox user maps to
  uint32_t host_gid = 0;
  nlohmann::json cgroup_host;      // sandbox::cgroups::Host as JSON
  std::string seccomp_bpf_base64;  // the filter, compiled once
};
// The sandbox user's host identity for a server running as euid/egid:
// never host uid 0 (as root it is the policy's unprivileged id).
SpecHost spec_host(const policy::Policy& policy, std::string state_dir, uint32_t euid, uint32_t egid,
                   nlohmann::json cgroup_host, std::string seccomp_bpf_base64);

// The request against the policy's runtimes and ceilings (not its inputs).
util::Result<const policy::Runtime*> check_request(const policy::Policy& policy, const JobRequest& request);
// A job's spec. inputs: request.input_ids looked up in the store, in order
// (the first failed lookup is the request's error, prefixed with its id).
util::Result<sandbox::LaunchSpec> build_job_spec(const policy::Policy& policy, const SpecHost& host,
                                                 const JobRequest& request,
                                                 const std::vector<util::Result<store::InputRecord>>& inputs,
                                                 const std::string& job_id);
// A warm sandbox's spec: no code, no inputs; its job's deadline comes with the claim.
sandbox::LaunchSpec build_warm_spec(const policy::Policy& policy, const SpecHost& host, const policy::Runtime& rt,
                                    const std::string& sandbox_id);

}  // namespace broker
