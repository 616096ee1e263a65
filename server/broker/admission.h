// Admission: global and per-tenant limits on running jobs, a bounded wait
// queue, and a per-tenant CPU budget per hour. Beyond them a job is refused at
// once with "busy" and when to retry: backpressure, never a hang. Waiters
// are admitted in arrival order (the first whose tenant has room), woken by the
// release that hands them the slot. Thread-safe; used by the call threads.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/policy/policy.h"
#include "server/util/result.h"

namespace broker {

class Cancellation;

class Admission {
 public:
  explicit Admission(const policy::Admission& limits) : limits_(limits) {}
  // A reload's: held slots stay held; waiters the new limits make room for go now.
  void set_limits(const policy::Admission& limits);
  // Waits for a slot. Errors: "busy" (queue full, budget spent), "cancelled".
  util::Status acquire(const std::string& tenant, const std::shared_ptr<Cancellation>& cancel);
  void release(const std::string& tenant, uint64_t cpu_ms);
  // Jobs holding a slot and jobs waiting for one, now (for /metrics).
  struct Load {
    uint64_t running = 0;
    uint64_t queued = 0;
  };
  Load load();

 private:
  using Clock = std::chrono::steady_clock;
  struct Waiter;
  uint64_t cpu_ms_last_hour(const std::string& tenant, Clock::time_point now);
  // With mu_ held.
  bool has_slot(const std::string& tenant) const;
  void take_slot(const std::string& tenant);
  void free_slot(const std::string& tenant);
  // Hands free slots to waiters in arrival order; returns those to wake.
  std::vector<std::shared_ptr<Waiter>> admit_waiters();
  // After mu_ is released: tells each admitted waiter.
  static void wake(const std::vector<std::shared_ptr<Waiter>>& woken);

  policy::Admission limits_;  // under mu_
  std::mutex mu_;
  uint64_t running_ = 0;
  std::deque<std::shared_ptr<Waiter>> waiters_;  // in arrival order
  std::map<std::string, uint64_t> running_by_tenant_;
  std::map<std::string, std::deque<std::pair<Clock::time_point, uint64_t>>> usage_;
};

}  // namespace broker
