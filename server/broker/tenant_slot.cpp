// TenantSlot (tenant_slot.h).
#include "server/broker/tenant_slot.h"

#include <poll.h>

#include <spdlog/spdlog.h>

#include "server/broker/job.h"

namespace broker {

namespace {
// How often a call in line asks whether it moved up.
constexpr int kLinePollMs = 50;
}  // namespace

util::Error database_unavailable(const util::Error& error) {
  if (error.code != util::ErrorCode::kIo && error.code != util::ErrorCode::kBusy) return error;
  spdlog::warn("{}", error.message);
  return util::unavailable_error(
      "unavailable: this server's ledger database does not answer, so it takes no new job now; retry in a few "
      "seconds (through another server too)",
      kUnavailableRetryAfterS);
}

TenantSlot::~TenantSlot() {
  if (held_) ledger_.slot_release(job_id_);
}

util::Status TenantSlot::take(const std::string& tenant, const policy::Admission& limits,
                              const std::shared_ptr<Cancellation>& cancel, const LedgerRow* start) {
  if (!ledger_.shared()) return util::ok_status();
  for (;;) {
    auto state = ledger_.slot_take(job_id_, tenant, limits.jobs_running_per_tenant_max, limits.jobs_queued_max, start);
    if (!state) return database_unavailable(state.error());
    // The servers' queue, not the tenant's budget: no retry time (HTTP 503).
    if (*state == Ledger::SlotState::kBusy)
      return util::busy_error("busy: " + std::to_string(limits.jobs_queued_max) +
                                  " calls already wait for a slot across the servers (this tenant may run " +
                                  std::to_string(limits.jobs_running_per_tenant_max) + " at once); retry later",
                              std::nullopt);
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
