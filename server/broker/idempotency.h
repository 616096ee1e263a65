// The rule for repeated keyed calls (run_code's idempotency_key), per tenant,
// without a runner (tests/unit/idempotency_test). Thread-safe; no lock is held
// across the ledger read or the run (which calls the client's progress callback).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "server/broker/job.h"
#include "server/broker/ledger.h"
#include "server/util/result.h"

namespace broker {

// The request's identity: everything that changes what runs.
std::string request_sha256(const JobRequest& request);
// The error a conflicting repeat gets (kConflict; HTTP answers it 409).
util::Error key_conflict(const std::string& key);

// - a new key runs its request and is bound to it (the ledger keeps the binding);
// - the same key and request while the first call runs waits and shares its result or error;
// - the same key and request after it ended replays the recorded result, with no second run;
// - the same key with a different request is a conflict, running or ended.
class Idempotency {
 public:
  // The ended (or interrupted) job recorded under tenant's key, if any.
  using FindRecorded = std::function<std::optional<LedgerRow>(const std::string& tenant, const std::string& key)>;
  using Run = std::function<util::Result<JobResult>()>;
  explicit Idempotency(FindRecorded find_recorded) : find_recorded_(std::move(find_recorded)) {}

  // run_once, or what the rule says instead. key "" runs every time.
  util::Result<JobResult> run(const std::string& tenant, const std::string& key, const std::string& request_sha256,
                              const Run& run_once);

 private:
  struct Slot;
  FindRecorded find_recorded_;
  std::mutex mu_;                                           // guards in_flight_ only
  std::map<std::string, std::shared_ptr<Slot>> in_flight_;  // by tenant '\0' key
};

}  // namespace broker
