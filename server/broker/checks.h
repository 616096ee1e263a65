// Acceptance checks: programs the operator installs (policy checks.<name>),
// run after a job has ended, each in a fresh sandbox of its own that sees the
// job only through read-only copies made by the server (/job/result.json,
// /job/inputs/<name>, /job/artifacts/<name> as the gate delivered them). The
// job's code never runs beside them and cannot reach what they read. The
// pure parts (which checks run, what a check is shown, its verdict) are here;
// broker::Jobs runs them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/broker/job.h"
#include "server/broker/job_records.h"
#include "server/policy/policy.h"
#include "server/sandbox/spec.h"
#include "server/util/result.h"

namespace broker {

// The checks a job of `runtime` runs: those the runtime requires, then those
// the call asked for, each once. An asked name the policy lacks is the
// call's error (kInvalidArgument, naming it and the checks there are).
util::Result<std::vector<const policy::Check*>> checks_to_run(const policy::Policy& policy, const std::string& runtime,
                                                              const std::vector<std::string>& asked);

// An artifact a check finds at /job/artifacts/<name>: one the gate let out,
// whose name is not too deep for the view.
bool in_view(const ArtifactSummary& artifact);

// What a check's sha256 is of: its code_file's text as read for this run, or
// its command's arguments, each followed by a NUL byte.
std::string check_program_sha256(const policy::Check& check, const std::string& code);

// /job/result.json: the job's result as the check sees it (status, exit,
// stdout, stderr, artifact metadata, inputs by name and sha256).
nlohmann::json check_view_json(const JobResult& result, const std::string& runtime,
                               const std::vector<InputRef>& inputs);

// The check's verdict from its sandbox's outcome: its last stdout line, a
// JSON object {"verdict": "pass"|"fail", "evidence": "..."}, when the program
// exited by itself ("pass" only with exit status 0). Anything else (no such
// line, a timeout, a signal, its memory limit, a sandbox error, output past
// max_output_bytes, "pass" with a failing exit) is "error", its evidence
// saying why.
CheckResult check_verdict(const sandbox::Outcome& outcome, uint64_t max_output_bytes);

// A check that gave no verdict of its own: "error", and why.
CheckResult check_error(const std::string& why);

nlohmann::json to_json(const CheckResult& check);
std::vector<CheckResult> checks_from_json(const nlohmann::json& list);

}  // namespace broker
