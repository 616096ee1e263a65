// The rule for repeated keyed calls (run_code's idempotency_key), per tenant,
// without a runner (tests/unit/idempotency_test). Thread-safe; no lock is held
// across the ledger read or the run (which calls the client's progress callback).
#pragma once
#include <chrono>
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
// What a call's run returns when its ledger row could not be written because
// another server's call with the same key wrote one first: the rule then
// waits for that job as for a repeat (never seen by a client).
inline constexpr const char* kKeyTaken = "idempotency_key: taken by another server's call";
util::Error key_taken();
bool is_key_taken(const util::Error& e);

// - a new key runs its request and is bound to it (the ledger keeps the binding);
// - the same key and request while the first call runs waits and shares its result or error;
// - the same key and request after it ended replays the recorded result, with no second run;
// - the same key with a different request is a conflict, running or ended;
// - on a ledger several servers share, a repeat that finds the key's job
//   running on another server (or loses the race for the key's row to one)
//   waits for that job's end, polling the ledger, and replays it: bounded by
//   the job's timeout and kOtherServerGrace (beyond: busy); a server that
//   dies ends its job as "replica lost", which is replayed too.
// Where reading the ledger costs a round trip (a shared ledger), a first call
// may skip the read before its run (`find_first` false): the run's own row
// insert finds the key taken, and the run then calls recorded() once its row
// is in. A run that fails before that reads the ledger after all, so a
// recorded key is replayed (or refused, or waited for) exactly as if it had
// been read first, whatever made the run fail (an input since deleted, a
// busy server).
class Idempotency {
 public:
  // How often, and how long past the job's own timeout, a wait for another
  // server's job reads the ledger (the grace covers a lost server's lease).
  static constexpr std::chrono::milliseconds kOtherServerPoll{50};
  static constexpr std::chrono::seconds kOtherServerGrace{60};
  // The job recorded under tenant's key, if any.
  using FindRecorded = std::function<std::optional<LedgerRow>(const std::string& tenant, const std::string& key)>;
  using Run = std::function<util::Result<JobResult>()>;
  explicit Idempotency(FindRecorded find_recorded) : find_recorded_(std::move(find_recorded)) {}

  // run_once, or what the rule says instead. key "" runs every time.
  util::Result<JobResult> run(const std::string& tenant, const std::string& key, const std::string& request_sha256,
                              const Run& run_once, bool find_first = true);
  // run_once's row, with this key, is in the ledger: repeats on this server
  // learn the request the key is bound to (a different one is refused at
  // once). Only needed without find_first; a key with no call running here
  // is ignored.
  void recorded(const std::string& tenant, const std::string& key);

 private:
  struct Slot;
  static void finish(Slot& slot, util::Result<JobResult>& result);
  util::Result<JobResult> await_end(const std::string& tenant, const std::string& key, LedgerRow row);
  util::Result<JobResult> follow_row(const std::string& tenant, const std::string& key, const std::string& sha256,
                                     Slot& slot, LedgerRow row);
  FindRecorded find_recorded_;
  std::mutex mu_;                                           // guards in_flight_ only
  std::map<std::string, std::shared_ptr<Slot>> in_flight_;  // by tenant '\0' key
};

}  // namespace broker
