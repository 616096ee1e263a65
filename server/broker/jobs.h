// The broker's job path, a thin coordinator, on server worker threads: a
// request is resolved to a spec (job_spec.h), admitted, recorded (job_records.h),
// run warm or cold (job_launch.h, runner_fleet.h) and its files taken in
// (artifact_intake.h); keyed repeats follow idempotency.h.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "server/artifacts/gate.h"
#include "server/broker/broker.h"
#include "server/broker/identities.h"
#include "server/broker/admission.h"
#include "server/broker/checks.h"
#include "server/broker/idempotency.h"
#include "server/broker/job.h"
#include "server/broker/job_records.h"
#include "server/broker/job_spec.h"
#include "server/broker/ledger.h"
#include "server/broker/metrics.h"
#include "server/broker/pool.h"
#include "server/broker/receipts.h"
#include "server/broker/workspaces.h"
#include "server/network/proxy.h"
#include "server/broker/runner_fleet.h"
#include "server/helper/client.h"
#include "server/policy/live.h"
#include "server/policy/policy.h"
#include "server/store/store.h"
#include "server/util/periodic.h"
#include "server/util/result.h"
#include "server/util/worker_pool.h"

namespace broker {

class Jobs final : public Broker {
 public:
  // cgroup_host: sandbox::cgroups::Host detected once at start-up, as JSON.
  // live: the policy in force; what a reload may not change is read from
  // the policy it holds now, for the server's life.
  Jobs(policy::Live& live, store::Store& store, std::string runner_exe, nlohmann::json cgroup_host);
  ~Jobs();

  // Broker (broker.h).
  util::Result<JobResult> run(const JobRequest& request) override;
  std::string upload_media_type(const std::string& name, const std::string& content) override;
  util::Result<WorkspaceInfo> open_workspace(const std::string& tenant, std::optional<double> ttl_s) override {
    return workspaces_.open(tenant, ttl_s);
  }
  util::Status close_workspace(const std::string& tenant, const std::string& workspace_id) override {
    return workspaces_.close(tenant, workspace_id);
  }
  util::Result<std::shared_ptr<WorkspaceUse>> hold_workspace(const std::string& tenant,
                                                             const std::string& workspace_id) override;
  std::optional<LedgerRow> find_record(const std::string& tenant, const std::string& job_id) override {
    return ledger_->find(tenant, job_id);
  }
  std::string metrics_text(uint64_t sessions_open) override;
  nlohmann::json receipt_key() override { return receipts_.public_key_json(); }
  std::string unready_reason() override;
  // Where the ledger is, for the start-up log line (no password).
  std::string ledger_name() const;

  // At start-up: removes what a crashed server left (scratch directories under
  // <state>/run, empty job cgroups, "running" ledger rows). Returns how many.
  size_t reclaim_leftovers();
  // Starts the parser helper (an error when it cannot confine itself), the
  // spare runner, and the warm pool when the policy has one (after
  // reclaim_leftovers: the pool's sandboxes live under <state>/run too).
  void start_pool();
  const artifacts::Gate& gate() const { return gate_; }
  // upload_media_type: found by the parser helper (libmagic on the client's bytes).
  // A parser helper child's answer to the probe (wire.h kProbe), for doctor.
  util::Result<nlohmann::json> probe_parser();
  PoolStats pool_stats();
  Metrics& metrics() { return metrics_; }
  Workspaces& workspaces() { return workspaces_; }
  Admission::Load admission_load() { return admission_.load(); }
  const std::string& runner_exe() const { return fleet_.runner_exe(); }
  // One janitor pass: expired inputs, artifacts, blobs and ledger rows.
  size_t expire();
  // A reload (reload_problems found none): the network profiles and the
  // admission limits take `next`, which is then in force in live; warm
  // sandboxes built under the last one are retired. Jobs running keep what
  // they started with. An error changes nothing.
  util::Status apply(std::shared_ptr<const policy::Policy> next);

 private:
  // t_begin: when the call came in (now_us), before its key was looked up.
  util::Result<JobResult> run_once(const JobRequest& request, const std::string& request_sha256, int64_t t_begin);
  // A job's acceptance checks once it has ended (checks.h), one after
  // another, each in a sandbox of its own; job_inputs: the job's /inputs.
  std::vector<CheckResult> run_checks(const policy::Policy& policy, const JobRequest& request,
                                      const std::vector<const policy::Check*>& checks, const JobResult& result,
                                      const std::vector<sandbox::InputBind>& job_inputs,
                                      const std::vector<InputRef>& inputs);
  CheckResult run_check(const policy::Policy& policy, const JobRequest& request, const policy::Check& check,
                        const std::vector<sandbox::InputBind>& view);
  // Runtime caches (policy runtimes.<name>.cache), built once per server on
  // cache_builder_ in a sandbox of their own when the runtime is first asked
  // for, keyed by what builds them (runtimes with the same interpreter and
  // cache share one).
  static std::string cache_key(const policy::Runtime& rt);
  util::Result<RuntimeCache> build_cache(const policy::Runtime& rt);
  void build_caches(std::stop_token stop);
  // The runtime's cache if built (asks for it to be built). wait: until that build ended.
  std::optional<RuntimeCache> cache_for(const policy::Runtime& rt, bool wait);
  // The pool's maker of templates' specs, or null when templates cannot run here.
  Pool::MakeSpec template_maker();
  // The job's spec, with its inputs as the ledger row names them.
  util::Result<sandbox::LaunchSpec> resolve(const policy::Policy& policy, const JobRequest& request,
                                            const std::string& job_id, std::vector<InputRef>& inputs);

  policy::Live& live_;
  // The policy at start-up: its runtimes, sandbox, pool, artifacts,
  // workspaces and retention stay for the server's life.
  const std::shared_ptr<const policy::Policy> boot_;
  const policy::Policy& policy_;
  store::Store& store_;
  SpecHost spec_host_;
  Identities identities_;  // each sandbox's host uid (a root server's range) or the server's
  artifacts::Gate gate_;
  std::unique_ptr<Ledger> ledger_;
  ReceiptSigner receipts_;  // <state>/receipt-key.pem
  RuntimeFingerprints fingerprints_;
  Workspaces workspaces_;
  Admission admission_;
  Metrics metrics_;
  Idempotency keys_;
  RunnerFleet fleet_;
  util::Periodic janitor_;  // runs expire() every retention.janitor_interval_s
  // Records a cold job in the ledger and releases its runner (start_cold)
  // while the worker that wrote the spec goes on reading the runner.
  util::WorkerPool release_{1, 256};
  // The parser helper: every byte a job or an upload made is parsed there.
  IdentityLease parser_lease_;  // its uid, as root
  std::unique_ptr<helper::Parsers> parsers_;
  // The proxy's CA for hosts whose requests it reads (<state>/egress-ca*.pem).
  std::unique_ptr<network::EgressCa> egress_ca_;
  // The egress proxy (its request heads parsed by parsers_): null only when
  // it could not start and the policy has no network profiles.
  std::unique_ptr<network::Proxy> proxy_;
  std::mutex caches_mu_;
  std::condition_variable caches_cv_;
  std::map<std::string, RuntimeCache> caches_;  // by cache_key
  std::set<std::string> caches_requested_;      // queued or being built
  std::map<std::string, std::chrono::steady_clock::time_point> caches_failed_at_;
  std::deque<const policy::Runtime*> caches_queue_;
  bool caches_stopping_ = false;
  std::jthread cache_builder_;  // stopped before the pool, which may wait for it
  std::jthread fingerprinter_;  // the pool runtimes' fingerprints, at start (start_pool)
  std::unique_ptr<Pool> pool_;  // null when the policy's pool is off; destroyed first
};

}  // namespace broker
