// Admission: global and per-tenant limits on running jobs, a bounded wait
// queue, and a per-tenant CPU budget per hour. Beyond them a job is refused at
// once with "busy" and when to retry: backpressure, never a hang.
// Thread-safe; used by the broker's worker threads.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "server/policy/policy.h"
#include "server/util/result.h"

namespace broker {

class Cancellation;

class Admission {
 public:
  explicit Admission(const policy::Admission& limits) : limits_(limits) {}
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
  uint64_t cpu_ms_last_hour(const std::string& tenant, Clock::time_point now);

  const policy::Admission limits_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t running_ = 0;
  uint64_t queued_ = 0;
  std::map<std::string, uint64_t> running_by_tenant_;
  std::map<std::string, std::deque<std::pair<Clock::time_point, uint64_t>>> usage_;
};

}  // namespace broker
