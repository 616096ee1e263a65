// Admission control. The CPU budget counts the cpu_ms of finished jobs in a
// sliding hour; a running job is charged when it ends. A queued job waits in
// poll(2) on its own eventfd (written when release() hands it a slot) and on
// its cancellation's: no timer, no thundering herd, a cancel seen at once.
#include "server/broker/admission.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "server/broker/jobs.h"
#include "server/util/fd.h"
#include "server/util/text.h"

namespace broker {
namespace {

// Only when eventfd() failed (no descriptor left): the waiter looks again this often.
constexpr int kWakeFallbackMs = 50;

}  // namespace

struct Admission::Waiter {
  std::string tenant;
  util::UniqueFd wake;    // eventfd, written once the slot is handed over
  bool admitted = false;  // under mu_: the slot is taken in this waiter's name
};

uint64_t Admission::cpu_ms_last_hour(const std::string& tenant, Clock::time_point now) {
  auto& q = usage_[tenant];
  while (!q.empty() && now - q.front().first > std::chrono::hours(1)) q.pop_front();
  uint64_t sum = 0;
  for (auto& [_, ms] : q) sum += ms;
  return sum;
}

bool Admission::has_slot(const std::string& tenant) const {
  if (running_ >= limits_.jobs_running_max) return false;
  auto it = running_by_tenant_.find(tenant);
  return it == running_by_tenant_.end() || it->second < limits_.jobs_running_per_tenant_max;
}

void Admission::take_slot(const std::string& tenant) {
  ++running_;
  ++running_by_tenant_[tenant];
}

void Admission::free_slot(const std::string& tenant) {
  --running_;
  if (--running_by_tenant_[tenant] == 0) running_by_tenant_.erase(tenant);
}

std::vector<std::shared_ptr<Admission::Waiter>> Admission::admit_waiters() {
  // The earliest waiter whose tenant has room goes first; one whose tenant is
  // at its own limit does not hold up the others. Afterwards no waiter could
  // use a free slot, so a newcomer that finds one takes it from nobody.
  std::vector<std::shared_ptr<Waiter>> woken;
  for (auto it = waiters_.begin(); it != waiters_.end() && running_ < limits_.jobs_running_max;) {
    if (!has_slot((*it)->tenant)) {
      ++it;
      continue;
    }
    take_slot((*it)->tenant);
    (*it)->admitted = true;
    woken.push_back(std::move(*it));
    it = waiters_.erase(it);
  }
  return woken;
}

void Admission::set_limits(const policy::Admission& limits) {
  std::vector<std::shared_ptr<Waiter>> woken;
  {
    std::lock_guard lock(mu_);
    limits_ = limits;
    woken = admit_waiters();
  }
  wake(woken);
}

util::Status Admission::acquire(const std::string& tenant, const std::shared_ptr<Cancellation>& cancel) {
  std::shared_ptr<Waiter> w;
  {
    std::lock_guard lock(mu_);
    auto now = Clock::now();
    const uint64_t budget_ms = limits_.cpu_seconds_per_tenant_per_hour * 1000;
    if (cpu_ms_last_hour(tenant, now) >= budget_ms) {
      auto& q = usage_[tenant];
      auto retry_s =
          std::chrono::duration_cast<std::chrono::seconds>(q.front().first + std::chrono::hours(1) - now).count() + 1;
      return util::busy_error("busy: this tenant's CPU budget of " +
                                  std::to_string(limits_.cpu_seconds_per_tenant_per_hour) +
                                  " CPU seconds per hour is spent; retry in " + std::to_string(retry_s) + " s",
                              static_cast<uint64_t>(retry_s));
    }
    if (has_slot(tenant)) {
      take_slot(tenant);
      return util::ok_status();
    }
    if (waiters_.size() >= limits_.jobs_queued_max)
      return util::make_error(util::ErrorCode::kBusy, "busy: " + std::to_string(running_) + " jobs running and " +
                                                          std::to_string(waiters_.size()) +
                                                          " waiting (the policy's limits); retry in a few seconds");
    w = std::make_shared<Waiter>();
    w->tenant = tenant;
    w->wake = util::UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!w->wake.valid())
      spdlog::warn("admission: eventfd(): {}; the queued job looks for its slot every {} ms", util::errno_name(errno),
                   kWakeFallbackMs);
    waiters_.push_back(w);
  }
  for (;;) {
    pollfd fds[2];
    nfds_t n = 0;
    if (w->wake.valid()) fds[n++] = {w->wake.get(), POLLIN, 0};
    if (cancel) fds[n++] = {cancel->fd(), POLLIN, 0};        // never read by anyone: readable for good once cancelled
    ::poll(fds, n, w->wake.valid() ? -1 : kWakeFallbackMs);  // EINTR: looked at again below
    std::vector<std::shared_ptr<Waiter>> woken;
    {
      std::lock_guard lock(mu_);
      if (cancel && cancel->requested()) {
        if (w->admitted) {
          // Handed a slot as it was cancelled: the next waiter gets it.
          free_slot(tenant);
          woken = admit_waiters();
        } else {
          std::erase(waiters_, w);
        }
      } else if (w->admitted) {
        return util::ok_status();
      } else {
        continue;
      }
    }
    wake(woken);
    return util::make_error(util::ErrorCode::kCancelled, "cancelled while queued");
  }
}

void Admission::release(const std::string& tenant, uint64_t cpu_ms) {
  std::vector<std::shared_ptr<Waiter>> woken;
  {
    std::lock_guard lock(mu_);
    free_slot(tenant);
    usage_[tenant].emplace_back(Clock::now(), cpu_ms);
    woken = admit_waiters();
  }
  wake(woken);
}

Admission::Load Admission::load() {
  std::lock_guard lock(mu_);
  return {running_, waiters_.size()};
}

void Admission::wake(const std::vector<std::shared_ptr<Waiter>>& woken) {
  for (auto& w : woken) {
    if (!w->wake.valid()) continue;  // it looks on its own
    uint64_t one = 1;
    if (::write(w->wake.get(), &one, sizeof one) < 0) continue;  // a bad fd: it looks on its own
  }
}

}  // namespace broker
