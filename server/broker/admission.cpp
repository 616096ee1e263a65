// Admission control. The CPU budget counts the cpu_ms of finished jobs in a
// sliding hour; a running job is charged when it ends.
#include "server/broker/admission.h"

#include "server/broker/jobs.h"

namespace broker {

uint64_t Admission::cpu_ms_last_hour(const std::string& tenant, Clock::time_point now) {
  auto& q = usage_[tenant];
  while (!q.empty() && now - q.front().first > std::chrono::hours(1)) q.pop_front();
  uint64_t sum = 0;
  for (auto& [_, ms] : q) sum += ms;
  return sum;
}

util::Status Admission::acquire(const std::string& tenant, const std::shared_ptr<Cancellation>& cancel) {
  std::unique_lock lock(mu_);
  auto now = Clock::now();
  const uint64_t budget_ms = limits_.cpu_seconds_per_tenant_per_hour * 1000;
  if (cpu_ms_last_hour(tenant, now) >= budget_ms) {
    auto& q = usage_[tenant];
    auto retry_s = std::chrono::duration_cast<std::chrono::seconds>(q.front().first + std::chrono::hours(1) - now).count() + 1;
    return util::busy_error("busy: this tenant's CPU budget of " +
                                std::to_string(limits_.cpu_seconds_per_tenant_per_hour) +
                                " CPU seconds per hour is spent; retry in " + std::to_string(retry_s) + " s",
                            static_cast<uint64_t>(retry_s));
  }
  auto has_slot = [&] {
    return running_ < limits_.jobs_running_max && running_by_tenant_[tenant] < limits_.jobs_running_per_tenant_max;
  };
  if (!has_slot()) {
    if (queued_ >= limits_.jobs_queued_max)
      return util::make_error("busy", "busy: " + std::to_string(running_) + " jobs running and " +
                                          std::to_string(queued_) +
                                          " waiting (the policy's limits); retry in a few seconds");
    ++queued_;
    // Wake up to notice a cancellation of the queued job, too.
    while (!has_slot() && !(cancel && cancel->requested())) cv_.wait_for(lock, std::chrono::milliseconds(50));
    --queued_;
    if (cancel && cancel->requested()) return util::make_error("cancelled", "cancelled while queued");
  }
  ++running_;
  ++running_by_tenant_[tenant];
  return util::ok_status();
}

void Admission::release(const std::string& tenant, uint64_t cpu_ms) {
  {
    std::lock_guard lock(mu_);
    --running_;
    if (--running_by_tenant_[tenant] == 0) running_by_tenant_.erase(tenant);
    usage_[tenant].emplace_back(Clock::now(), cpu_ms);
  }
  cv_.notify_all();
}

Admission::Load Admission::load() {
  std::lock_guard lock(mu_);
  return {running_, queued_};
}

}  // namespace broker
