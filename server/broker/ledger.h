// The job ledger: one row per job, written before a job starts and when it
// ends; it backs idempotency keys and crash recovery, and also holds the MCP
// task rows (protocol::Tasks opens its own Ledger) and the workspace rows.
// Two backends behind this one interface, with one test suite
// (tests/unit/ledger_backend_test.cpp):
//   SQLite (ledger_sqlite.h)   the embedded default: a file in the state
//                              directory, one server
//   PostgreSQL (ledger_pg.h)   shared by several servers (replicas): each
//                              holds a lease on its own row; the rows of a
//                              replica whose lease ran out are failed as
//                              "replica lost"
// Thread-safe.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/store/task_store.h"
#include "server/util/result.h"

namespace policy {
struct Policy;
}

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

// Where the ledger lives.
struct LedgerConfig {
  // A PostgreSQL connection URI (postgresql://... or postgres://...), or a
  // SQLite file's path.
  std::string where;
  // PostgreSQL only: connections kept open (each call takes one for a
  // statement at a time), and how long a replica's lease lasts without a
  // renewal before its running jobs and tasks count as lost.
  size_t connections = 4;
  int64_t lease_ms = 15000;
};

// The policy's ledger (server.database, else ledger.sqlite3 in state_dir).
LedgerConfig ledger_config(const policy::Policy& policy, const std::string& state_dir);
// "sqlite <path>" or "postgresql <uri without its password>", for logs.
std::string describe(const LedgerConfig& config);

class Ledger : public store::TaskStore {
 public:
  // SQLite for a path, PostgreSQL for a connection URI.
  static util::Result<std::unique_ptr<Ledger>> open(const LedgerConfig& config);
  static util::Result<std::unique_ptr<Ledger>> open(const std::string& where) { return open(LedgerConfig{where}); }
  ~Ledger() override = default;

  // "sqlite" or "postgresql", for messages and /readyz.
  virtual const char* backend() const = 0;
  // shared() (store::TaskStore): whether several servers may share it (PostgreSQL).
  // Whether the ledger answers now (a trivial read): /readyz, and the
  // admission of a new job on a shared database.
  virtual util::Status ping() = 0;

  // Fails with kIdempotency when the tenant already has a row with this key
  // (another replica's call won the race: find_by_key then reads it).
  virtual util::Status record_start(const LedgerRow& row) = 0;
  virtual util::Status record_end(const std::string& job_id, const std::string& status,
                                  const nlohmann::json& result) = 0;
  virtual std::optional<LedgerRow> find_by_key(const std::string& tenant, const std::string& key) = 0;
  virtual std::optional<LedgerRow> find(const std::string& tenant, const std::string& job_id) = 0;
  // At start-up (SQLite) or on every lease round (PostgreSQL): jobs left
  // "running" by a server that is gone become "failed" with the reason.
  virtual size_t fail_interrupted(const std::string& reason) = 0;
  // Deletes rows of jobs that ended more than ttl_s ago (and so their keys).
  virtual size_t expire(uint64_t ttl_s) = 0;
  // Deletes, for each tenant with more, its oldest ended rows beyond the
  // newest `ended_per_tenant_max` (their keys with them), a few hundred a
  // statement so that no other write waits long behind it.
  virtual size_t trim(uint64_t ended_per_tenant_max) = 0;

  // A tenant's slots across the servers that share the ledger: at most
  // tenant_max of its jobs run at once, and at most queued_max calls (of all
  // tenants) wait for one. take() with a job's id grants it (kRunning), puts
  // it in line (kQueued: call again to learn whether it moved up; the line is
  // in arrival order per tenant), or refuses it (kBusy). A slot goes with
  // record_end or slot_release, and with its server's lease. A ledger that
  // is not shared grants every slot without a word (the server's own
  // admission counts). `start`, the job's row, may be recorded with the
  // slot it is granted, in the same round trip: its record_start is then
  // answered at once, and a slot_release before it removes the row too (the
  // job never started). A key another job's row holds: kConflict, no slot
  // held.
  enum class SlotState { kRunning, kQueued, kBusy };
  virtual util::Result<SlotState> slot_take(const std::string& job_id, const std::string& tenant, uint64_t tenant_max,
                                            uint64_t queued_max, const LedgerRow* start = nullptr) = 0;
  virtual void slot_release(const std::string& job_id) = 0;

  // Workspaces. A find sees open rows not past expires_ms only.
  virtual util::Status workspace_insert(const WorkspaceRow& row) = 0;
  virtual std::optional<WorkspaceRow> workspace_find(const std::string& tenant, const std::string& workspace_id,
                                                     int64_t now_ms) = 0;
  // Not closed, expired or not: a workspace counts until it is closed (and its tree deleted).
  virtual uint64_t workspace_count(const std::string& tenant) = 0;
  // After a job in it: uses + 1, the new size and expiry.
  virtual util::Status workspace_used(const std::string& workspace_id, uint64_t size_bytes, int64_t expires_ms) = 0;
  // Open -> closed; false when it was not open (or not the tenant's).
  virtual util::Result<bool> workspace_close(const std::string& tenant, const std::string& workspace_id, int64_t now_ms,
                                             const std::string& by) = 0;
  // Open rows past their expiry (the janitor closes them as "expired").
  virtual std::vector<WorkspaceRow> workspace_expired(int64_t now_ms) = 0;
  // Every open row (start-up: which directories may stay).
  virtual std::vector<std::string> workspace_open_ids() = 0;
  // Deletes the rows of workspaces closed more than ttl_s ago.
  virtual size_t workspace_forget(uint64_t ttl_s) = 0;
  // One call at a time across the servers that share the ledger: a hold on
  // an open workspace of the tenant's, taken (true) unless a live server
  // holds it; a lost server's hold goes with its lease. A held workspace is
  // neither closed nor expired. A ledger that is not shared always grants it
  // (the server's own Workspaces counts).
  virtual util::Result<bool> workspace_hold(const std::string& tenant, const std::string& workspace_id) = 0;
  virtual void workspace_unhold(const std::string& workspace_id) = 0;

 protected:
  Ledger() = default;
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;
};

}  // namespace broker
