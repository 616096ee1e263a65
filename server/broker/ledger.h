// The job ledger: one SQLite row per job (WAL mode) in the state directory,
// written before a job starts and when it ends. Backs idempotency keys and
// crash recovery. Thread-safe (one connection behind a mutex).
#pragma once
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "server/util/result.h"

struct sqlite3;

namespace broker {

struct LedgerRow {
  std::string job_id;
  std::string tenant;
  std::string runtime;
  std::string code_sha256;
  nlohmann::json inputs;          // [{input_id, name, sha256}]
  nlohmann::json limits;          // timeout_ms and the policy limits applied
  std::string idempotency_key;    // "" when none
  std::string request_sha256;     // of the canonical request, for key conflicts
  std::string status = "running"; // running, then the job's final status
  nlohmann::json result;          // {"outcome": ..., "artifacts": [...]} once ended
  int64_t created_ms = 0;         // wall clock, ms since the epoch
  int64_t ended_ms = 0;
};

class Ledger {
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

 private:
  explicit Ledger(sqlite3* db) : db_(db) {}
  std::optional<LedgerRow> query_one(const char* sql, const std::string& a, const std::string& b);
  sqlite3* db_;
  std::mutex mu_;
};

}  // namespace broker
