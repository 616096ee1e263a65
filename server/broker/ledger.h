// The job ledger: one SQLite row per job (WAL mode) in the state directory,
// written before a job starts and when it ends. Backs idempotency keys and
// crash recovery. Also holds the MCP task rows (protocol::Tasks opens its own
// Ledger). Thread-safe: writes go through one connection behind a mutex;
// reads take a pooled connection of their own, which WAL never makes wait
// behind a write.
#pragma once
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/store/task_store.h"
#include "server/util/result.h"

struct sqlite3;

namespace broker {

struct LedgerRow {
  std::string job_id;
  std::string tenant;
  std::string runtime;
  std::string code_sha256;
  nlohmann::json inputs;           // [{input_id, name, sha256}]
  nlohmann::json limits;           // timeout_ms and the policy limits applied
  std::string idempotency_key;     // "" when none
  std::string request_sha256;      // of the canonical request, for key conflicts
  std::string status = "running";  // running, then the job's final status
  nlohmann::json result;           // {"outcome": ..., "artifacts": [...]} once ended
  int64_t created_ms = 0;          // wall clock, ms since the epoch
  int64_t ended_ms = 0;
};

using store::TaskRow;

// One workspace (workspaces.h): open until closed or idle past expires_ms.
struct WorkspaceRow {
  std::string workspace_id;
  std::string tenant;
  int64_t created_ms = 0;   // wall clock, ms since the epoch
  int64_t ttl_ms = 0;       // idle lifetime, as granted
  int64_t expires_ms = 0;   // last use (or open) + ttl_ms
  int64_t closed_ms = 0;    // 0 while open
  std::string closed_by;    // "close_workspace", "expired"; "" while open
  uint64_t size_bytes = 0;  // its files after the last job
  uint64_t uses = 0;        // jobs run in it
};

class Ledger final : public store::TaskStore {
 public:
  static util::Result<std::unique_ptr<Ledger>> open(const std::string& path);
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  util::Status record_start(const LedgerRow& row);
  util::Status record_end(const std::string& job_id, const std::string& status, const nlohmann::json& result);
  std::optional<LedgerRow> find_by_key(const std::string& tenant, const std::string& key);
  std::optional<LedgerRow> find(const std::string& tenant, const std::string& job_id);
  // At start-up: jobs a crash left "running" become "failed" with the reason.
  size_t fail_interrupted(const std::string& reason);
  // Deletes rows of jobs that ended more than ttl_s ago (and so their keys).
  size_t expire(uint64_t ttl_s);

  // Tasks. Every read takes the tenant and skips terminal rows past expires_ms.
  util::Status task_insert(const TaskRow& row) override;
  // working -> a terminal status; false when the row was no longer working.
  util::Result<bool> task_finish(const TaskRow& row) override;
  // Replaces the result only (a cancelled task's late tool result).
  util::Status task_set_result(const std::string& task_id, const nlohmann::json& result) override;
  util::Status task_delete(const std::string& task_id) override;
  std::optional<TaskRow> task_find(const std::string& tenant, const std::string& task_id, int64_t now_ms) override;
  // In creation order, strictly after (after_created_ms, after_task_id).
  std::vector<TaskRow> task_list(const std::string& tenant, int64_t after_created_ms, const std::string& after_task_id,
                                 size_t limit, int64_t now_ms) override;
  uint64_t task_count(const std::string& tenant, int64_t now_ms) override;
  // At start-up: tasks a crash left working become failed with `result`,
  // kept at least until now_ms + keep_ms.
  size_t task_fail_interrupted(const std::string& message, const nlohmann::json& result, int64_t now_ms,
                               int64_t keep_ms) override;
  // Workspaces. A find sees open rows not past expires_ms only.
  util::Status workspace_insert(const WorkspaceRow& row);
  std::optional<WorkspaceRow> workspace_find(const std::string& tenant, const std::string& workspace_id,
                                             int64_t now_ms);
  // Not closed, expired or not: a workspace counts until it is closed (and its tree deleted).
  uint64_t workspace_count(const std::string& tenant);
  // After a job in it: uses + 1, the new size and expiry.
  util::Status workspace_used(const std::string& workspace_id, uint64_t size_bytes, int64_t expires_ms);
  // Open -> closed; false when it was not open (or not the tenant's).
  util::Result<bool> workspace_close(const std::string& tenant, const std::string& workspace_id, int64_t now_ms,
                                     const std::string& by);
  // Open rows past their expiry (the janitor closes them as "expired").
  std::vector<WorkspaceRow> workspace_expired(int64_t now_ms);
  // Every open row (start-up: which directories may stay).
  std::vector<std::string> workspace_open_ids();
  // Deletes the rows of workspaces closed more than ttl_s ago.
  size_t workspace_forget(uint64_t ttl_s);
  // Deletes terminal tasks past their expiry; "" means every tenant.
  size_t task_expire(const std::string& tenant, int64_t now_ms) override;

 private:
  // A connection for one read: a pooled one, or the write connection under
  // its lock when no other could be opened.
  class ReadConnection {
   public:
    explicit ReadConnection(Ledger& ledger);
    ~ReadConnection();
    ReadConnection(const ReadConnection&) = delete;
    ReadConnection& operator=(const ReadConnection&) = delete;
    sqlite3* get() const { return db_; }

   private:
    Ledger& ledger_;
    sqlite3* db_ = nullptr;
    std::unique_lock<std::mutex> write_lock_;  // held only in the fallback
  };

  Ledger(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  std::optional<LedgerRow> query_one(const char* sql, const std::string& a, const std::string& b);
  sqlite3* open_reader();
  sqlite3* db_;  // every write, under write_mu_
  std::mutex write_mu_;
  const std::string path_;  // for the read connections
  std::mutex readers_mu_;
  std::vector<sqlite3*> idle_readers_;  // under readers_mu_
};

}  // namespace broker
