// TenantSlot (tenant_slot.h).
#include "server/broker/tenant_slot.h"

#include <poll.h>

#include "server/broker/job.h"

namespace broker {

namespace {
// How often a call in line asks whether it moved up.
constexpr int kLinePollMs = 50;
}  // namespace

TenantSlot::~TenantSlot() {
  if (held_) ledger_.slot_release(job_id_);
}

util::Status TenantSlot::take(const std::string& tenant, const policy::Admission& limits,
                              const std::shared_ptr<Cancellation>& cancel) {
  if (!ledger_.shared()) return util::ok_status();
  for (;;) {
    auto state = ledger_.slot_take(job_id_, tenant, limits.jobs_running_per_tenant_max, limits.jobs_queued_max);
    if (!state) return state.error();
    if (*state == Ledger::SlotState::kBusy)
      return util::busy_error("busy: " + std::to_string(limits.jobs_queued_max) +
                                  " calls already wait for a slot across the servers (this tenant may run " +
                                  std::to_string(limits.jobs_running_per_tenant_max) + " at once); retry later",
                              1);
    held_ = true;
    if (*state == Ledger::SlotState::kRunning) return util::ok_status();
    struct pollfd p {
      cancel ? cancel->fd() : -1, POLLIN, 0
    };
    if (::poll(&p, 1, kLinePollMs) > 0 || (cancel && cancel->requested()))
      return util::make_error(util::ErrorCode::kCancelled, "cancelled while waiting for a slot");
  }
}

}  // namespace broker
