// A job's tenant slot across the servers that share a ledger (Ledger::
// slot_take): taken before the server's own admission, waited for in line
// (polling the ledger, cancellable), given back by the job's recorded end or,
// on every other way out, by this guard. Nothing to do on a ledger that is
// not shared.
#pragma once
#include <memory>
#include <string>

#include "server/broker/ledger.h"
#include "server/policy/policy.h"
#include "server/util/result.h"

namespace broker {

class Cancellation;

// A shared ledger's failure to answer, as the call is told: unavailable
// (HTTP 503 with Retry-After), the database's own message in the log only.
// Any other error passes as it is.
inline constexpr uint64_t kUnavailableRetryAfterS = 5;
util::Error database_unavailable(const util::Error& error);

class TenantSlot {
 public:
  TenantSlot(Ledger& ledger, std::string job_id) : ledger_(ledger), job_id_(std::move(job_id)) {}
  ~TenantSlot();
  TenantSlot(const TenantSlot&) = delete;
  TenantSlot& operator=(const TenantSlot&) = delete;

  // Errors: busy (the line is full), cancelled, or the ledger's own.
  // `start`: the job's row, recorded with the slot where the ledger can
  // (Ledger::slot_take).
  util::Status take(const std::string& tenant, const policy::Admission& limits,
                    const std::shared_ptr<Cancellation>& cancel, const LedgerRow* start = nullptr);
  // The ledger gave it back (record_end): nothing left to do.
  void given_back() { held_ = false; }

 private:
  Ledger& ledger_;
  const std::string job_id_;
  bool held_ = false;  // a row in the ledger, running or queued
};

}  // namespace broker
