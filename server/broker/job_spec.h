// A request resolved to the sandbox's launch spec: pure functions of the
// request, the policy and what the server learnt at start-up, no I/O, so
// that what a job gets can be tested without a runner (tests/unit/job_spec_test).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/broker/identities.h"
#include "server/broker/job.h"
#include "server/policy/policy.h"
#include "server/sandbox/spec.h"
#include "server/store/store.h"
#include "server/util/result.h"

namespace broker {

// What the kernel counts per user and a sandbox could use up for others
// (docs/boundary.md): the server's own limits, or one sandbox's share.
struct UserShares {
  uint64_t sigpending = 0;         // RLIMIT_SIGPENDING: queued signals
  uint64_t msgqueue_bytes = 0;     // RLIMIT_MSGQUEUE: POSIX message queue bytes
  uint64_t inotify_instances = 0;  // /proc/sys/user/max_inotify_instances
  uint64_t inotify_watches = 0;    // /proc/sys/user/max_inotify_watches
};
// Each of `sandboxes` live sandboxes gets 1/(sandboxes + 1) of the host's
// limits: all of them at their limit still leave the server's user a share.
UserShares user_shares(const UserShares& host, uint64_t sandboxes);
// The most sandboxes of this policy alive at once: running jobs, idle warm
// ones, and one being built or torn down.
uint64_t sandboxes_max(const policy::Policy& policy);

// Fixed for the server's life; every spec carries it.
struct SpecHost {
  std::string state_dir;           // scratch directories are <state_dir>/run/<sandbox id>
  nlohmann::json cgroup_host;      // sandbox::cgroups::Host as JSON
  std::string seccomp_bpf_base64;  // the filter, compiled once
  // A template's (sandbox::seccomp::Role::template_process): "" until set;
  // the runner then compiles it for each template.
  std::string template_seccomp_bpf_base64;
  UserShares shares;           // one sandbox's share (user_shares)
  std::string ca_bundle_path;  // the egress CA bundle (network::EgressCa::write_bundle)
  // Runtimes with an image: the image's unpacked tree (image::ensure_cached).
  std::map<std::string, std::string> runtime_roots;
};
SpecHost spec_host(std::string state_dir, nlohmann::json cgroup_host, std::string seccomp_bpf_base64,
                   UserShares shares);

// The request against the policy's runtimes and ceilings (not its inputs).
util::Result<const policy::Runtime*> check_request(const policy::Policy& policy, const JobRequest& request);
// The host identity a sandbox's spec gets from its lease (identities.h).
// Subordinate ids are mapped as 1 in the runner's own user namespace (spec.h).
void set_identity(sandbox::LaunchSpec& spec, const Identity& id);
// A job's spec (its identity unset until the runner is chosen). inputs: request.input_ids looked up in the store, in order
// (the first failed lookup is the request's error, prefixed with its id).
util::Result<sandbox::LaunchSpec> build_job_spec(const policy::Policy& policy, const SpecHost& host,
                                                 const JobRequest& request,
                                                 const std::vector<util::Result<store::InputRecord>>& inputs,
                                                 const std::string& job_id);
// A runtime's cache as built (Jobs): a host directory of plain files.
struct RuntimeCache {
  std::string dir;
  std::vector<std::string> files;
};
// The cache shown to a sandbox of rt: its files copied read-only into the
// sandbox, linked from the directory rt.cache_env names (policy load checked
// it is /tmp/<name>).
void apply_cache(const policy::Policy& policy, const policy::Runtime& rt, const RuntimeCache& cache,
                 sandbox::LaunchSpec& spec);
// The sandbox that builds rt's cache: cold, rt.cache_code as its program, no
// inputs, no network, rt.cache_env pointing at /outputs (harvested, then the cache).
sandbox::LaunchSpec build_cache_spec(const policy::Policy& policy, const SpecHost& host, const policy::Runtime& rt,
                                     const std::string& sandbox_id);
// The Python statement that imports rt.preload, then gc.freeze().
std::string preload_statement(const policy::Runtime& rt);
// A template's loader line instead (template_fork.h): the preload and
// ctypes, frozen; then the template's loop, which returns only in a fork
// made for a job, which reseeds what the imports seeded (random, numpy's
// global generator, tempfile's names: every fork has the same pid in its
// namespace, so tempfile would not notice; multiprocessing's authkey).
std::string template_statement(const policy::Runtime& rt);
// rt's template (policy pool.templates): a warm spec (identity unset) whose
// loader runs template_statement, listening at template.sock in its scratch
// directory, `library` (libthrowbox-template.so) bound in.
sandbox::LaunchSpec build_template_spec(const policy::Policy& policy, const SpecHost& host, const policy::Runtime& rt,
                                        const std::string& sandbox_id, const std::string& library);
// A warm spec made one whose program is forked from the template whose pid
// 1 is `pid`, started at `start_time`, listening at `socket`.
void fork_from_template(sandbox::LaunchSpec& spec, int32_t pid, uint64_t start_time, const std::string& socket);
// The spec moved to another sandbox id: its job_id (which names the cgroup),
// scratch and harvest directories (a prepared spare runner's, RunnerFleet).
void move_to_sandbox(sandbox::LaunchSpec& spec, const std::string& sandbox_id);
// An acceptance check's sandbox (cold, or the claim made from it): the
// check's runtime, its program (code_file's text run as a job's code, or its
// command run as given), `view` as its inputs (/job: result.json,
// inputs/<name>, artifacts/<name>), its own deadline and its stdout cap; no
// network, no workspace.
sandbox::LaunchSpec build_check_spec(const policy::Policy& policy, const SpecHost& host, const policy::Runtime& rt,
                                     const policy::Check& check, const std::string& code,
                                     std::vector<sandbox::InputBind> view, const std::string& sandbox_id);
// A warm sandbox's spec: no code, no inputs; its job's deadline comes with the claim.
sandbox::LaunchSpec build_warm_spec(const policy::Policy& policy, const SpecHost& host, const policy::Runtime& rt,
                                    const std::string& sandbox_id);

}  // namespace broker
