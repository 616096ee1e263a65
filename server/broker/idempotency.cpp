// Idempotency keys. The first call with a key takes its slot before it reads
// the ledger, so a concurrent repeat cannot also miss the record and run
// again; repeats wait on the slot's own lock, never the table's.
#include "server/broker/idempotency.h"

#include <condition_variable>
#include <spdlog/spdlog.h>

#include "server/broker/job_records.h"
#include "server/util/crypto.h"

namespace broker {

struct Idempotency::Slot {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<std::string> bound_sha256;  // the request the key is bound to, once known
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
                                         const Run& run_once) {
  if (key.empty()) return run_once();
  const std::string id = tenant + '\0' + key;
  std::shared_ptr<Slot> slot;
  bool first = false;
  {
    std::lock_guard lock(mu_);
    auto [it, inserted] = in_flight_.try_emplace(id);
    if (inserted) it->second = std::make_shared<Slot>();
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

  std::optional<LedgerRow> row = find_recorded_(tenant, key);  // SQLite; no lock held
  if (row) {
    JobResult replay = job_result_from_row(*row);
    {
      std::lock_guard lock(slot->mu);
      slot->bound_sha256 = row->request_sha256;
      slot->result = replay;
      slot->done = true;
    }
    slot->cv.notify_all();
    if (row->request_sha256 != sha256) return key_conflict(key);
    spdlog::info("job {}: replayed for a repeated idempotency key", row->job_id);
    return replay;
  }
  {
    std::lock_guard lock(slot->mu);
    slot->bound_sha256 = sha256;
  }
  slot->cv.notify_all();
  auto result = run_once();
  {
    std::lock_guard lock(slot->mu);
    if (result)
      slot->result = *result;
    else
      slot->error = result.error();
    slot->done = true;
  }
  slot->cv.notify_all();
  return result;
}

}  // namespace broker
