// The SQLite job ledger (ledger_sqlite.h). synchronous=NORMAL with WAL: a committed row survives a
// server crash (not necessarily a power cut), and no per-job fsync sits on the
// hot path. WAL also lets a read on another connection go on while a write
// commits (sqlite.org/wal.html: readers do not block writers and vice versa).
#include "server/broker/ledger_sqlite.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <chrono>
#include <variant>

#include <spdlog/spdlog.h>

namespace broker {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  job_id TEXT PRIMARY KEY,
  tenant TEXT NOT NULL,
  runtime TEXT NOT NULL,
  code_sha256 TEXT NOT NULL,
  inputs TEXT NOT NULL,
  limits TEXT NOT NULL,
  idempotency_key TEXT,
  request_sha256 TEXT NOT NULL,
  status TEXT NOT NULL,
  result TEXT,
  created_ms INTEGER NOT NULL,
  ended_ms INTEGER
);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_key ON jobs(tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status);
CREATE INDEX IF NOT EXISTS jobs_tenant_ended ON jobs(tenant, ended_ms) WHERE status != 'running';
CREATE INDEX IF NOT EXISTS jobs_ended ON jobs(ended_ms) WHERE status != 'running';
CREATE TABLE IF NOT EXISTS tasks (
  task_id TEXT PRIMARY KEY,
  tenant TEXT NOT NULL,
  tool TEXT NOT NULL,
  status TEXT NOT NULL,
  status_message TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  updated_ms INTEGER NOT NULL,
  ttl_ms INTEGER NOT NULL,
  expires_ms INTEGER NOT NULL,
  result TEXT
);
CREATE INDEX IF NOT EXISTS tasks_tenant ON tasks(tenant, created_ms, task_id);
CREATE INDEX IF NOT EXISTS tasks_status ON tasks(status, expires_ms);
CREATE TABLE IF NOT EXISTS workspaces (
  workspace_id TEXT PRIMARY KEY,
  tenant TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  ttl_ms INTEGER NOT NULL,
  expires_ms INTEGER NOT NULL,
  closed_ms INTEGER NOT NULL,
  closed_by TEXT NOT NULL,
  size_bytes INTEGER NOT NULL,
  uses INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS workspaces_tenant ON workspaces(tenant, closed_ms, expires_ms);
)sql";

// Read connections kept open between reads; more may be open at a peak.
constexpr size_t kIdleReadersMax = 4;
// Rows an expiry or a trim deletes in one statement (the write lock is held for one).
constexpr int64_t kTrimBatch = 500;

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Stmt {
  sqlite3_stmt* s = nullptr;
  ~Stmt() { sqlite3_finalize(s); }
};

std::string column_text(sqlite3_stmt* s, int i) {
  const unsigned char* t = sqlite3_column_text(s, i);
  return t ? reinterpret_cast<const char*>(t) : "";
}

// A bound value: text, integer or NULL (a null json result).
using Arg = std::variant<std::string, int64_t, std::nullptr_t>;

std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }
Arg json_arg(const nlohmann::json& j) { return j.is_null() ? Arg(nullptr) : Arg(dump(j)); }

// Prepares `sql` and binds ?1.. in order. False (with the SQLite message) on failure.
bool prepare(sqlite3* db, Stmt& st, const char* sql, std::initializer_list<Arg> args, std::string& error) {
  if (sqlite3_prepare_v2(db, sql, -1, &st.s, nullptr) != SQLITE_OK) {
    error = sqlite3_errmsg(db);
    return false;
  }
  int i = 1;
  for (const Arg& a : args) {
    if (auto* t = std::get_if<std::string>(&a))
      sqlite3_bind_text(st.s, i, t->c_str(), -1, SQLITE_TRANSIENT);
    else if (auto* n = std::get_if<int64_t>(&a))
      sqlite3_bind_int64(st.s, i, *n);
    else
      sqlite3_bind_null(st.s, i);
    ++i;
  }
  return true;
}

// Runs a statement without rows; the number of rows changed, or an error naming `what`.
util::Result<int> write(sqlite3* db, const char* what, const char* sql, std::initializer_list<Arg> args) {
  Stmt st;
  std::string error;
  if (!prepare(db, st, sql, args, error) || sqlite3_step(st.s) != SQLITE_DONE)
    return util::make_error(util::ErrorCode::kIo,
                            std::string(what) + ": " + (error.empty() ? sqlite3_errmsg(db) : error));
  return sqlite3_changes(db);
}

constexpr const char* kTaskColumns =
    "task_id, tenant, tool, status, status_message, created_ms, updated_ms, ttl_ms, expires_ms, result";

constexpr const char* kWorkspaceColumns =
    "workspace_id, tenant, created_ms, ttl_ms, expires_ms, closed_ms, closed_by, size_bytes, uses";

WorkspaceRow read_workspace(sqlite3_stmt* s) {
  WorkspaceRow r;
  r.workspace_id = column_text(s, 0);
  r.tenant = column_text(s, 1);
  r.created_ms = sqlite3_column_int64(s, 2);
  r.ttl_ms = sqlite3_column_int64(s, 3);
  r.expires_ms = sqlite3_column_int64(s, 4);
  r.closed_ms = sqlite3_column_int64(s, 5);
  r.closed_by = column_text(s, 6);
  r.size_bytes = static_cast<uint64_t>(sqlite3_column_int64(s, 7));
  r.uses = static_cast<uint64_t>(sqlite3_column_int64(s, 8));
  return r;
}

TaskRow read_task(sqlite3_stmt* s) {
  TaskRow r;
  r.task_id = column_text(s, 0);
  r.tenant = column_text(s, 1);
  r.tool = column_text(s, 2);
  r.status = column_text(s, 3);
  r.status_message = column_text(s, 4);
  r.created_ms = sqlite3_column_int64(s, 5);
  r.updated_ms = sqlite3_column_int64(s, 6);
  r.ttl_ms = sqlite3_column_int64(s, 7);
  r.expires_ms = sqlite3_column_int64(s, 8);
  std::string result = column_text(s, 9);
  r.result = result.empty() ? nlohmann::json() : nlohmann::json::parse(result, nullptr, false);
  return r;
}

}  // namespace

util::Result<std::unique_ptr<Ledger>> SqliteLedger::open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr) !=
      SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return util::make_error(util::ErrorCode::kIo, "sqlite3_open(\"" + path + "\"): " + msg);
  }
  ::chmod(path.c_str(), 0600);
  char* err = nullptr;
  std::string setup =
      std::string("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=5000;") + kSchema;
  if (sqlite3_exec(db, setup.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown";
    sqlite3_free(err);
    sqlite3_close(db);
    return util::make_error(util::ErrorCode::kIo, "ledger schema: " + msg);
  }
  return std::unique_ptr<Ledger>(new SqliteLedger(db, path));
}

SqliteLedger::~SqliteLedger() {
  for (sqlite3* r : idle_readers_) sqlite3_close(r);
  sqlite3_close(db_);
}

sqlite3* SqliteLedger::open_reader() {
  // An in-memory database is private to its connection: reads stay on the writer.
  if (path_.empty() || path_ == ":memory:") return nullptr;
  sqlite3* db = nullptr;
  // NOMUTEX: a read connection serves one thread at a time (leased).
  if (sqlite3_open_v2(path_.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK ||
      sqlite3_exec(db, "PRAGMA busy_timeout=5000; PRAGMA query_only=1;", nullptr, nullptr, nullptr) != SQLITE_OK) {
    spdlog::warn("ledger: read connection to {}: {}; reading on the write connection", path_,
                 db ? sqlite3_errmsg(db) : "out of memory");
    sqlite3_close(db);
    return nullptr;
  }
  return db;
}

SqliteLedger::ReadConnection::ReadConnection(SqliteLedger& ledger) : ledger_(ledger) {
  {
    std::lock_guard lock(ledger_.readers_mu_);
    if (!ledger_.idle_readers_.empty()) {
      db_ = ledger_.idle_readers_.back();
      ledger_.idle_readers_.pop_back();
      return;
    }
  }
  db_ = ledger_.open_reader();
  if (db_) return;
  write_lock_ = std::unique_lock(ledger_.write_mu_);
  db_ = ledger_.db_;
}

SqliteLedger::ReadConnection::~ReadConnection() {
  if (write_lock_.owns_lock()) return;  // the writer's; the lock goes with this object
  {
    std::lock_guard lock(ledger_.readers_mu_);
    if (ledger_.idle_readers_.size() < kIdleReadersMax) {
      ledger_.idle_readers_.push_back(db_);
      return;
    }
  }
  sqlite3_close(db_);
}

util::Status SqliteLedger::record_start(const LedgerRow& r) {
  std::lock_guard lock(write_mu_);
  Stmt st;
  const char* sql =
      "INSERT INTO jobs (job_id, tenant, runtime, code_sha256, inputs, limits, idempotency_key, request_sha256,"
      " status, created_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'running', ?9)";
  if (sqlite3_prepare_v2(db_, sql, -1, &st.s, nullptr) != SQLITE_OK)
    return util::make_error(util::ErrorCode::kIo, std::string("ledger insert: ") + sqlite3_errmsg(db_));
  std::string inputs = r.inputs.dump(), limits = r.limits.dump();
  sqlite3_bind_text(st.s, 1, r.job_id.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 2, r.tenant.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 3, r.runtime.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 4, r.code_sha256.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 5, inputs.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 6, limits.c_str(), -1, SQLITE_TRANSIENT);
  if (r.idempotency_key.empty())
    sqlite3_bind_null(st.s, 7);
  else
    sqlite3_bind_text(st.s, 7, r.idempotency_key.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 8, r.request_sha256.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.s, 9, r.created_ms ? r.created_ms : wall_ms());
  if (int rc = sqlite3_step(st.s); rc != SQLITE_DONE) {
    // The one unique key a new row can break besides the job id (random):
    // the tenant's idempotency key, taken by another call.
    if (sqlite3_extended_errcode(db_) == SQLITE_CONSTRAINT_UNIQUE && !r.idempotency_key.empty())
      return util::make_error(util::ErrorCode::kConflict, "ledger insert: the idempotency key is taken");
    return util::make_error(util::ErrorCode::kIo, std::string("ledger insert: ") + sqlite3_errmsg(db_));
  }
  return util::ok_status();
}

util::Status SqliteLedger::ping() {
  ReadConnection db(*this);
  Stmt st;
  std::string error;
  if (!prepare(db.get(), st, "SELECT count(*) FROM jobs WHERE 0", {}, error) || sqlite3_step(st.s) != SQLITE_ROW)
    return util::make_error(util::ErrorCode::kIo,
                            "ledger " + path_ + ": " + (error.empty() ? sqlite3_errmsg(db.get()) : error));
  return util::ok_status();
}

util::Status SqliteLedger::record_end(const std::string& job_id, const std::string& status,
                                      const nlohmann::json& result) {
  std::lock_guard lock(write_mu_);
  Stmt st;
  if (sqlite3_prepare_v2(
          db_, "UPDATE jobs SET status = ?1, result = ?2, ended_ms = ?3 WHERE job_id = ?4 AND status = 'running'", -1,
          &st.s, nullptr) != SQLITE_OK)
    return util::make_error(util::ErrorCode::kIo, std::string("ledger update: ") + sqlite3_errmsg(db_));
  std::string text = result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  sqlite3_bind_text(st.s, 1, status.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 2, text.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.s, 3, wall_ms());
  sqlite3_bind_text(st.s, 4, job_id.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st.s) != SQLITE_DONE)
    return util::make_error(util::ErrorCode::kIo, std::string("ledger update: ") + sqlite3_errmsg(db_));
  return util::ok_status();
}

std::optional<LedgerRow> SqliteLedger::query_one(const char* sql, const std::string& a, const std::string& b) {
  ReadConnection db(*this);
  Stmt st;
  if (sqlite3_prepare_v2(db.get(), sql, -1, &st.s, nullptr) != SQLITE_OK) return std::nullopt;
  sqlite3_bind_text(st.s, 1, a.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 2, b.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st.s) != SQLITE_ROW) return std::nullopt;
  LedgerRow r;
  r.job_id = column_text(st.s, 0);
  r.tenant = column_text(st.s, 1);
  r.runtime = column_text(st.s, 2);
  r.code_sha256 = column_text(st.s, 3);
  r.inputs = nlohmann::json::parse(column_text(st.s, 4), nullptr, false);
  r.limits = nlohmann::json::parse(column_text(st.s, 5), nullptr, false);
  r.idempotency_key = column_text(st.s, 6);
  r.request_sha256 = column_text(st.s, 7);
  r.status = column_text(st.s, 8);
  std::string result = column_text(st.s, 9);
  r.result = result.empty() ? nlohmann::json() : nlohmann::json::parse(result, nullptr, false);
  r.created_ms = sqlite3_column_int64(st.s, 10);
  r.ended_ms = sqlite3_column_int64(st.s, 11);
  return r;
}

std::optional<LedgerRow> SqliteLedger::find_by_key(const std::string& tenant, const std::string& key) {
  return query_one(
      "SELECT job_id, tenant, runtime, code_sha256, inputs, limits, idempotency_key, request_sha256,"
      " status, result, created_ms, ended_ms FROM jobs WHERE tenant = ?1 AND idempotency_key = ?2",
      tenant, key);
}

std::optional<LedgerRow> SqliteLedger::find(const std::string& tenant, const std::string& job_id) {
  return query_one(
      "SELECT job_id, tenant, runtime, code_sha256, inputs, limits, idempotency_key, request_sha256,"
      " status, result, created_ms, ended_ms FROM jobs WHERE tenant = ?1 AND job_id = ?2",
      tenant, job_id);
}

size_t SqliteLedger::fail_interrupted(const std::string& reason) {
  std::lock_guard lock(write_mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_,
                         "UPDATE jobs SET status = 'failed', ended_ms = ?1, result = json_object('interrupted', ?2)"
                         " WHERE status = 'running'",
                         -1, &st.s, nullptr) != SQLITE_OK)
    return 0;
  sqlite3_bind_int64(st.s, 1, wall_ms());
  sqlite3_bind_text(st.s, 2, reason.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st.s) != SQLITE_DONE) return 0;
  return static_cast<size_t>(sqlite3_changes(db_));
}

}  // namespace broker

namespace broker {

size_t SqliteLedger::trim(uint64_t ended_per_tenant_max) {
  std::vector<std::pair<std::string, int64_t>> over;  // tenant, rows beyond the bound
  {
    ReadConnection db(*this);
    Stmt st;
    std::string error;
    if (!prepare(db.get(), st,
                 "SELECT tenant, count(*) FROM jobs WHERE status != 'running' GROUP BY tenant HAVING count(*) > ?1",
                 {static_cast<int64_t>(ended_per_tenant_max)}, error))
      return 0;
    while (sqlite3_step(st.s) == SQLITE_ROW)
      over.emplace_back(column_text(st.s, 0),
                        sqlite3_column_int64(st.s, 1) - static_cast<int64_t>(ended_per_tenant_max));
  }
  size_t removed = 0;
  for (auto& [tenant, excess] : over) {
    while (excess > 0) {
      std::lock_guard lock(write_mu_);  // one batch at a time: other writes go in between
      auto n = write(db_, "ledger trim",
                     "DELETE FROM jobs WHERE rowid IN (SELECT rowid FROM jobs WHERE tenant = ?1 AND status != 'running'"
                     " ORDER BY ended_ms, job_id LIMIT ?2)",
                     {tenant, std::min<int64_t>(excess, kTrimBatch)});
      if (!n || *n == 0) break;
      excess -= *n;
      removed += static_cast<size_t>(*n);
    }
  }
  return removed;
}

size_t SqliteLedger::expire(uint64_t ttl_s) {
  const int64_t before = wall_ms() - static_cast<int64_t>(ttl_s) * 1000;
  size_t removed = 0;
  for (;;) {
    std::lock_guard lock(write_mu_);  // one batch at a time: other writes go in between
    auto n = write(db_, "ledger expiry",
                   "DELETE FROM jobs WHERE rowid IN (SELECT rowid FROM jobs WHERE status != 'running' AND ended_ms < ?1"
                   " LIMIT ?2)",
                   {before, kTrimBatch});
    if (!n || *n == 0) break;
    removed += static_cast<size_t>(*n);
    if (*n < kTrimBatch) break;
  }
  return removed;
}

}  // namespace broker

namespace broker {

util::Status SqliteLedger::task_insert(const TaskRow& r) {
  std::lock_guard lock(write_mu_);
  auto n = write(db_, "task insert",
                 "INSERT INTO tasks (task_id, tenant, tool, status, status_message, created_ms, updated_ms, ttl_ms,"
                 " expires_ms, result) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                 {r.task_id, r.tenant, r.tool, r.status, r.status_message, r.created_ms, r.updated_ms, r.ttl_ms,
                  r.expires_ms, json_arg(r.result)});
  if (!n) return n.error();
  return util::ok_status();
}

util::Result<bool> SqliteLedger::task_finish(const TaskRow& r) {
  std::lock_guard lock(write_mu_);
  // Only from working: a terminal task never changes status again (MCP tasks, lifecycle).
  auto n = write(db_, "task update",
                 "UPDATE tasks SET status = ?1, status_message = ?2, updated_ms = ?3, expires_ms = ?4, result = ?5"
                 " WHERE task_id = ?6 AND status = 'working'",
                 {r.status, r.status_message, r.updated_ms, r.expires_ms, json_arg(r.result), r.task_id});
  if (!n) return n.error();
  return *n > 0;
}

util::Status SqliteLedger::task_set_result(const std::string& task_id, const nlohmann::json& result) {
  std::lock_guard lock(write_mu_);
  auto n = write(db_, "task update", "UPDATE tasks SET result = ?1 WHERE task_id = ?2", {json_arg(result), task_id});
  if (!n) return n.error();
  return util::ok_status();
}

util::Status SqliteLedger::task_delete(const std::string& task_id) {
  std::lock_guard lock(write_mu_);
  auto n = write(db_, "task delete", "DELETE FROM tasks WHERE task_id = ?1", {task_id});
  if (!n) return n.error();
  return util::ok_status();
}

std::optional<TaskRow> SqliteLedger::task_find(const std::string& tenant, const std::string& task_id, int64_t now_ms) {
  ReadConnection db(*this);
  Stmt st;
  std::string error;
  std::string sql = std::string("SELECT ") + kTaskColumns +
                    " FROM tasks WHERE tenant = ?1 AND task_id = ?2 AND (status = 'working' OR expires_ms > ?3)";
  if (!prepare(db.get(), st, sql.c_str(), {tenant, task_id, now_ms}, error)) return std::nullopt;
  if (sqlite3_step(st.s) != SQLITE_ROW) return std::nullopt;
  return read_task(st.s);
}

std::vector<TaskRow> SqliteLedger::task_list(const std::string& tenant, int64_t after_created_ms,
                                             const std::string& after_task_id, size_t limit, int64_t now_ms) {
  ReadConnection db(*this);
  std::vector<TaskRow> out;
  Stmt st;
  std::string error;
  std::string sql = std::string("SELECT ") + kTaskColumns +
                    " FROM tasks WHERE tenant = ?1 AND (status = 'working' OR expires_ms > ?2)"
                    " AND (created_ms > ?3 OR (created_ms = ?3 AND task_id > ?4))"
                    " ORDER BY created_ms, task_id LIMIT ?5";
  if (!prepare(db.get(), st, sql.c_str(),
               {tenant, now_ms, after_created_ms, after_task_id, static_cast<int64_t>(limit)}, error))
    return out;
  while (sqlite3_step(st.s) == SQLITE_ROW) out.push_back(read_task(st.s));
  return out;
}

uint64_t SqliteLedger::task_count(const std::string& tenant, int64_t now_ms) {
  ReadConnection db(*this);
  Stmt st;
  std::string error;
  if (!prepare(db.get(), st, "SELECT count(*) FROM tasks WHERE tenant = ?1 AND (status = 'working' OR expires_ms > ?2)",
               {tenant, now_ms}, error) ||
      sqlite3_step(st.s) != SQLITE_ROW)
    return 0;
  return static_cast<uint64_t>(sqlite3_column_int64(st.s, 0));
}

size_t SqliteLedger::task_fail_interrupted(const std::string& message, const nlohmann::json& result, int64_t now_ms,
                                           int64_t keep_ms) {
  std::lock_guard lock(write_mu_);
  auto n = write(db_, "task recovery",
                 "UPDATE tasks SET status = 'failed', status_message = ?1, result = ?2, updated_ms = ?3,"
                 " expires_ms = max(expires_ms, ?4) WHERE status = 'working'",
                 {message, json_arg(result), now_ms, now_ms + keep_ms});
  return n ? static_cast<size_t>(*n) : 0;
}

size_t SqliteLedger::task_expire(const std::string& tenant, int64_t now_ms) {
  std::lock_guard lock(write_mu_);
  auto n =
      tenant.empty()
          ? write(db_, "task expiry", "DELETE FROM tasks WHERE status != 'working' AND expires_ms <= ?1", {now_ms})
          : write(db_, "task expiry",
                  "DELETE FROM tasks WHERE tenant = ?2 AND status != 'working' AND expires_ms <= ?1", {now_ms, tenant});
  return n ? static_cast<size_t>(*n) : 0;
}

util::Status SqliteLedger::workspace_insert(const WorkspaceRow& r) {
  std::lock_guard lock(write_mu_);
  auto n = write(db_, "workspace insert",
                 "INSERT INTO workspaces (workspace_id, tenant, created_ms, ttl_ms, expires_ms, closed_ms, closed_by,"
                 " size_bytes, uses) VALUES (?1, ?2, ?3, ?4, ?5, 0, '', 0, 0)",
                 {r.workspace_id, r.tenant, r.created_ms, r.ttl_ms, r.expires_ms});
  if (!n) return n.error();
  return util::ok_status();
}

std::optional<WorkspaceRow> SqliteLedger::workspace_find(const std::string& tenant, const std::string& workspace_id,
                                                         int64_t now_ms) {
  ReadConnection db(*this);
  Stmt st;
  std::string error;
  std::string sql = std::string("SELECT ") + kWorkspaceColumns +
                    " FROM workspaces WHERE tenant = ?1 AND workspace_id = ?2 AND closed_ms = 0 AND expires_ms > ?3";
  if (!prepare(db.get(), st, sql.c_str(), {tenant, workspace_id, now_ms}, error)) return std::nullopt;
  if (sqlite3_step(st.s) != SQLITE_ROW) return std::nullopt;
  return read_workspace(st.s);
}

uint64_t SqliteLedger::workspace_count(const std::string& tenant) {
  ReadConnection db(*this);
  Stmt st;
  std::string error;
  if (!prepare(db.get(), st, "SELECT COUNT(*) FROM workspaces WHERE tenant = ?1 AND closed_ms = 0", {tenant}, error))
    return 0;
  if (sqlite3_step(st.s) != SQLITE_ROW) return 0;
  return static_cast<uint64_t>(sqlite3_column_int64(st.s, 0));
}

util::Status SqliteLedger::workspace_used(const std::string& workspace_id, uint64_t size_bytes, int64_t expires_ms) {
  std::lock_guard lock(write_mu_);
  auto n = write(db_, "workspace update",
                 "UPDATE workspaces SET uses = uses + 1, size_bytes = ?1, expires_ms = MAX(expires_ms, ?2)"
                 " WHERE workspace_id = ?3 AND closed_ms = 0",
                 {static_cast<int64_t>(size_bytes), expires_ms, workspace_id});
  if (!n) return n.error();
  return util::ok_status();
}

util::Result<bool> SqliteLedger::workspace_close(const std::string& tenant, const std::string& workspace_id,
                                                 int64_t now_ms, const std::string& by) {
  std::lock_guard lock(write_mu_);
  auto n = write(db_, "workspace close",
                 "UPDATE workspaces SET closed_ms = ?1, closed_by = ?2 WHERE tenant = ?3 AND workspace_id = ?4"
                 " AND closed_ms = 0",
                 {now_ms, by, tenant, workspace_id});
  if (!n) return n.error();
  return *n > 0;
}

std::vector<WorkspaceRow> SqliteLedger::workspace_expired(int64_t now_ms) {
  ReadConnection db(*this);
  std::vector<WorkspaceRow> out;
  Stmt st;
  std::string error;
  std::string sql =
      std::string("SELECT ") + kWorkspaceColumns + " FROM workspaces WHERE closed_ms = 0 AND expires_ms <= ?1";
  if (!prepare(db.get(), st, sql.c_str(), {now_ms}, error)) return out;
  while (sqlite3_step(st.s) == SQLITE_ROW) out.push_back(read_workspace(st.s));
  return out;
}

std::vector<std::string> SqliteLedger::workspace_open_ids() {
  ReadConnection db(*this);
  std::vector<std::string> out;
  Stmt st;
  std::string error;
  if (!prepare(db.get(), st, "SELECT workspace_id FROM workspaces WHERE closed_ms = 0", {}, error)) return out;
  while (sqlite3_step(st.s) == SQLITE_ROW) out.push_back(column_text(st.s, 0));
  return out;
}

size_t SqliteLedger::workspace_forget(uint64_t ttl_s) {
  std::lock_guard lock(write_mu_);
  auto n = write(db_, "workspace forget", "DELETE FROM workspaces WHERE closed_ms != 0 AND closed_ms < ?1",
                 {wall_ms() - static_cast<int64_t>(ttl_s) * 1000});
  return n ? static_cast<size_t>(*n) : 0;
}

}  // namespace broker
