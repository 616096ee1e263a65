// Idempotency keys. The first call with a key takes its slot before it reads
// the ledger, so a concurrent repeat cannot also miss the record and run
// again; repeats wait on the slot's own lock, never the table's.
#include "server/broker/idempotency.h"

#include <chrono>
#include <condition_variable>
#include <thread>
#include <spdlog/spdlog.h>

#include "server/broker/job_records.h"
#include "server/util/crypto.h"

namespace broker {

struct Idempotency::Slot {
  std::string sha256;  // the first call's request
  std::mutex mu;
  std::condition_variable cv;
  std::optional<std::string> bound_sha256;  // the request the key is bound to, once known
  bool recorded = false;                    // the first call's row is in the ledger (recorded())
  bool done = false;
  std::optional<JobResult> result;
  util::Error error;
};

std::string request_sha256(const JobRequest& req) {
  nlohmann::json canonical{{"runtime", req.runtime},
                           {"code", req.code},
                           {"input_ids", req.input_ids},
                           {"timeout_s", req.timeout_s ? nlohmann::json(*req.timeout_s) : nlohmann::json(nullptr)}};
  // Only when set: a key's hash from before network profiles stays the same.
  if (!req.network.empty()) canonical["network"] = req.network;
  if (!req.workspace_id.empty()) canonical["workspace_id"] = req.workspace_id;
  if (!req.artifact_ids.empty()) canonical["artifact_ids"] = req.artifact_ids;
  if (!req.checks.empty()) canonical["checks"] = req.checks;
  return util::sha256_hex(canonical.dump());
}

util::Error key_conflict(const std::string& key) {
  return util::make_error(
      util::ErrorCode::kConflict,
      "idempotency_key: \"" + key +
          "\" was already used for a different request (runtime, code, input_ids, "
          "timeout_s, network, workspace_id, artifact_ids or checks differ); use a new key for a new request");
}

util::Result<JobResult> Idempotency::run(const std::string& tenant, const std::string& key, const std::string& sha256,
                                         const Run& run_once, bool find_first) {
  if (key.empty()) return run_once();
  const std::string id = tenant + '\0' + key;
  std::shared_ptr<Slot> slot;
  bool first = false;
  {
    std::lock_guard lock(mu_);
    auto [it, inserted] = in_flight_.try_emplace(id);
    if (inserted) {
      it->second = std::make_shared<Slot>();
      it->second->sha256 = sha256;
    }
    slot = it->second;
    first = inserted;
  }
  if (!first) {
    std::unique_lock lock(slot->mu);
    slot->cv.wait(lock, [&] { return slot->bound_sha256.has_value(); });
    if (*slot->bound_sha256 != sha256) return key_conflict(key);
    slot->cv.wait(lock, [&] { return slot->done; });
    if (!slot->result) return slot->error;
    return *slot->result;
  }

  // The first call publishes on every way out, so that repeats never wait forever.
  struct Publish {
    Idempotency& self;
    const std::string& id;
    Slot& slot;
    const std::string& bound_default;
    ~Publish() {
      {
        std::lock_guard lock(slot.mu);
        if (!slot.bound_sha256) slot.bound_sha256 = bound_default;
        if (!slot.done)
          slot.error = util::make_error(util::ErrorCode::kInternal, "the first call with this idempotency_key failed");
        slot.done = true;
      }
      slot.cv.notify_all();
      std::lock_guard lock(self.mu_);
      self.in_flight_.erase(id);
    }
  } publish{*this, id, *slot, sha256};

  std::optional<LedgerRow> row;
  if (find_first) row = find_recorded_(tenant, key);  // the ledger; no lock held
  if (!row) {
    if (find_first) {
      {
        std::lock_guard lock(slot->mu);
        slot->bound_sha256 = sha256;
      }
      slot->cv.notify_all();
    }
    auto result = run_once();
    bool recorded = find_first;
    if (!find_first) {
      std::lock_guard lock(slot->mu);
      recorded = slot->recorded;
    }
    // A run that never wrote its row read the ledger first, or reads it now.
    const bool taken = !result && is_key_taken(result.error());
    if (result || (recorded && !taken)) {
      finish(*slot, result);
      return result;
    }
    // Another server's call took the key between the read and our row (or
    // before this run, unread), or the run failed before its row was in.
    row = find_recorded_(tenant, key);
    if (!row) {
      util::Result<JobResult> lost = taken
                                         ? util::make_error(util::ErrorCode::kInternal,
                                                            "idempotency_key: taken by another call, whose row is gone")
                                         : result;
      finish(*slot, lost);
      return lost;
    }
  }
  return follow_row(tenant, key, sha256, *slot, std::move(*row));
}

// The key is recorded with `row`: its request conflicts, or its job is
// replayed (waited for first, while it runs on another server).
util::Result<JobResult> Idempotency::follow_row(const std::string& tenant, const std::string& key,
                                                const std::string& sha256, Slot& slot, LedgerRow row) {
  if (row.request_sha256 != sha256) {
    util::Result<JobResult> conflict = key_conflict(key);
    {
      std::lock_guard lock(slot.mu);
      if (!slot.bound_sha256) slot.bound_sha256 = row.request_sha256;
    }
    finish(slot, conflict);
    return conflict;
  }
  {
    std::lock_guard lock(slot.mu);
    slot.bound_sha256 = row.request_sha256;
  }
  slot.cv.notify_all();
  // Running: on another server sharing the ledger (this server's own calls
  // with the key share the slot instead). Its end, or its server's lease
  // running out, ends the wait.
  util::Result<JobResult> replay = await_end(tenant, key, std::move(row));
  if (replay) spdlog::info("job {}: replayed for a repeated idempotency key", replay->job_id);
  finish(slot, replay);
  return replay;
}

void Idempotency::recorded(const std::string& tenant, const std::string& key) {
  if (key.empty()) return;
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard lock(mu_);
    auto it = in_flight_.find(tenant + '\0' + key);
    if (it == in_flight_.end()) return;
    slot = it->second;
  }
  {
    std::lock_guard lock(slot->mu);
    slot->recorded = true;
    if (!slot->bound_sha256) slot->bound_sha256 = slot->sha256;
  }
  slot->cv.notify_all();
}

void Idempotency::finish(Slot& slot, util::Result<JobResult>& result) {
  {
    std::lock_guard lock(slot.mu);
    if (result)
      slot.result = *result;
    else
      slot.error = result.error();
    slot.done = true;
  }
  slot.cv.notify_all();
}

util::Result<JobResult> Idempotency::await_end(const std::string& tenant, const std::string& key, LedgerRow row) {
  if (row.status == "running") {
    const int64_t timeout_ms = row.limits.is_object() ? row.limits.value("timeout_ms", int64_t{0}) : 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms) + kOtherServerGrace;
    spdlog::info("job {}: running on another server; waiting for its end (idempotency key)", row.job_id);
    while (row.status == "running") {
      if (std::chrono::steady_clock::now() > deadline)
        return util::busy_error(
            "busy: the first call with this idempotency_key is still running on another "
            "server; call again later for its result",
            5);
      std::this_thread::sleep_for(kOtherServerPoll);
      auto again = find_recorded_(tenant, key);
      if (!again)
        return util::make_error(util::ErrorCode::kInternal,
                                "idempotency_key: the job that holds it (" + row.job_id + ") is no longer recorded");
      row = std::move(*again);
    }
  }
  return job_result_from_row(row);
}

util::Error key_taken() { return util::make_error(util::ErrorCode::kConflict, kKeyTaken); }

bool is_key_taken(const util::Error& e) { return e.code == util::ErrorCode::kConflict && e.message == kKeyTaken; }

}  // namespace broker
