// The warm pool: single-use sandboxes built ahead of demand (one runner each,
// namespaces, mounts, cgroup and limits in place, for a "python" loader the
// interpreter started), kept idle per runtime and refilled in the background.
// A job claims one and it is destroyed after that job: never reused, never shared.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stop_token>
#include <string>
#include <thread>

#include "server/broker/identities.h"
#include "server/policy/live.h"
#include "server/policy/policy.h"
#include "server/sandbox/spec.h"
#include "server/util/result.h"

namespace broker {

class RunnerProcess;

// What ends a runner that will not be used: takes it (stdin closed), waits
// for it, removes its scratch directory.
using RetireRunner =
    std::function<void(std::unique_ptr<RunnerProcess>, const std::string& scratch_dir, const std::string& id)>;

// A runtime's template (policy pool.templates): a sandbox whose interpreter
// did the runtime's start-up and preload once and forks the program of
// each warm sandbox of the runtime (server/sandbox/template_fork.h). The
// sandboxes forked from it live inside its namespaces, so each holds it:
// it ends (its runner released) once the last of them has.
struct Template {
  std::unique_ptr<RunnerProcess> runner;  // says nothing after its ready line until it ends
  sandbox::LaunchSpec spec;
  int32_t pid = 0;  // its pid 1, and that one's start time
  uint64_t start_time = 0;
  uint64_t generation = 0;  // of the policy it was built under
  std::atomic<uint64_t> forks{0};
  std::chrono::steady_clock::time_point started;
  std::chrono::steady_clock::duration build_time{};  // spawn to ready: its successor's is about the same
  RetireRunner retire;
  Template() = default;
  Template(const Template&) = delete;
  Template& operator=(const Template&) = delete;
  ~Template();
};

struct WarmSandbox {
  std::shared_ptr<Template> source;       // the template it was forked from, or null; released last
  std::unique_ptr<RunnerProcess> runner;  // waiting for a claim line on its stdin
  sandbox::LaunchSpec spec;               // the warm spec it was built from
  uint64_t generation = 0;                // of the policy it was built under (policy::Live)
  uint64_t memory_bytes = 0;              // measured once ready (PSS of its processes)
  std::function<void()> on_end;           // set by claim: the pool learns its job is over
  WarmSandbox() = default;
  WarmSandbox(const WarmSandbox&) = delete;
  WarmSandbox& operator=(const WarmSandbox&) = delete;
  ~WarmSandbox() {
    if (on_end) on_end();
  }
};

struct PoolStats {
  size_t idle = 0;
  uint64_t idle_memory_bytes = 0;
  uint64_t built = 0, claimed = 0, failed = 0;
};

class Pool {
 public:
  // make_spec: the warm launch spec for a runtime (a fresh sandbox id and scratch dir).
  // retire: takes a runner that will not be used (stdin closed), waits for it, removes its dir.
  // lease: the spec's host identity, held by the runner until it is reaped.
  using MakeSpec = std::function<util::Result<sandbox::LaunchSpec>(const policy::Runtime&, IdentityLease& lease)>;
  using Retire = RetireRunner;
  // policy: its pool section (fixed while the server runs); live: the policy
  // the specs are made under: a sandbox built under an earlier one is never claimed.
  // make_template_spec: a template's spec for a runtime of pool.templates;
  // null: no templates (their runtimes' sandboxes start their own interpreter).
  Pool(const policy::Policy& policy, const policy::Live& live, std::string runner_exe, MakeSpec make_spec,
       Retire retire, MakeSpec make_template_spec = nullptr);
  ~Pool();  // stops refilling and retires every idle sandbox
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // An idle, live warm sandbox of the runtime, or null (the caller runs cold).
  // Waits up to policy pool.claim_wait_ms for one being built. Its job counts
  // as running until the sandbox is destroyed (the caller keeps it until the
  // outcome is read): refilling waits for that, up to kRefillHold, so the
  // build of the next sandbox does not take CPU from the job that claimed.
  std::unique_ptr<WarmSandbox> claim(const std::string& runtime);
  PoolStats stats();
  // After a reload: idle sandboxes built under an earlier policy are retired
  // (the filler builds new ones). Returns how many.
  size_t retire_stale();

 private:
  void fill_loop(std::stop_token stop);
  // A warm sandbox of rt, forked from source if any. ahead: made while no
  // job runs and no claim waits, its fork runs the runtime's warm-up; a
  // refill under load and a fork for a waiting claim do not.
  util::Result<std::unique_ptr<WarmSandbox>> build(const policy::Runtime& rt, std::shared_ptr<Template> source,
                                                   bool ahead);
  bool templated(const std::string& runtime) const;
  std::unique_ptr<WarmSandbox> fork_on_demand(const std::string& runtime, std::shared_ptr<Template> source);
  void hand_out_locked(WarmSandbox& w);  // with mu_ held
  // rt's current template when it is usable (alive, of the live policy,
  // under its fork and age bounds); otherwise, when may_build (the filler
  // only), a new one, else null. One near its bounds is still returned;
  // the filler (may_build) first builds its successor, a claim asks the
  // filler to.
  util::Result<std::shared_ptr<Template>> template_for(const policy::Runtime& rt, bool may_build);
  util::Result<std::shared_ptr<Template>> build_template(const policy::Runtime& rt);

  const policy::Policy& policy_;
  const policy::Live& live_;
  std::string runner_exe_;
  MakeSpec make_spec_;
  Retire retire_;
  MakeSpec make_template_spec_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  std::map<std::string, std::deque<std::unique_ptr<WarmSandbox>>> idle_;
  PoolStats counters_;
  uint64_t claims_ = 0;     // wakes the filler
  int running_ = 0;         // claimed sandboxes whose job has not ended
  int waiting_claims_ = 0;  // claims waiting for a sandbox (claim_wait_ms): never held back
  std::chrono::steady_clock::time_point hold_until_{};
  std::set<std::string> wanted_;  // runtimes claimed at least once (policy pool.first_use)
  std::map<std::string, std::shared_ptr<Template>> templates_;                      // the current one per runtime
  std::map<std::string, std::chrono::steady_clock::time_point> template_retry_at_;  // after a failed build
  std::set<std::string> successors_due_;  // templates near their bounds: built next, never held back
  bool stopping_ = false;
  std::jthread filler_;
};

// Proportional set size of a process and all its descendants, in bytes
// (/proc/<pid>/smaps_rollup, VmRSS where that is unreadable). 0 if none is readable.
uint64_t tree_memory_bytes(pid_t pid);

}  // namespace broker
