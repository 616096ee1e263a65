// The broker's job path: validate a request against the policy, resolve it to a
// launch spec, start the runner (Boost.Process), and turn its outcome into a
// job result with stored artifacts. Called from server worker threads.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <deque>
#include <mutex>
#include <map>
#include <optional>
#include <thread>
#include <string>
#include <memory>
#include <vector>

#include "server/artifacts/gate.h"
#include "server/broker/admission.h"
#include "server/broker/ledger.h"
#include "server/broker/metrics.h"
#include "server/broker/pool.h"
#include "server/policy/policy.h"
#include "server/sandbox/spec.h"
#include "server/store/store.h"
#include "server/util/fd.h"
#include "server/util/result.h"
#include "server/util/worker_pool.h"

namespace broker {

class RunnerProcess;

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
  std::string idempotency_key;                                    // "" when none
  std::shared_ptr<Cancellation> cancel;                          // may be null
  std::function<void(const nlohmann::json& progress)> on_progress;  // may be empty
};

struct ArtifactSummary {
  std::optional<std::string> artifact_id;  // absent when rejected
  std::string name;
  std::string media_type;
  uint64_t size = 0;
  std::string sha256;
  std::string verdict;
  std::string reason;
};

struct JobResult {
  std::string job_id;
  sandbox::Outcome outcome;
  std::vector<ArtifactSummary> artifacts;
};

// An ended job's ledger row as the result run() returned.
JobResult job_result_from_row(const LedgerRow& row);

class Jobs {
 public:
  // cgroup_host: sandbox::cgroups::Host detected once at start-up, as JSON.
  Jobs(const policy::Policy& policy, store::Store& store, std::string runner_exe, nlohmann::json cgroup_host);

  // Errors are request problems (code "invalid_argument" / "not_found") or
  // broker faults ("internal"); a program that fails is a JobResult.
  util::Result<JobResult> run(const JobRequest& request);
  // At start-up: removes what a crashed server left (scratch directories under
  // <state>/run, empty job cgroups). Returns how many were removed.
  size_t reclaim_leftovers();
  // Starts the spare runner, and the warm pool when the policy has one
  // (after reclaim_leftovers: the pool's sandboxes live under <state>/run too).
  void start_pool();
  const artifacts::Gate& gate() const { return gate_; }
  PoolStats pool_stats();
  Metrics& metrics() { return metrics_; }
  Admission::Load admission_load() { return admission_.load(); }
  const std::string& runner_exe() const { return runner_exe_; }
  // The tenant's recorded job; a foreign or unknown id reads as none.
  std::optional<LedgerRow> find_record(const std::string& tenant, const std::string& job_id) {
    return ledger_->find(tenant, job_id);
  }
  // One janitor pass: expired inputs, artifacts, blobs and ledger rows.
  size_t expire();
  ~Jobs();

 private:
  struct Finished;
  struct KeyedRun;
  void reap_loop();
  // rmdir of the sandbox's (empty) job cgroups; how many were removed.
  size_t remove_cgroups(const std::string& sandbox_id) const;
  // The spare runner if there is one (another is then started), else a new one.
  util::Result<std::unique_ptr<RunnerProcess>> take_runner();
  // A spare runner that gets no spec, ready for the reap queue.
  static std::unique_ptr<Finished> unused_spare(std::unique_ptr<RunnerProcess> spare);
  util::Result<JobResult> run_once(const JobRequest& request, const std::string& request_sha256);
  util::Result<sandbox::LaunchSpec> resolve(const JobRequest& request, const std::string& job_id);
  // What every sandbox of a runtime shares (policy limits, identity, layers).
  sandbox::LaunchSpec base_spec(const policy::Runtime& rt, const std::string& id) const;
  util::Result<sandbox::LaunchSpec> warm_spec(const policy::Runtime& rt) const;
  // Hands a runner that is done (or never used) to the reaper.
  void retire(std::unique_ptr<RunnerProcess> runner, const std::string& scratch_dir, const std::string& id);
  // The runner reports, then tears its sandbox down; `finished` receives the
  // process handle so that teardown is waited for off the caller's path.
  // before_start runs on the release thread while the runner builds the
  // sandbox, before the program may start; its error cancels the runner at
  // the start gate and is returned.
  util::Result<sandbox::Outcome> start_runner(const sandbox::LaunchSpec& spec, const JobRequest& request,
                                              std::unique_ptr<Finished>& finished,
                                              const std::function<util::Status()>& before_start);
  // Reads progress and the outcome of a runner that has its spec (or claim).
  util::Result<sandbox::Outcome> exchange(std::unique_ptr<RunnerProcess> runner, const std::string& scratch_dir,
                                          const std::string& job_id, uint64_t timeout_ms, const JobRequest& request,
                                          std::unique_ptr<Finished>& finished);
  std::vector<ArtifactSummary> store_artifacts(const std::string& tenant, const std::string& job_id,
                                               const sandbox::Outcome& outcome);

  const policy::Policy& policy_;
  store::Store& store_;
  std::string runner_exe_;
  nlohmann::json cgroup_host_;
  std::string seccomp_bpf_base64_;
  artifacts::Gate gate_;
  std::unique_ptr<Ledger> ledger_;
  Admission admission_;
  Metrics metrics_;
  // Runs in flight per (tenant, idempotency key): a concurrent repeat waits
  // for the first and shares its result instead of running again.
  std::mutex keys_mu_;
  std::map<std::string, std::shared_ptr<KeyedRun>> keyed_runs_;  // compiled once; every runner installs this program

  // Runners that have reported but may still be tearing their sandbox down,
  // with the scratch directory to remove once they have exited.
  std::mutex reap_mu_;
  std::condition_variable reap_cv_;
  std::deque<std::unique_ptr<Finished>> reap_queue_;
  bool stopping_ = false;
  // One runner started ahead of the next cold job: exec'd, blocked reading
  // its spec, no sandbox yet (that is built per job). The reaper thread
  // starts a new one each time a job takes it.
  std::unique_ptr<RunnerProcess> spare_;
  bool spare_wanted_ = false;
  std::jthread reaper_;
  std::jthread janitor_;  // runs expire() every retention.janitor_interval_s
  // Records a cold job in the ledger and releases its runner (start_runner)
  // while the worker that wrote the spec goes on reading the runner.
  util::WorkerPool release_{1, 256};
  std::unique_ptr<Pool> pool_;  // null when the policy's pool is off; destroyed first
};

}  // namespace broker
