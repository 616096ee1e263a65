// Warm pool. One filler thread builds sandboxes one at a time (so refilling
// never takes more than one core from running jobs) and backs off after a
// failure; claims never wait for it.
#include "server/broker/pool.h"

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <spdlog/spdlog.h>
#include <sstream>
#include <vector>

#include "server/broker/runner_process.h"
#include "server/broker/runner_protocol.h"
#include "server/util/fs.h"

namespace broker {
namespace {

constexpr int kBuildTimeoutMs = 15000;  // set-up plus the loader's start-up, far above the measured cost
// A loader that imports modules first (numpy, pandas, matplotlib: 3-5 s on a
// busy 2-core host, several times that in an emulated guest).
constexpr int kPreloadBuildTimeoutMs = 120000;
constexpr auto kBackoffMin = std::chrono::milliseconds(500);
// How long a refill waits for the job that claimed to end. Building a sandbox
// (a runner's exec, namespaces, mounts, a loader's start-up) beside a short
// job on 2 vCPUs cost it 1.7 ms of a 7.7 ms warm call (bench/speed.py
// --trace-only, 0.3 s gaps); a job that runs longer gains nothing from waiting.
constexpr auto kRefillHold = std::chrono::milliseconds(100);
constexpr auto kBackoffMax = std::chrono::seconds(30);
// After a template failed to build, its runtime's sandboxes start their own
// interpreter this long before the next try.
constexpr auto kTemplateRetry = std::chrono::seconds(60);

// A warm runner says nothing until it is claimed: anything readable on its
// stdout (an error outcome, EOF) means it is no longer usable.
bool still_idle(RunnerProcess& r) {
  struct pollfd p {
    r.stdout_fd(), POLLIN, 0
  };
  return ::poll(&p, 1, 0) == 0;
}

uint64_t kb_field(const std::string& path, const char* field) {
  std::ifstream in(path);
  std::string line;
  const size_t n = std::char_traits<char>::length(field);
  while (std::getline(in, line))
    if (line.compare(0, n, field) == 0) return std::strtoull(line.c_str() + n, nullptr, 10) * 1024;
  return 0;
}

}  // namespace

uint64_t tree_memory_bytes(pid_t pid) {
  uint64_t total = 0;
  std::vector<pid_t> todo{pid};
  while (!todo.empty()) {
    pid_t p = todo.back();
    todo.pop_back();
    std::string base = "/proc/" + std::to_string(p);
    uint64_t pss = kb_field(base + "/smaps_rollup", "Pss:");
    total += pss ? pss : kb_field(base + "/status", "VmRSS:");
    // Children are listed per thread (the one that forked them).
    std::error_code ec;
    for (auto& task : std::filesystem::directory_iterator(base + "/task", ec)) {
      std::ifstream children(task.path() / "children");
      for (pid_t c; children >> c;) todo.push_back(c);
    }
  }
  return total;
}

Template::~Template() {
  if (!runner) return;
  spdlog::info("warm pool: a template (pid {}) ends after {} fork(s)", pid, forks.load());
  runner->close_stdin();  // EOF: the template's runner tears it down (and whatever still lives inside)
  retire(std::move(runner), spec.scratch_dir, spec.job_id);
}

Pool::Pool(const policy::Policy& policy, const policy::Live& live, std::string runner_exe, MakeSpec make_spec,
           Retire retire, MakeSpec make_template_spec)
    : policy_(policy),
      live_(live),
      runner_exe_(std::move(runner_exe)),
      make_spec_(std::move(make_spec)),
      retire_(std::move(retire)),
      make_template_spec_(std::move(make_template_spec)) {
  filler_ = std::jthread([this](std::stop_token stop) { fill_loop(stop); });
}

Pool::~Pool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  filler_.request_stop();
  cv_.notify_all();
  filler_ = std::jthread();
  std::lock_guard lock(mu_);
  for (auto& [_, queue] : idle_)
    for (auto& w : queue) {
      w->runner->close_stdin();  // EOF: the runner tears its sandbox down and exits
      retire_(std::move(w->runner), w->spec.scratch_dir, w->spec.job_id);
    }
  idle_.clear();
  templates_.clear();  // each ends once the last sandbox forked from it has
}

size_t Pool::retire_stale() {
  const uint64_t generation = live_.generation();
  size_t retired = 0;
  {
    std::lock_guard lock(mu_);
    for (auto& [_, queue] : idle_)
      for (auto it = queue.begin(); it != queue.end();) {
        if ((*it)->generation == generation) {
          ++it;
          continue;
        }
        (*it)->runner->close_stdin();
        retire_(std::move((*it)->runner), (*it)->spec.scratch_dir, (*it)->spec.job_id);
        it = queue.erase(it);
        ++retired;
      }
    // Templates of an earlier policy: replaced by the filler, ended once
    // the jobs forked from them have.
    for (auto it = templates_.begin(); it != templates_.end();)
      it = it->second->generation == generation ? std::next(it) : templates_.erase(it);
  }
  cv_.notify_all();  // the filler builds their successors
  return retired;
}

std::unique_ptr<WarmSandbox> Pool::claim(const std::string& runtime) {
  std::unique_ptr<WarmSandbox> got;
  bool pooled = false;
  for (auto& name : policy_.pool.runtimes) pooled = pooled || name == runtime;
  if (!pooled) return nullptr;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(policy_.pool.claim_wait_ms);
  // With a live template, a claim that finds none idle does not wait for
  // one: it is forked on the spot.
  std::shared_ptr<Template> source;
  if (const policy::Runtime* rt = templated(runtime) ? policy_.find_runtime(runtime) : nullptr) {
    auto t = template_for(*rt, false);
    if (t) source = std::move(*t);
  }
  {
    std::unique_lock lock(mu_);
    ++claims_;
    wanted_.insert(runtime);  // a first_use runtime is built from now on
    cv_.notify_all();         // the filler may be asleep: this is demand
    auto& queue = idle_[runtime];
    if (queue.empty() && policy_.pool.claim_wait_ms && !source) {
      ++waiting_claims_;
      cv_.notify_all();  // a held refill goes now
      cv_.wait_until(lock, deadline, [&] { return !queue.empty() || stopping_; });
      --waiting_claims_;
    }
    const uint64_t generation = live_.generation();
    while (!queue.empty()) {
      auto w = std::move(queue.front());
      queue.pop_front();
      if (w->generation != generation) {  // made under a policy a reload replaced
        w->runner->close_stdin();
        retire_(std::move(w->runner), w->spec.scratch_dir, w->spec.job_id);
        continue;
      }
      if (still_idle(*w->runner)) {
        got = std::move(w);
        hand_out_locked(*got);
        break;
      }
      spdlog::warn("warm sandbox {} ({}) died while idle; discarded", w->spec.job_id, runtime);
      ++counters_.failed;
      w->runner->close_stdin();
      retire_(std::move(w->runner), w->spec.scratch_dir, w->spec.job_id);
    }
  }
  cv_.notify_all();  // refill
  if (!got && templated(runtime)) got = fork_on_demand(runtime, std::move(source));
  return got;
}

// A claim that found none idle, of a runtime with a live template: a
// sandbox forked from it now, in the caller's thread (a fork and the
// sandbox's steps: milliseconds, where a start of its own takes seconds).
std::unique_ptr<WarmSandbox> Pool::fork_on_demand(const std::string& runtime, std::shared_ptr<Template> source) {
  const policy::Runtime* rt = policy_.find_runtime(runtime);
  if (!rt) return nullptr;
  if (!source) {  // none was live when the claim began: one may be now
    auto t = template_for(*rt, false);
    if (!t || !*t) return nullptr;
    source = std::move(*t);
  }
  auto built = build(*rt, std::move(source), false);
  if (!built) {
    spdlog::warn("warm pool: forking a {} sandbox for a claim failed: {}", runtime, built.error().message);
    std::lock_guard lock(mu_);
    ++counters_.failed;
    return nullptr;
  }
  std::unique_ptr<WarmSandbox> got = std::move(*built);
  spdlog::debug("warm pool: a {} sandbox forked on demand for a claim ({})", runtime, got->spec.job_id);
  std::lock_guard lock(mu_);
  hand_out_locked(*got);
  return got;
}

// A sandbox given to a claim: its job counts as running until the sandbox
// is destroyed (on_end), and refills wait for it up to kRefillHold.
void Pool::hand_out_locked(WarmSandbox& w) {
  ++counters_.claimed;
  ++running_;
  hold_until_ = std::chrono::steady_clock::now() + kRefillHold;
  w.on_end = [this] {
    {
      std::lock_guard end_lock(mu_);
      --running_;
    }
    cv_.notify_all();
  };
}

bool Pool::templated(const std::string& runtime) const {
  if (!make_template_spec_) return false;
  const auto& names = policy_.pool.templates;
  return std::find(names.begin(), names.end(), runtime) != names.end();
}

util::Result<std::shared_ptr<Template>> Pool::template_for(const policy::Runtime& rt, bool may_build) {
  // In use until its successor is ready: the filler builds that one once
  // three quarters of the forks are spent, or of the age (earlier when
  // three of its own builds would not fit in the rest, up to half), so
  // claims under a burst keep forking while it builds; the limits
  // themselves still hold.
  std::shared_ptr<Template> current;
  {
    std::lock_guard lock(mu_);
    auto it = templates_.find(rt.name);
    if (it != templates_.end()) {
      Template& t = *it->second;
      const bool alive = still_idle(*t.runner);
      const uint64_t forks_max = policy_.pool.template_forks_max;
      const auto age_max = std::chrono::seconds(policy_.pool.template_age_max_s);
      const auto age = std::chrono::steady_clock::now() - t.started;
      if (alive && t.generation == live_.generation() && t.forks < forks_max && age < age_max) {
        const auto age_margin = std::min<std::chrono::steady_clock::duration>(
            std::max<std::chrono::steady_clock::duration>(age_max / 4, 3 * t.build_time), age_max / 2);
        const bool due = t.forks >= forks_max - std::max<uint64_t>(1, forks_max / 4) || age >= age_max - age_margin;
        if (!due) return it->second;
        if (!may_build) {
          if (successors_due_.insert(rt.name).second) cv_.notify_all();
          return it->second;
        }
        current = it->second;
      } else {
        if (!alive) spdlog::warn("warm pool: the {} template ended; a new one follows", rt.name);
        templates_.erase(it);  // the last sandbox forked from it ends it
      }
    }
    if (!may_build) return std::shared_ptr<Template>();
    auto retry = template_retry_at_.find(rt.name);
    if (retry != template_retry_at_.end() && std::chrono::steady_clock::now() < retry->second) {
      if (current) return current;
      return util::make_error(util::ErrorCode::kSandbox, "its last template failed; retried later");
    }
  }
  auto built = build_template(rt);
  std::lock_guard lock(mu_);
  if (!built) {
    template_retry_at_[rt.name] = std::chrono::steady_clock::now() + kTemplateRetry;
    if (current) {
      spdlog::warn("warm pool: the {} template's successor failed ({}); the current one serves until its limits",
                   rt.name, built.error().message);
      return current;
    }
    return built.error();
  }
  template_retry_at_.erase(rt.name);
  if (current)
    spdlog::info("warm pool: the {} template's successor is ready; the old one ends with its forks", rt.name);
  templates_[rt.name] = *built;
  return *built;
}

util::Result<std::shared_ptr<Template>> Pool::build_template(const policy::Runtime& rt) {
  IdentityLease lease;
  const uint64_t generation = live_.generation();
  auto spec = make_template_spec_(rt, lease);
  if (!spec) return spec.error();
  if (auto s = util::make_dirs(spec->scratch_dir, 0700); !s) return s.error();
  auto runner = RunnerProcess::spawn(runner_exe_);
  if (!runner) {
    (void)util::remove_tree(spec->scratch_dir);
    return runner.error();
  }
  auto t = std::make_shared<Template>();
  t->runner = std::move(*runner);
  t->runner->hold(std::move(lease));
  t->spec = std::move(*spec);
  t->generation = generation;
  t->retire = retire_;
  const auto t0 = std::chrono::steady_clock::now();
  if (!t->runner->write_line(to_json(t->spec).dump()))
    return util::make_error(util::ErrorCode::kSandbox, "writing the template's spec to the runner failed");
  auto ready = read_template_ready(*t->runner, kPreloadBuildTimeoutMs);
  if (!ready) return ready.error();  // t's destructor retires the runner
  t->pid = ready->pid;
  t->start_time = ready->start_time;
  t->started = std::chrono::steady_clock::now();
  t->build_time = t->started - t0;
  const uint64_t memory_bytes = tree_memory_bytes(t->runner->pid());
  spdlog::info("warm pool: {} template ready in {} ms, {} KiB (PSS)", rt.name,
               std::chrono::duration_cast<std::chrono::milliseconds>(t->started - t0).count(), memory_bytes / 1024);
  return t;
}

PoolStats Pool::stats() {
  std::lock_guard lock(mu_);
  PoolStats s = counters_;
  for (auto& [_, queue] : idle_)
    for (auto& w : queue) {
      ++s.idle;
      s.idle_memory_bytes += w->memory_bytes;
    }
  return s;
}

util::Result<std::unique_ptr<WarmSandbox>> Pool::build(const policy::Runtime& rt, std::shared_ptr<Template> source,
                                                       bool ahead) {
  if (source) {
    // One fork of the template's budget, checked and taken in one step:
    // claims forking on demand and the filler, at once, never fork past it.
    const uint64_t forks_max = policy_.pool.template_forks_max;
    uint64_t n = source->forks.load();
    do {
      if (n >= forks_max)
        return util::make_error(util::ErrorCode::kSandbox,
                                "its template has made the forks it may (pool.template_forks_max); its successor "
                                "makes the next");
    } while (!source->forks.compare_exchange_weak(n, n + 1));
  }
  IdentityLease lease;
  // Read before the spec is made: a reload in between makes it stale, never current.
  const uint64_t generation = source ? source->generation : live_.generation();
  auto spec = make_spec_(rt, lease);
  if (!spec) return spec.error();
  if (source) {
    spec->from_template_pid = source->pid;
    spec->from_template_start_time = source->start_time;
    spec->from_template_socket = source->spec.template_socket;
    spec->from_template_ahead = ahead;
  }
  if (auto s = util::make_dirs(spec->scratch_dir, 0700); !s) return s.error();
  auto runner = RunnerProcess::spawn(runner_exe_);
  if (!runner) {
    (void)util::remove_tree(spec->scratch_dir);
    return runner.error();
  }
  auto w = std::make_unique<WarmSandbox>();
  w->source = std::move(source);
  w->runner = std::move(*runner);
  w->runner->hold(std::move(lease));
  w->spec = std::move(*spec);
  w->generation = generation;
  auto fail = [&](const std::string& why) {
    w->runner->close_stdin();
    retire_(std::move(w->runner), w->spec.scratch_dir, w->spec.job_id);
    return util::make_error(util::ErrorCode::kSandbox, why);
  };
  if (!w->runner->write_line(to_json(w->spec).dump())) return fail("writing the warm spec to the runner failed");
  const int timeout_ms = rt.preload.empty() || w->source ? kBuildTimeoutMs : kPreloadBuildTimeoutMs;
  const auto t0 = std::chrono::steady_clock::now();
  if (util::Status ready = read_warm_ready(*w->runner, timeout_ms); !ready) return fail(ready.error().message);
  w->memory_bytes = tree_memory_bytes(w->runner->pid());
  spdlog::debug("warm pool: {} sandbox {} ready in {} ms, {} KiB (PSS)", rt.name, w->spec.job_id,
                std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count(),
                w->memory_bytes / 1024);
  return w;
}

void Pool::fill_loop(std::stop_token stop) {
  std::vector<const policy::Runtime*> pooled;
  for (auto& name : policy_.pool.runtimes)
    if (const policy::Runtime* rt = policy_.find_runtime(name)) pooled.push_back(rt);
  auto backoff = kBackoffMin;
  while (!stop.stop_requested()) {
    const policy::Runtime* next = nullptr;
    bool ahead = false;
    {
      std::unique_lock lock(mu_);
      if (!successors_due_.empty()) {
        // A template near its bounds: its successor now, whatever runs,
        // so claims keep finding one when it reaches them.
        const policy::Runtime* rt = policy_.find_runtime(*successors_due_.begin());
        successors_due_.erase(successors_due_.begin());
        if (rt && templated(rt->name)) {
          lock.unlock();
          if (auto t = template_for(*rt, true); !t)
            spdlog::warn("warm pool: no {} template ({})", rt->name, t.error().message);
        }
        continue;
      }
      uint64_t memory = 0;
      for (auto& [_, queue] : idle_)
        for (auto& w : queue) memory += w->memory_bytes;
      if (memory < policy_.pool.idle_memory_max_bytes)
        for (const policy::Runtime* rt : pooled) {
          const auto& lazy = policy_.pool.first_use;
          if (std::find(lazy.begin(), lazy.end(), rt->name) != lazy.end() && !wanted_.count(rt->name)) continue;
          if (idle_[rt->name].size() < policy_.pool.size &&
              (!next || idle_[rt->name].size() < idle_[next->name].size()))
            next = rt;
        }
      if (!next) {
        // Full (or at the memory bound): sleep until a claim.
        const uint64_t seen = claims_;
        cv_.wait(lock, stop, [&] { return claims_ != seen || !successors_due_.empty(); });
        continue;
      }
      if (running_ > 0 && waiting_claims_ == 0 && std::chrono::steady_clock::now() < hold_until_) {
        // A job that claimed is running: let it have the CPUs first.
        cv_.wait_until(lock, stop, hold_until_,
                       [&] { return running_ == 0 || waiting_claims_ > 0 || !successors_due_.empty(); });
        continue;
      }
      // With no job running the refill's fork runs the runtime's warm-up
      // (the next call finds its pages copied); under a burst it does not,
      // its CPU is the jobs' (a pandas warm-up costs more than it saves one).
      ahead = running_ == 0 && waiting_claims_ == 0;
    }
    // A templated runtime's sandboxes are forked from its template (built
    // first when there is none); without one, they start their own.
    std::shared_ptr<Template> source;
    if (templated(next->name)) {
      auto t = template_for(*next, true);
      if (t)
        source = std::move(*t);
      else
        spdlog::warn("warm pool: no {} template ({}); this sandbox starts its own interpreter", next->name,
                     t.error().message);
    }
    auto built = build(*next, std::move(source), ahead);
    std::unique_lock lock(mu_);
    if (!built) {
      ++counters_.failed;
      spdlog::warn("warm pool: building a {} sandbox failed: {}; retrying in {} ms", next->name, built.error().message,
                   std::chrono::duration_cast<std::chrono::milliseconds>(backoff).count());
      cv_.wait_for(lock, stop, backoff, [] { return false; });
      backoff = std::min<std::chrono::milliseconds>(backoff * 2, kBackoffMax);
      continue;
    }
    backoff = kBackoffMin;
    ++counters_.built;
    idle_[next->name].push_back(std::move(*built));
    cv_.notify_all();  // a claim may be waiting for it
  }
}

}  // namespace broker
