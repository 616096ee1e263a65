// The SQLite ledger (WAL mode), a file in the state directory: the embedded
// default for one server. Writes go through one connection behind a mutex;
// reads take a pooled connection of their own, which WAL never makes wait
// behind a write.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/broker/ledger.h"

struct sqlite3;

namespace broker {

class SqliteLedger final : public Ledger {
 public:
  static util::Result<std::unique_ptr<Ledger>> open(const std::string& path);
  ~SqliteLedger() override;

  const char* backend() const override { return "sqlite"; }
  bool shared() const override { return false; }
  util::Result<SlotState> slot_take(const std::string&, const std::string&, uint64_t, uint64_t,
                                    const LedgerRow*) override {
    return SlotState::kRunning;
  }
  void slot_release(const std::string&) override {}
  util::Status ping() override;

  util::Status record_start(const LedgerRow& row) override;
  util::Status record_end(const std::string& job_id, const std::string& status, const nlohmann::json& result) override;
  std::optional<LedgerRow> find_by_key(const std::string& tenant, const std::string& key) override;
  std::optional<LedgerRow> find(const std::string& tenant, const std::string& job_id) override;
  size_t fail_interrupted(const std::string& reason) override;
  size_t expire(uint64_t ttl_s) override;
  size_t trim(uint64_t ended_per_tenant_max) override;

  util::Status task_insert(const TaskRow& row) override;
  util::Result<bool> task_finish(const TaskRow& row) override;
  util::Status task_set_result(const std::string& task_id, const nlohmann::json& result) override;
  util::Status task_delete(const std::string& task_id) override;
  std::optional<TaskRow> task_find(const std::string& tenant, const std::string& task_id, int64_t now_ms) override;
  std::vector<TaskRow> task_list(const std::string& tenant, int64_t after_created_ms, const std::string& after_task_id,
                                 size_t limit, int64_t now_ms) override;
  uint64_t task_count(const std::string& tenant, int64_t now_ms) override;
  size_t task_fail_interrupted(const std::string& message, const nlohmann::json& result, int64_t now_ms,
                               int64_t keep_ms) override;
  size_t task_expire(const std::string& tenant, int64_t now_ms) override;
  // One server: its tasks are all its own, told of their ends in process.
  std::vector<TaskRow> tasks_ended(const std::vector<std::string>&) override { return {}; }

  util::Status workspace_insert(const WorkspaceRow& row) override;
  std::optional<WorkspaceRow> workspace_find(const std::string& tenant, const std::string& workspace_id,
                                             int64_t now_ms) override;
  uint64_t workspace_count(const std::string& tenant) override;
  util::Status workspace_used(const std::string& workspace_id, uint64_t size_bytes, int64_t expires_ms) override;
  util::Result<bool> workspace_close(const std::string& tenant, const std::string& workspace_id, int64_t now_ms,
                                     const std::string& by) override;
  std::vector<WorkspaceRow> workspace_expired(int64_t now_ms) override;
  std::vector<std::string> workspace_open_ids() override;
  size_t workspace_forget(uint64_t ttl_s) override;
  util::Result<bool> workspace_hold(const std::string&, const std::string&) override { return true; }
  void workspace_unhold(const std::string&) override {}

 private:
  // A connection for one read: a pooled one, or the write connection under
  // its lock when no other could be opened.
  class ReadConnection {
   public:
    explicit ReadConnection(SqliteLedger& ledger);
    ~ReadConnection();
    ReadConnection(const ReadConnection&) = delete;
    ReadConnection& operator=(const ReadConnection&) = delete;
    sqlite3* get() const { return db_; }

   private:
    SqliteLedger& ledger_;
    sqlite3* db_ = nullptr;
    std::unique_lock<std::mutex> write_lock_;  // held only in the fallback
  };

  SqliteLedger(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  std::optional<LedgerRow> query_one(const char* sql, const std::string& a, const std::string& b);
  sqlite3* open_reader();
  sqlite3* db_;  // every write, under write_mu_
  std::mutex write_mu_;
  const std::string path_;  // for the read connections
  std::mutex readers_mu_;
  std::vector<sqlite3*> idle_readers_;  // under readers_mu_
};

}  // namespace broker
