// What a job is on the broker side: the request a tool makes, the result it
// gets back, and the cancellation another thread may set. Plain types; the
// coordinator is broker::Jobs (jobs.h).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/artifacts/gate.h"
#include "server/sandbox/spec.h"
#include "server/util/fd.h"

namespace broker {

class WorkspaceUse;

// Set from another thread (notifications/cancelled); the job's runner is
// told to kill the whole tree and the job ends as "cancelled".
class Cancellation {
 public:
  Cancellation();
  void cancel();
  bool requested() const { return requested_.load(); }
  int fd() const { return efd_.get(); }  // readable once cancelled

 private:
  util::UniqueFd efd_;
  std::atomic<bool> requested_{false};
};

struct JobRequest {
  std::string tenant;
  std::string runtime;
  std::string code;
  std::vector<std::string> input_ids;
  std::optional<double> timeout_s;
  std::string idempotency_key;            // "" when none
  std::string network;                    // a network profile of the policy; "" for none
  std::vector<std::string> checks;        // acceptance checks the call asks for (policy checks.<name>)
  std::string workspace_id;               // the workspace that is /work; "" for none
  std::vector<std::string> artifact_ids;  // this tenant's artifacts, at /inputs/<name>
  // workspace_id already held for this call (a task holds it from its
  // creation, Jobs::hold_workspace); null: run() takes it.
  std::shared_ptr<WorkspaceUse> workspace_use;
  std::shared_ptr<Cancellation> cancel;                             // may be null
  std::function<void(const nlohmann::json& progress)> on_progress;  // may be empty
  // Set by Jobs for a job with a network profile: the sandbox's proxy listener.
  std::function<void(util::UniqueFd listener)> on_listener;  // may be empty
};

struct ArtifactSummary {
  std::optional<std::string> artifact_id;  // absent when rejected
  std::string name;
  std::string media_type;
  uint64_t size = 0;
  std::string sha256;
  artifacts::VerdictKind verdict = artifacts::VerdictKind::kRejected;
  std::string reason;
};

// One acceptance check's run (checks.h).
struct CheckResult {
  std::string name;
  std::string verdict;  // "pass", "fail" or "error"
  std::string evidence;
  std::string sha256;  // of the check's program as run
  uint64_t duration_ms = 0;
};

struct JobResult {
  std::string job_id;
  sandbox::Outcome outcome;
  std::vector<ArtifactSummary> artifacts;
  std::vector<CheckResult> checks;  // in the order they ran: required ones first
  nlohmann::json network;           // network::to_json(Report) for a job with a profile, else null
  nlohmann::json workspace;         // a workspace job's {workspace_id, size_bytes, ..., full, saved}, else null
  nlohmann::json receipt;           // the signed statement of the run (receipts.h); null for a job that never ran
};

// An artifact as every result shows it: {artifact_id (null when rejected),
// name, media_type, size, sha256, verdict, reason}.
nlohmann::json to_json(const ArtifactSummary& artifact);
// How the program ended, as every result says it: {status, exit_code,
// signal, timed_out, stdout, stderr, stdout_truncated, stderr_truncated,
// duration_ms, cpu_ms, peak_memory_bytes}.
nlohmann::json ending_json(const sandbox::Outcome& outcome);

}  // namespace broker
