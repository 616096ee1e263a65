// The PostgreSQL ledger (ledger_pg.h) over libpq.
#include "server/broker/ledger_pg.h"

#include <libpq-fe.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <stop_token>
#include <thread>

#include <spdlog/spdlog.h>

#include "server/util/clock.h"
#include "server/util/database_uri.h"
#include "server/util/random.h"

namespace broker {
namespace pgsql {

using Param = std::optional<std::string>;
Param num(int64_t v) { return std::to_string(v); }
Param json_text(const nlohmann::json& j) {
  if (j.is_null()) return std::nullopt;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The database's clock, in ms since the epoch: what every lease is measured in.
constexpr const char* kNowFunction =
    "CREATE OR REPLACE FUNCTION throwbox_now_ms() RETURNS bigint LANGUAGE sql VOLATILE AS "
    "$$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint $$";

// Migration N takes the schema from version N-1 to N; never edited once
// released, only appended to.
const char* const kMigrations[] = {
    // 1: jobs, tasks, workspaces (as the SQLite ledger has them) and the
    // replicas that run them.
    R"sql(
CREATE TABLE replicas (
  replica_id text PRIMARY KEY,
  host text NOT NULL,
  pid bigint NOT NULL,
  started_ms bigint NOT NULL,
  lease_expires_ms bigint NOT NULL
);
CREATE TABLE jobs (
  job_id text PRIMARY KEY,
  tenant text NOT NULL,
  runtime text NOT NULL,
  code_sha256 text NOT NULL,
  inputs text NOT NULL,
  limits text NOT NULL,
  idempotency_key text,
  request_sha256 text NOT NULL,
  status text NOT NULL,
  result text,
  created_ms bigint NOT NULL,
  ended_ms bigint,
  replica text NOT NULL
);
CREATE UNIQUE INDEX jobs_key ON jobs (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX jobs_running ON jobs (replica) WHERE status = 'running';
CREATE INDEX jobs_ended ON jobs (ended_ms) WHERE status <> 'running';
CREATE TABLE tasks (
  task_id text PRIMARY KEY,
  tenant text NOT NULL,
  tool text NOT NULL,
  status text NOT NULL,
  status_message text NOT NULL,
  created_ms bigint NOT NULL,
  updated_ms bigint NOT NULL,
  ttl_ms bigint NOT NULL,
  expires_ms bigint NOT NULL,
  result text,
  replica text NOT NULL
);
CREATE INDEX tasks_tenant ON tasks (tenant, created_ms, task_id);
CREATE INDEX tasks_status ON tasks (status, expires_ms);
CREATE INDEX tasks_working ON tasks (replica) WHERE status = 'working';
CREATE TABLE workspaces (
  workspace_id text PRIMARY KEY,
  tenant text NOT NULL,
  created_ms bigint NOT NULL,
  ttl_ms bigint NOT NULL,
  expires_ms bigint NOT NULL,
  closed_ms bigint NOT NULL,
  closed_by text NOT NULL,
  size_bytes bigint NOT NULL,
  uses bigint NOT NULL
);
CREATE INDEX workspaces_tenant ON workspaces (tenant, closed_ms, expires_ms);
)sql",
    // 2: tenant slots across the servers: a row per job holding one
    // (running) or waiting for one (queued), and the one function that
    // takes or moves one, under one lock for all servers.
    R"sql(
CREATE TABLE tenant_slots (
  job_id text PRIMARY KEY,
  tenant text NOT NULL,
  replica text NOT NULL,
  state text NOT NULL,
  since_ms bigint NOT NULL
);
CREATE INDEX tenant_slots_tenant ON tenant_slots (tenant, state, since_ms, job_id);
CREATE FUNCTION throwbox_slot_take(p_job text, p_tenant text, p_replica text, p_tenant_max bigint,
                                   p_queued_max bigint) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  now_ms bigint := throwbox_now_ms();
  mine text;
  mine_since bigint;
  running bigint;
  ahead bigint;
  queued bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(8388070618236825465);
  -- A lost server's slots are free.
  DELETE FROM tenant_slots s WHERE NOT EXISTS
    (SELECT 1 FROM replicas r WHERE r.replica_id = s.replica AND r.lease_expires_ms > now_ms);
  SELECT state, since_ms INTO mine, mine_since FROM tenant_slots WHERE job_id = p_job;
  IF mine = 'running' THEN RETURN 'running'; END IF;
  SELECT count(*) INTO running FROM tenant_slots WHERE tenant = p_tenant AND state = 'running';
  IF mine IS NULL THEN
    SELECT count(*) INTO ahead FROM tenant_slots WHERE tenant = p_tenant AND state = 'queued';
  ELSE
    SELECT count(*) INTO ahead FROM tenant_slots
      WHERE tenant = p_tenant AND state = 'queued' AND (since_ms, job_id) < (mine_since, p_job);
  END IF;
  IF running < p_tenant_max AND ahead = 0 THEN
    IF mine IS NULL THEN
      INSERT INTO tenant_slots VALUES (p_job, p_tenant, p_replica, 'running', now_ms);
    ELSE
      UPDATE tenant_slots SET state = 'running' WHERE job_id = p_job;
    END IF;
    RETURN 'running';
  END IF;
  IF mine IS NOT NULL THEN RETURN 'queued'; END IF;
  SELECT count(*) INTO queued FROM tenant_slots WHERE state = 'queued';
  IF queued >= p_queued_max THEN RETURN 'busy'; END IF;
  INSERT INTO tenant_slots VALUES (p_job, p_tenant, p_replica, 'queued', now_ms);
  RETURN 'queued';
END $$;
)sql",
    // 3: a workspace held by one call at a time across the servers.
    R"sql(
ALTER TABLE workspaces ADD COLUMN held_by text NOT NULL DEFAULT '';
)sql",
    // 4: a lost server's slots are freed by the lease rounds (with its jobs,
    // once the freeing server has itself renewed a whole lease), not by
    // every take: a take right after a database outage no longer frees the
    // slots of servers that have not had their turn to renew.
    R"sql(
CREATE INDEX tenant_slots_replica ON tenant_slots (replica);
CREATE OR REPLACE FUNCTION throwbox_slot_take(p_job text, p_tenant text, p_replica text, p_tenant_max bigint,
                                              p_queued_max bigint) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  mine text;
  mine_since bigint;
  running bigint;
  ahead bigint;
  queued bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(8388070618236825465);
  SELECT state, since_ms INTO mine, mine_since FROM tenant_slots WHERE job_id = p_job;
  IF mine = 'running' THEN RETURN 'running'; END IF;
  SELECT count(*) INTO running FROM tenant_slots WHERE tenant = p_tenant AND state = 'running';
  IF mine IS NULL THEN
    SELECT count(*) INTO ahead FROM tenant_slots WHERE tenant = p_tenant AND state = 'queued';
  ELSE
    SELECT count(*) INTO ahead FROM tenant_slots
      WHERE tenant = p_tenant AND state = 'queued' AND (since_ms, job_id) < (mine_since, p_job);
  END IF;
  IF running < p_tenant_max AND ahead = 0 THEN
    IF mine IS NULL THEN
      INSERT INTO tenant_slots VALUES (p_job, p_tenant, p_replica, 'running', throwbox_now_ms());
    ELSE
      UPDATE tenant_slots SET state = 'running' WHERE job_id = p_job;
    END IF;
    RETURN 'running';
  END IF;
  IF mine IS NOT NULL THEN RETURN 'queued'; END IF;
  SELECT count(*) INTO queued FROM tenant_slots WHERE state = 'queued';
  IF queued >= p_queued_max THEN RETURN 'busy'; END IF;
  INSERT INTO tenant_slots VALUES (p_job, p_tenant, p_replica, 'queued', throwbox_now_ms());
  RETURN 'queued';
END $$;
)sql",
    // 5: a tenant's ended rows in the order the janitor trims them.
    R"sql(
CREATE INDEX jobs_tenant_ended ON jobs (tenant, ended_ms) WHERE status <> 'running';
)sql",
};
constexpr int kSchemaVersion = static_cast<int>(std::size(kMigrations));

// Any number: the key of the advisory lock that lets one server at a time migrate.
constexpr int64_t kMigrationLock = 0x7468726f77626f78;  // "throwbox"

// Every statement the ledger runs, prepared by name on each connection.
// `repeatable`: sending it again after a lost connection changes nothing
// (a read, or a write whose second run finds its work done).
struct Statement {
  const char* name;
  const char* sql;
  bool repeatable;
};

#define JOB_COLUMNS                                                                                         \
  "job_id, tenant, runtime, code_sha256, inputs, limits, idempotency_key, request_sha256, status, result, " \
  "created_ms, ended_ms"
#define TASK_COLUMNS "task_id, tenant, tool, status, status_message, created_ms, updated_ms, ttl_ms, expires_ms, result"
#define WORKSPACE_COLUMNS "workspace_id, tenant, created_ms, ttl_ms, expires_ms, closed_ms, closed_by, size_bytes, uses"

const Statement kPing{"ping", "SELECT 1", true};
const Statement kJobInsert{
    "job_insert",
    "INSERT INTO jobs (job_id, tenant, runtime, code_sha256, inputs, limits, idempotency_key, request_sha256,"
    " status, created_ms, replica) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'running', $9, $10)",
    true};
// The end gives the job's tenant slot back in the same round trip, and
// writes the whole row if its start's commit was lost; it moves only a
// running row.
const Statement kJobEnd{
    "job_end_row",
    "WITH freed AS (DELETE FROM tenant_slots WHERE job_id = $4)"
    " INSERT INTO jobs (job_id, tenant, runtime, code_sha256, inputs, limits, idempotency_key, request_sha256,"
    " status, result, created_ms, ended_ms, replica) VALUES ($4, $5, $6, $7, $8, $9, $10, $11, $1, $2, $12, $3, $13)"
    " ON CONFLICT (job_id) DO UPDATE SET status = EXCLUDED.status, result = EXCLUDED.result,"
    " ended_ms = EXCLUDED.ended_ms WHERE jobs.status = 'running'",
    true};
// The end of a job this server did not start (its row only).
const Statement kJobEndUpdate{"job_end",
                              "WITH freed AS (DELETE FROM tenant_slots WHERE job_id = $4)"
                              " UPDATE jobs SET status = $1, result = $2, ended_ms = $3 WHERE job_id = $4"
                              " AND status = 'running'",
                              true};
// A slot alone (a take with no row to record with it). Repeatable: a second
// take of the same job finds its own row. Its commit waits for no WAL flush
// (synchronous_commit off for this one transaction): the job's row, when it
// is recorded with a flushed commit, flushes the WAL up to and past it; what
// a database crash can lose is a slot of a call that had not started.
const Statement kSlotTake{
    "slot_take", "SELECT throwbox_slot_take($1, $2, $3, $4, $5), set_config('synchronous_commit', 'off', true)", true};
const Statement kSlotRelease{"slot_release", "DELETE FROM tenant_slots WHERE job_id = $1", true};
// The slot and the job's row in one round trip, the row only when the
// slot is granted. Without a key the commit waits for no flush (the job's
// end, flushed, writes the whole row again); with one it does (the key's
// row keeps a repeat from running the job twice). A key another job's row
// holds: "key" and no slot (the caller reads that row); one whose row
// came in while this statement ran: no row, and "taken" (the caller gives
// the slot back). A second run (a lost connection) finds both done: its
// own row is there.
const Statement kSlotTakeStart{
    "slot_take_start",
    "WITH k AS MATERIALIZED (SELECT EXISTS (SELECT 1 FROM jobs WHERE tenant = $2 AND idempotency_key = $12::text"
    " AND job_id <> $1) AS held),"
    " t AS MATERIALIZED (SELECT CASE WHEN k.held THEN 'key' ELSE throwbox_slot_take($1, $2, $3, $4, $5) END"
    " AS state FROM k),"
    " i AS (INSERT INTO jobs (job_id, tenant, runtime, code_sha256, inputs, limits, idempotency_key,"
    " request_sha256, status, created_ms, replica) SELECT $1, $2, $6::text, $7::text, $8::text, $9::text,"
    " $12::text, $10::text, 'running', $11::bigint, $3 FROM t WHERE t.state = 'running' ON CONFLICT DO NOTHING"
    " RETURNING 1)"
    " SELECT CASE WHEN t.state = 'running' AND NOT EXISTS (SELECT 1 FROM i) AND NOT EXISTS"
    " (SELECT 1 FROM jobs WHERE job_id = $1) THEN 'taken' ELSE t.state END, set_config('synchronous_commit',"
    " CASE WHEN $12::text IS NULL THEN 'off' ELSE current_setting('synchronous_commit') END, true) FROM t",
    true};
// A slot given back before its job started: the row recorded with it goes too.
const Statement kSlotReleaseStart{"slot_release_start",
                                  "WITH freed AS (DELETE FROM tenant_slots WHERE job_id = $1)"
                                  " DELETE FROM jobs WHERE job_id = $1 AND status = 'running'",
                                  true};
// Slots of servers whose lease ran out (lease rounds), and a server's own on a clean stop.
const Statement kSlotsLost{"slots_lost",
                           "DELETE FROM tenant_slots s WHERE NOT EXISTS (SELECT 1 FROM replicas r WHERE"
                           " r.replica_id = s.replica AND r.lease_expires_ms > throwbox_now_ms())",
                           true};
const Statement kSlotsLeft{"slots_left", "DELETE FROM tenant_slots WHERE replica = $1", true};
const Statement kJobByKey{"job_by_key", "SELECT " JOB_COLUMNS " FROM jobs WHERE tenant = $1 AND idempotency_key = $2",
                          true};
const Statement kJobById{"job_by_id", "SELECT " JOB_COLUMNS " FROM jobs WHERE tenant = $1 AND job_id = $2", true};
const Statement kJobsLost{
    "jobs_lost",
    "UPDATE jobs SET status = 'failed', ended_ms = $2, result = $1 WHERE status = 'running' AND NOT EXISTS"
    " (SELECT 1 FROM replicas r WHERE r.replica_id = jobs.replica AND r.lease_expires_ms > throwbox_now_ms())",
    true};
// A server that stops cleanly: its own rows still running, at once.
const Statement kJobsLeft{"jobs_left",
                          "UPDATE jobs SET status = 'failed', ended_ms = $2, result = $1 WHERE status = 'running'"
                          " AND replica = $3",
                          true};
const Statement kJobsExpire{"jobs_expire", "DELETE FROM jobs WHERE status <> 'running' AND ended_ms < $1", true};
// Tenants keeping more ended rows than the bound, and how many more.
const Statement kJobsOver{"jobs_over",
                          "SELECT tenant, count(*) - $1 FROM jobs WHERE status <> 'running' GROUP BY tenant"
                          " HAVING count(*) > $1",
                          true};
// A tenant's oldest ended rows, at most $2 of them.
const Statement kJobsTrim{"jobs_trim",
                          "DELETE FROM jobs WHERE job_id IN (SELECT job_id FROM jobs WHERE tenant = $1 AND"
                          " status <> 'running' ORDER BY ended_ms, job_id LIMIT $2)",
                          true};
const Statement kTaskInsert{
    "task_insert",
    "INSERT INTO tasks (" TASK_COLUMNS ", replica) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)", true};
const Statement kTaskFinish{"task_finish",
                            "UPDATE tasks SET status = $1, status_message = $2, updated_ms = $3, expires_ms = $4,"
                            " result = $5 WHERE task_id = $6 AND status = 'working'",
                            false};
const Statement kTaskSetResult{"task_set_result", "UPDATE tasks SET result = $1 WHERE task_id = $2", true};
const Statement kTaskDelete{"task_delete", "DELETE FROM tasks WHERE task_id = $1", true};
const Statement kTaskFind{"task_find",
                          "SELECT " TASK_COLUMNS
                          " FROM tasks WHERE tenant = $1 AND task_id = $2 AND (status = 'working' OR expires_ms > $3)",
                          true};
const Statement kTaskList{"task_list",
                          "SELECT " TASK_COLUMNS
                          " FROM tasks WHERE tenant = $1 AND (status = 'working' OR expires_ms > $2)"
                          " AND (created_ms > $3 OR (created_ms = $3 AND task_id > $4))"
                          " ORDER BY created_ms, task_id LIMIT $5",
                          true};
const Statement kTasksEnded{
    "tasks_ended", "SELECT " TASK_COLUMNS " FROM tasks WHERE task_id = ANY($1::text[]) AND status <> 'working'", true};
const Statement kTaskCount{
    "task_count", "SELECT count(*) FROM tasks WHERE tenant = $1 AND (status = 'working' OR expires_ms > $2)", true};
const Statement kTasksLost{
    "tasks_lost",
    "UPDATE tasks SET status = 'failed', status_message = $1, result = $2, updated_ms = $3,"
    " expires_ms = greatest(expires_ms, $4) WHERE status = 'working' AND NOT EXISTS"
    " (SELECT 1 FROM replicas r WHERE r.replica_id = tasks.replica AND r.lease_expires_ms > throwbox_now_ms())",
    true};
const Statement kTasksLeft{"tasks_left",
                           "UPDATE tasks SET status = 'failed', status_message = $1, result = $2, updated_ms = $3,"
                           " expires_ms = greatest(expires_ms, $4) WHERE status = 'working' AND replica = $5",
                           true};
const Statement kTaskExpireAll{"task_expire_all", "DELETE FROM tasks WHERE status <> 'working' AND expires_ms <= $1",
                               true};
const Statement kTaskExpireTenant{
    "task_expire_tenant", "DELETE FROM tasks WHERE tenant = $2 AND status <> 'working' AND expires_ms <= $1", true};
const Statement kWorkspaceInsert{
    "workspace_insert", "INSERT INTO workspaces (" WORKSPACE_COLUMNS ") VALUES ($1, $2, $3, $4, $5, 0, '', 0, 0)",
    true};
const Statement kWorkspaceFind{"workspace_find",
                               "SELECT " WORKSPACE_COLUMNS
                               " FROM workspaces WHERE tenant = $1 AND workspace_id = $2 AND closed_ms = 0"
                               " AND expires_ms > $3",
                               true};
const Statement kWorkspaceCount{"workspace_count",
                                "SELECT count(*) FROM workspaces WHERE tenant = $1 AND closed_ms = 0", true};
const Statement kWorkspaceUsed{"workspace_used",
                               "UPDATE workspaces SET uses = uses + 1, size_bytes = $1,"
                               " expires_ms = greatest(expires_ms, $2) WHERE workspace_id = $3 AND closed_ms = 0",
                               false};
const Statement kWorkspaceClose{"workspace_close",
                                "UPDATE workspaces SET closed_ms = $1, closed_by = $2 WHERE tenant = $3"
                                " AND workspace_id = $4 AND closed_ms = 0 AND "
                                "(held_by = '' OR NOT EXISTS (SELECT 1 FROM replicas r WHERE r.replica_id = "
                                "workspaces.held_by AND r.lease_expires_ms > throwbox_now_ms()))",
                                false};
const Statement kWorkspaceExpired{"workspace_expired",
                                  "SELECT " WORKSPACE_COLUMNS
                                  " FROM workspaces WHERE closed_ms = 0 AND expires_ms <= $1 AND "
                                  "(held_by = '' OR NOT EXISTS (SELECT 1 FROM replicas r WHERE r.replica_id = "
                                  "workspaces.held_by AND r.lease_expires_ms > throwbox_now_ms()))",
                                  true};
const Statement kWorkspaceHold{"workspace_hold",
                               "UPDATE workspaces SET held_by = $3 WHERE workspace_id = $1 AND tenant = $2"
                               " AND closed_ms = 0 AND (held_by = $3 OR "
                               "(held_by = '' OR NOT EXISTS (SELECT 1 FROM replicas r WHERE r.replica_id = "
                               "workspaces.held_by AND r.lease_expires_ms > throwbox_now_ms())))",
                               true};
const Statement kWorkspaceUnhold{"workspace_unhold",
                                 "UPDATE workspaces SET held_by = '' WHERE workspace_id = $1 AND held_by = $2", true};
const Statement kWorkspaceOpenIds{"workspace_open_ids", "SELECT workspace_id FROM workspaces WHERE closed_ms = 0",
                                  true};
const Statement kWorkspaceForget{"workspace_forget", "DELETE FROM workspaces WHERE closed_ms <> 0 AND closed_ms < $1",
                                 true};
const Statement kReplicaInsert{"replica_insert",
                               "INSERT INTO replicas (replica_id, host, pid, started_ms, lease_expires_ms)"
                               " VALUES ($1, $2, $3, throwbox_now_ms(), throwbox_now_ms() + $4)"
                               " ON CONFLICT (replica_id) DO UPDATE SET lease_expires_ms = EXCLUDED.lease_expires_ms",
                               true};
// The row's old expiry is read in the same statement: a renewal that comes
// after the lease ran out says so (other replicas may have failed our rows).
const Statement kReplicaRenew{"replica_renew",
                              "UPDATE replicas r SET lease_expires_ms = throwbox_now_ms() + $2"
                              " FROM (SELECT lease_expires_ms AS old FROM replicas WHERE replica_id = $1) o"
                              " WHERE r.replica_id = $1 RETURNING o.old <= throwbox_now_ms()",
                              true};
const Statement kReplicaLeave{"replica_leave", "DELETE FROM replicas WHERE replica_id = $1", true};
// Replicas gone for an hour whose rows have all been settled.
const Statement kReplicasForget{
    "replicas_forget",
    "DELETE FROM replicas r WHERE r.lease_expires_ms < throwbox_now_ms() - 3600000"
    " AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.replica = r.replica_id AND j.status = 'running')"
    " AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.replica = r.replica_id AND t.status = 'working')",
    true};

std::string trimmed(const char* message) {
  std::string s = message ? message : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  for (char& c : s)
    if (c == '\n') c = ' ';
  return s;
}

// One libpq connection and the statements prepared on it.
struct Conn {
  PGconn* pg = nullptr;
  std::set<std::string> prepared;
  bool broken = false;
  ~Conn() { PQfinish(pg); }
};

struct Rows {
  PGresult* r = nullptr;
  ~Rows() { PQclear(r); }
  Rows() = default;
  Rows(Rows&& o) noexcept : r(std::exchange(o.r, nullptr)) {}
  Rows& operator=(Rows&& o) noexcept {
    std::swap(r, o.r);
    return *this;
  }
  int count() const { return PQntuples(r); }
  bool null(int row, int col) const { return PQgetisnull(r, row, col); }
  std::string text(int row, int col) const { return PQgetvalue(r, row, col); }
  int64_t num(int row, int col) const {
    if (null(row, col)) return 0;
    return std::strtoll(PQgetvalue(r, row, col), nullptr, 10);
  }
  nlohmann::json json(int row, int col) const {
    if (null(row, col)) return nullptr;
    return nlohmann::json::parse(PQgetvalue(r, row, col), nullptr, false);
  }
  int64_t changed() const { return std::strtoll(PQcmdTuples(r), nullptr, 10); }
};

LedgerRow read_job(const Rows& q, int i) {
  LedgerRow r;
  r.job_id = q.text(i, 0);
  r.tenant = q.text(i, 1);
  r.runtime = q.text(i, 2);
  r.code_sha256 = q.text(i, 3);
  r.inputs = q.json(i, 4);
  r.limits = q.json(i, 5);
  r.idempotency_key = q.text(i, 6);
  r.request_sha256 = q.text(i, 7);
  r.status = q.text(i, 8);
  r.result = q.json(i, 9);
  r.created_ms = q.num(i, 10);
  r.ended_ms = q.num(i, 11);
  return r;
}

TaskRow read_task(const Rows& q, int i) {
  TaskRow r;
  r.task_id = q.text(i, 0);
  r.tenant = q.text(i, 1);
  r.tool = q.text(i, 2);
  r.status = q.text(i, 3);
  r.status_message = q.text(i, 4);
  r.created_ms = q.num(i, 5);
  r.updated_ms = q.num(i, 6);
  r.ttl_ms = q.num(i, 7);
  r.expires_ms = q.num(i, 8);
  r.result = q.json(i, 9);
  return r;
}

WorkspaceRow read_workspace(const Rows& q, int i) {
  WorkspaceRow r;
  r.workspace_id = q.text(i, 0);
  r.tenant = q.text(i, 1);
  r.created_ms = q.num(i, 2);
  r.ttl_ms = q.num(i, 3);
  r.expires_ms = q.num(i, 4);
  r.closed_ms = q.num(i, 5);
  r.closed_by = q.text(i, 6);
  r.size_bytes = static_cast<uint64_t>(q.num(i, 7));
  r.uses = static_cast<uint64_t>(q.num(i, 8));
  return r;
}

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// How long a statement may wait for a free connection.
constexpr auto kConnectionWait = std::chrono::seconds(10);

}  // namespace pgsql

using pgsql::Conn;
using pgsql::Param;
using pgsql::Rows;
using pgsql::Statement;

class PgLedger final : public Ledger {
 public:
  PgLedger(const LedgerConfig& config, std::string replica)
      : uri_(config.where),
        shown_(util::redact_database_uri(config.where)),
        connections_max_(config.connections ? config.connections : 1),
        lease_ms_(config.lease_ms),
        replica_(std::move(replica)) {}
  ~PgLedger() override;

  util::Status start();

  const char* backend() const override { return "postgresql"; }
  bool shared() const override { return true; }
  util::Result<SlotState> slot_take(const std::string& job_id, const std::string& tenant, uint64_t tenant_max,
                                    uint64_t queued_max, const LedgerRow* start) override;
  void slot_release(const std::string& job_id) override;
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
  std::vector<TaskRow> tasks_ended(const std::vector<std::string>& task_ids) override;

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
  util::Result<bool> workspace_hold(const std::string& tenant, const std::string& workspace_id) override;
  void workspace_unhold(const std::string& workspace_id) override;

 private:
  util::Result<std::unique_ptr<Conn>> connect();
  util::Result<std::unique_ptr<Conn>> take();
  void give(std::unique_ptr<Conn> conn);
  // Runs one prepared statement; on a lost connection, a repeatable one once
  // more on a fresh connection. The error names `what`.
  util::Result<Rows> run(const Statement& st, std::initializer_list<Param> params);
  util::Result<Rows> run_on(Conn& conn, const Statement& st, const std::vector<Param>& params, bool& lost);
  util::Status migrate(Conn& conn);
  // One lease round: renew this replica's lease, settle lost replicas' rows.
  void lease_round();
  size_t settle_lost();

  const std::string uri_;
  const std::string shown_;  // uri_ without a password
  const size_t connections_max_;
  const int64_t lease_ms_;
  const std::string replica_;

  std::mutex pool_mu_;
  std::condition_variable pool_cv_;
  std::vector<std::unique_ptr<Conn>> idle_;  // under pool_mu_
  size_t open_ = 0;                          // connections made and not closed, under pool_mu_

  // Monotonic ms (util::now_ms) until which this replica's lease is known to hold, and
  // since when it has been renewed without a miss (0: the last round missed).
  std::atomic<int64_t> lease_until_{0};
  std::atomic<int64_t> renewed_since_{0};
  std::mutex lost_mu_;
  std::string lost_reason_;  // what the last fail_interrupted asked for, under lost_mu_
  struct TaskLoss {
    std::string message;
    nlohmann::json result;
    int64_t keep_ms = 0;
  };
  std::optional<TaskLoss> task_loss_;  // under lost_mu_
  // Ends the database did not take when they came (it did not answer).
  struct PendingEnd {
    std::string job_id;
    std::string status;
    nlohmann::json result;
    int64_t ended_ms = 0;
    std::optional<LedgerRow> started;  // its start's row, when this server recorded it
  };
  util::Result<Rows> write_end(const PendingEnd& end);
  void write_pending_ends();
  // The rows of jobs started here and not yet ended, so that the end can
  // write the whole row (an unflushed start may be lost with the database).
  // `with_slot`: recorded by slot_take, its record_start not yet come.
  struct Started {
    LedgerRow row;
    bool with_slot = false;
  };
  std::mutex started_mu_;
  std::map<std::string, Started> started_;  // under started_mu_
  std::mutex pending_mu_;
  std::vector<PendingEnd> pending_ends_;  // under pending_mu_, in the order they came
  std::jthread leases_;
};

int pg_schema_version() { return pgsql::kSchemaVersion; }

util::Result<std::unique_ptr<Ledger>> open_pg_ledger(const LedgerConfig& config) {
  if (std::string why = util::database_uri_problem(config.where); !why.empty())
    return util::make_error(util::ErrorCode::kInvalidArgument,
                            "database " + util::redact_database_uri(config.where) + ": " + why);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  auto ledger = std::make_unique<PgLedger>(
      config, std::string(host) + "/" + std::to_string(::getpid()) + "/" + util::random_id().substr(0, 8));
  if (auto s = ledger->start(); !s) return s.error();
  return std::unique_ptr<Ledger>(std::move(ledger));
}

util::Result<std::unique_ptr<Conn>> PgLedger::connect() {
  // Ours first: the URI's own settings, expanded from dbname, come later and win.
  const char* keys[] = {"connect_timeout",     "application_name", "keepalives", "keepalives_idle",
                        "keepalives_interval", "keepalives_count", "dbname",     nullptr};
  const char* values[] = {"5", "throwbox", "1", "10", "3", "3", uri_.c_str(), nullptr};
  auto conn = std::make_unique<Conn>();
  conn->pg = PQconnectdbParams(keys, values, 1);
  if (!conn->pg) return util::make_error(util::ErrorCode::kIo, "database " + shown_ + ": out of memory");
  if (PQstatus(conn->pg) != CONNECTION_OK)
    return util::make_error(util::ErrorCode::kIo,
                            "database " + shown_ + ": cannot connect: " + pgsql::trimmed(PQerrorMessage(conn->pg)));
  // The server's notices (a migration's "already exists, skipping") go to the
  // log at debug, never to stderr as libpq would print them.
  PQsetNoticeProcessor(
      conn->pg, [](void*, const char* message) { spdlog::debug("database: {}", pgsql::trimmed(message)); }, nullptr);
  return conn;
}

util::Result<std::unique_ptr<Conn>> PgLedger::take() {
  {
    std::unique_lock lock(pool_mu_);
    if (!pool_cv_.wait_for(lock, pgsql::kConnectionWait, [&] { return !idle_.empty() || open_ < connections_max_; }))
      return util::make_error(
          util::ErrorCode::kBusy,
          "database " + shown_ + ": all " + std::to_string(connections_max_) + " connections stayed busy for 10 s");
    if (!idle_.empty()) {
      auto conn = std::move(idle_.back());
      idle_.pop_back();
      return conn;
    }
    ++open_;  // the slot is ours while we connect, without the lock
  }
  auto conn = connect();
  if (!conn) {
    std::lock_guard lock(pool_mu_);
    --open_;
    pool_cv_.notify_one();
  }
  return conn;
}

void PgLedger::give(std::unique_ptr<Conn> conn) {
  std::lock_guard lock(pool_mu_);
  if (conn->broken || PQstatus(conn->pg) != CONNECTION_OK) {
    conn.reset();
    --open_;
  } else {
    idle_.push_back(std::move(conn));
  }
  pool_cv_.notify_one();
}

util::Result<Rows> PgLedger::run_on(Conn& conn, const Statement& st, const std::vector<Param>& params, bool& lost) {
  lost = false;
  auto failed = [&](PGresult* res, const char* step) -> util::Error {
    std::string state =
        res && PQresultErrorField(res, PG_DIAG_SQLSTATE) ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : "";
    std::string constraint =
        res && PQresultErrorField(res, PG_DIAG_CONSTRAINT_NAME) ? PQresultErrorField(res, PG_DIAG_CONSTRAINT_NAME) : "";
    std::string message = pgsql::trimmed(res ? PQresultErrorMessage(res) : PQerrorMessage(conn.pg));
    if (message.empty()) message = pgsql::trimmed(PQerrorMessage(conn.pg));
    PQclear(res);
    if (PQstatus(conn.pg) != CONNECTION_OK || state.rfind("08", 0) == 0 || state.rfind("57P", 0) == 0) {
      conn.broken = true;
      lost = true;
      return util::make_error(util::ErrorCode::kIo,
                              "database " + shown_ + ": connection lost (" + st.name + "): " + message);
    }
    if (state == "23505" && constraint == "jobs_key")
      return util::make_error(util::ErrorCode::kConflict, "ledger insert: the idempotency key is taken");
    if (state == "23505") return util::make_error(util::ErrorCode::kConflict, std::string(st.name) + ": " + message);
    return util::make_error(util::ErrorCode::kIo, std::string("database ") + step + " " + st.name + ": " + message);
  };
  if (!conn.prepared.count(st.name)) {
    PGresult* res = PQprepare(conn.pg, st.name, st.sql, static_cast<int>(params.size()), nullptr);
    if (!res || PQresultStatus(res) != PGRES_COMMAND_OK) return failed(res, "prepare");
    PQclear(res);
    conn.prepared.insert(st.name);
  }
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const Param& p : params) values.push_back(p ? p->c_str() : nullptr);
  Rows rows;
  rows.r = PQexecPrepared(conn.pg, st.name, static_cast<int>(values.size()), values.data(), nullptr, nullptr, 0);
  const ExecStatusType status = rows.r ? PQresultStatus(rows.r) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) return failed(std::exchange(rows.r, nullptr), "run");
  return rows;
}

util::Result<Rows> PgLedger::run(const Statement& st, std::initializer_list<Param> list) {
  const std::vector<Param> params(list);
  util::Error last;
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto conn = take();
    if (!conn) return conn.error();
    bool lost = false;
    auto rows = run_on(**conn, st, params, lost);
    give(std::move(*conn));
    if (rows || !lost) {
      // A repeated insert whose first try went through before the
      // connection was lost: the row is there, which is what was asked.
      if (!rows && attempt > 0 && rows.error().code == util::ErrorCode::kConflict &&
          rows.error().message.find("_pkey") != std::string::npos)
        return Rows{};
      return rows;
    }
    last = rows.error();
    if (!st.repeatable) break;
  }
  return last;
}

util::Status PgLedger::migrate(Conn& conn) {
  auto exec = [&](const std::string& sql) -> util::Status {
    PGresult* res = PQexec(conn.pg, sql.c_str());
    const ExecStatusType s = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    std::string message = pgsql::trimmed(res ? PQresultErrorMessage(res) : PQerrorMessage(conn.pg));
    PQclear(res);
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK)
      return util::make_error(util::ErrorCode::kIo, "database " + shown_ + ": schema: " + message);
    return util::ok_status();
  };
  if (auto s = exec("BEGIN"); !s) return s;
  auto fail = [&](util::Status s) {
    (void)exec("ROLLBACK");
    return s;
  };
  // One server at a time: the others wait here and then find the work done.
  if (auto s = exec("SELECT pg_advisory_xact_lock(" + std::to_string(pgsql::kMigrationLock) + ")"); !s) return fail(s);
  if (auto s = exec("CREATE TABLE IF NOT EXISTS throwbox_schema (version integer PRIMARY KEY, applied_ms bigint NOT "
                    "NULL)");
      !s)
    return fail(s);
  PGresult* res = PQexec(conn.pg, "SELECT coalesce(max(version), 0) FROM throwbox_schema");
  if (!res || PQresultStatus(res) != PGRES_TUPLES_OK) {
    std::string message = pgsql::trimmed(res ? PQresultErrorMessage(res) : PQerrorMessage(conn.pg));
    PQclear(res);
    return fail(util::make_error(util::ErrorCode::kIo, "database " + shown_ + ": schema: " + message));
  }
  const int have = std::atoi(PQgetvalue(res, 0, 0));
  PQclear(res);
  if (have > pgsql::kSchemaVersion)
    return fail(util::make_error(util::ErrorCode::kIo,
                                 "database " + shown_ + ": its schema is version " + std::to_string(have) +
                                     ", newer than this throwbox knows (" + std::to_string(pgsql::kSchemaVersion) +
                                     "): a newer throwbox migrated it; run that version, or another database"));
  if (auto s = exec(pgsql::kNowFunction); !s) return fail(s);
  for (int v = have + 1; v <= pgsql::kSchemaVersion; ++v) {
    if (auto s = exec(pgsql::kMigrations[v - 1]); !s) return fail(s);
    if (auto s = exec("INSERT INTO throwbox_schema (version, applied_ms) VALUES (" + std::to_string(v) + ", " +
                      std::to_string(pgsql::wall_ms()) + ")");
        !s)
      return fail(s);
    spdlog::info("database {}: schema migrated to version {}", shown_, v);
  }
  return exec("COMMIT");
}

util::Status PgLedger::start() {
  auto conn = take();
  if (!conn) return conn.error();
  auto migrated = migrate(**conn);
  give(std::move(*conn));
  if (!migrated) return migrated;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  auto joined =
      run(pgsql::kReplicaInsert, {replica_, std::string(host), pgsql::num(::getpid()), pgsql::num(lease_ms_)});
  if (!joined) return joined.error();
  lease_until_ = util::now_ms() + lease_ms_ * 2 / 3;
  renewed_since_ = util::now_ms();
  leases_ = std::jthread([this](std::stop_token stop) {
    std::mutex mu;
    std::condition_variable_any cv;
    std::unique_lock lock(mu);
    while (!cv.wait_for(lock, stop, std::chrono::milliseconds(std::max<int64_t>(lease_ms_ / 3, 50)),
                        [&] { return false; })) {
      if (stop.stop_requested()) break;
      lease_round();
    }
  });
  return util::ok_status();
}

PgLedger::~PgLedger() {
  if (!leases_.joinable()) return;  // never joined: nothing to give back
  leases_ = {};                     // stops and joins the lease thread
  write_pending_ends();             // a last try: what is still kept is lost with the lease
  // A clean stop gives the lease back at once: what is still running here is
  // lost now, not a lease later.
  if (auto left = run(pgsql::kReplicaLeave, {replica_}); !left) {
    spdlog::warn("database {}: leaving: {}", shown_, left.error().message);
    return;
  }
  const int64_t now = pgsql::wall_ms();
  (void)run(pgsql::kJobsLeft, {pgsql::json_text({{"interrupted", kReplicaLost}}), pgsql::num(now), replica_});
  (void)run(pgsql::kSlotsLeft, {replica_});
  std::optional<TaskLoss> tasks;
  {
    std::lock_guard lock(lost_mu_);
    tasks = task_loss_;
  }
  if (tasks)
    (void)run(pgsql::kTasksLeft, {tasks->message, pgsql::json_text(tasks->result), pgsql::num(now),
                                  pgsql::num(now + tasks->keep_ms), replica_});
}

void PgLedger::lease_round() {
  const int64_t before = util::now_ms();
  auto renewed = run(pgsql::kReplicaRenew, {replica_, pgsql::num(lease_ms_)});
  if (!renewed) {
    spdlog::warn("database {}: lease not renewed: {}", shown_, renewed.error().message);
    renewed_since_ = 0;
    return;
  }
  if (renewed_since_.load() == 0) renewed_since_ = before;
  if (renewed->count() == 0 || renewed->text(0, 0) == "t") {
    // Gone (a replica that found it lost forgot it) or run out: our running
    // rows may already be failed; those that are not carry on.
    spdlog::error("database {}: this server's lease had run out; other servers may have failed its running jobs",
                  shown_);
    if (renewed->count() == 0) {
      char host[256] = {};
      ::gethostname(host, sizeof host - 1);
      if (!run(pgsql::kReplicaInsert, {replica_, std::string(host), pgsql::num(::getpid()), pgsql::num(lease_ms_)}))
        return;
    }
  }
  lease_until_ = before + lease_ms_ * 2 / 3;
  write_pending_ends();
  settle_lost();
  (void)run(pgsql::kReplicasForget, {});
}

size_t PgLedger::settle_lost() {
  // Only once this server has renewed its own lease for a whole lease without
  // a miss: after the database was away (a restart) every server's lease may
  // have run out, and each must have had its turn to renew before any is
  // judged lost.
  const int64_t since = renewed_since_.load();
  if (since == 0 || util::now_ms() - since < lease_ms_) return 0;
  std::string reason;
  std::optional<TaskLoss> tasks;
  {
    std::lock_guard lock(lost_mu_);
    reason = lost_reason_.empty() ? kReplicaLost : lost_reason_;
    tasks = task_loss_;
  }
  size_t n = 0;
  const int64_t now = pgsql::wall_ms();
  if (auto jobs = run(pgsql::kJobsLost, {pgsql::json_text({{"interrupted", reason}}), pgsql::num(now)}); jobs) {
    n += static_cast<size_t>(jobs->changed());
    if (jobs->changed())
      spdlog::warn("database {}: {} job(s) of lost servers recorded as failed", shown_, jobs->changed());
  }
  if (auto slots = run(pgsql::kSlotsLost, {}); slots && slots->changed())
    spdlog::warn("database {}: {} tenant slot(s) of lost servers freed", shown_, slots->changed());
  if (tasks) {
    auto t = run(pgsql::kTasksLost,
                 {tasks->message, pgsql::json_text(tasks->result), pgsql::num(now), pgsql::num(now + tasks->keep_ms)});
    if (t) n += static_cast<size_t>(t->changed());
  }
  return n;
}

util::Status PgLedger::ping() {
  auto rows = run(pgsql::kPing, {});
  if (!rows) return rows.error();
  if (util::now_ms() > lease_until_.load())
    return util::make_error(util::ErrorCode::kIo, "database " + shown_ + ": this server's lease is not current");
  return util::ok_status();
}

util::Status PgLedger::record_start(const LedgerRow& r) {
  {
    // Recorded with its slot: nothing more to send.
    std::lock_guard lock(started_mu_);
    if (auto it = started_.find(r.job_id); it != started_.end() && it->second.with_slot) {
      it->second.with_slot = false;
      return util::ok_status();
    }
  }
  // Not recorded with a slot: on its own, flushed (a key's row must be).
  LedgerRow row = r;
  if (!row.created_ms) row.created_ms = pgsql::wall_ms();
  auto rows =
      run(pgsql::kJobInsert, {row.job_id, row.tenant, row.runtime, row.code_sha256, row.inputs.dump(),
                              row.limits.dump(), row.idempotency_key.empty() ? Param() : Param(row.idempotency_key),
                              row.request_sha256, pgsql::num(row.created_ms), replica_});
  if (!rows) return rows.error();
  std::lock_guard lock(started_mu_);
  const std::string id = row.job_id;
  started_.insert_or_assign(id, Started{std::move(row), false});
  return util::ok_status();
}

util::Result<Ledger::SlotState> PgLedger::slot_take(const std::string& job_id, const std::string& tenant,
                                                    uint64_t tenant_max, uint64_t queued_max, const LedgerRow* start) {
  std::optional<LedgerRow> row;
  if (start && start->job_id == job_id && start->tenant == tenant) {
    row = *start;
    if (!row->created_ms) row->created_ms = pgsql::wall_ms();
  }
  const Param max = pgsql::num(static_cast<int64_t>(tenant_max));
  const Param queued = pgsql::num(static_cast<int64_t>(queued_max));
  auto rows = row ? run(pgsql::kSlotTakeStart,
                        {job_id, tenant, replica_, max, queued, row->runtime, row->code_sha256, row->inputs.dump(),
                         row->limits.dump(), row->request_sha256, pgsql::num(row->created_ms),
                         row->idempotency_key.empty() ? Param() : Param(row->idempotency_key)})
                  : run(pgsql::kSlotTake, {job_id, tenant, replica_, max, queued});
  if (!rows) return rows.error();
  const std::string state = rows->count() ? rows->text(0, 0) : "";
  if (state == "key")
    return util::make_error(util::ErrorCode::kConflict,
                            "database " + shown_ + ": the idempotency key is another job's");
  if (state == "taken") {
    // Another job holds the key: the slot just taken goes back at once.
    if (auto released = run(pgsql::kSlotRelease, {job_id}); !released)
      spdlog::warn("{} (the slot goes with this server's lease)", released.error().message);
    return util::make_error(util::ErrorCode::kConflict,
                            "database " + shown_ + ": the idempotency key is another job's");
  }
  if (state == "running" && row) {
    std::lock_guard lock(started_mu_);
    started_.insert_or_assign(job_id, Started{std::move(*row), true});
  }
  if (state == "running") return SlotState::kRunning;
  if (state == "queued") return SlotState::kQueued;
  if (state == "busy") return SlotState::kBusy;
  return util::make_error(util::ErrorCode::kInternal, "database " + shown_ + ": slot_take answered \"" + state + "\"");
}

void PgLedger::slot_release(const std::string& job_id) {
  // Recorded with the slot and never started: the row goes too. Started
  // and its end not written (a failed end): the row stays as it is. Either
  // way no end follows a release.
  bool with_row = false;
  {
    std::lock_guard lock(started_mu_);
    if (auto it = started_.find(job_id); it != started_.end()) {
      with_row = it->second.with_slot;
      started_.erase(it);
    }
  }
  if (auto rows = run(with_row ? pgsql::kSlotReleaseStart : pgsql::kSlotRelease, {job_id}); !rows)
    spdlog::warn("{} (the slot goes with this server's lease)", rows.error().message);
}

util::Status PgLedger::record_end(const std::string& job_id, const std::string& status, const nlohmann::json& result) {
  PendingEnd end{job_id, status, result, pgsql::wall_ms(), std::nullopt};
  {
    std::lock_guard lock(started_mu_);
    if (auto it = started_.find(job_id); it != started_.end()) {
      end.started = std::move(it->second.row);
      started_.erase(it);
    }
  }
  auto rows = write_end(end);
  if (rows) return util::ok_status();
  if (rows.error().code != util::ErrorCode::kIo && rows.error().code != util::ErrorCode::kBusy) return rows.error();
  // The database does not answer: the end is kept and written by the lease
  // rounds once it does, so a job that ran is never left "running" by a
  // database restart (unless this server is lost meanwhile: then it is
  // failed as lost, and the late end changes nothing).
  std::lock_guard lock(pending_mu_);
  pending_ends_.push_back(std::move(end));
  spdlog::warn("{}; job {}: its end is kept and written when the database answers ({} waiting)", rows.error().message,
               job_id, pending_ends_.size());
  return util::ok_status();
}

util::Result<Rows> PgLedger::write_end(const PendingEnd& e) {
  if (!e.started)
    return run(pgsql::kJobEndUpdate, {e.status, pgsql::json_text(e.result), pgsql::num(e.ended_ms), e.job_id});
  const LedgerRow& r = *e.started;
  return run(pgsql::kJobEnd, {e.status, pgsql::json_text(e.result), pgsql::num(e.ended_ms), e.job_id, r.tenant,
                              r.runtime, r.code_sha256, r.inputs.dump(), r.limits.dump(),
                              r.idempotency_key.empty() ? Param() : Param(r.idempotency_key), r.request_sha256,
                              pgsql::num(r.created_ms), replica_});
}

void PgLedger::write_pending_ends() {
  std::vector<PendingEnd> pending;
  {
    std::lock_guard lock(pending_mu_);
    pending.swap(pending_ends_);
  }
  std::vector<PendingEnd> still;
  for (auto& e : pending) {
    if (!still.empty() || !write_end(e)) {
      still.push_back(std::move(e));  // the database went again: keep the rest, in order
      continue;
    }
    spdlog::info("database {}: job {}: its kept end is written", shown_, e.job_id);
  }
  if (still.empty()) return;
  std::lock_guard lock(pending_mu_);
  pending_ends_.insert(pending_ends_.begin(), std::make_move_iterator(still.begin()),
                       std::make_move_iterator(still.end()));
}

std::optional<LedgerRow> PgLedger::find_by_key(const std::string& tenant, const std::string& key) {
  auto rows = run(pgsql::kJobByKey, {tenant, key});
  if (!rows) {
    spdlog::error("{}", rows.error().message);
    return std::nullopt;
  }
  if (rows->count() == 0) return std::nullopt;
  return pgsql::read_job(*rows, 0);
}

std::optional<LedgerRow> PgLedger::find(const std::string& tenant, const std::string& job_id) {
  auto rows = run(pgsql::kJobById, {tenant, job_id});
  if (!rows) {
    spdlog::error("{}", rows.error().message);
    return std::nullopt;
  }
  if (rows->count() == 0) return std::nullopt;
  return pgsql::read_job(*rows, 0);
}

size_t PgLedger::fail_interrupted(const std::string& reason) {
  {
    std::lock_guard lock(lost_mu_);
    lost_reason_ = std::string("replica lost: ") + reason + " (its lease expired)";
  }
  return settle_lost();
}

size_t PgLedger::trim(uint64_t ended_per_tenant_max) {
  auto over = run(pgsql::kJobsOver, {pgsql::num(static_cast<int64_t>(ended_per_tenant_max))});
  if (!over) return 0;
  size_t removed = 0;
  for (int i = 0; i < over->count(); ++i) {
    const std::string tenant = over->text(i, 0);
    for (int64_t excess = over->num(i, 1); excess > 0;) {
      auto rows = run(pgsql::kJobsTrim, {tenant, pgsql::num(std::min<int64_t>(excess, 500))});
      if (!rows || rows->changed() == 0) break;
      excess -= rows->changed();
      removed += static_cast<size_t>(rows->changed());
    }
  }
  return removed;
}

size_t PgLedger::expire(uint64_t ttl_s) {
  auto rows = run(pgsql::kJobsExpire, {pgsql::num(pgsql::wall_ms() - static_cast<int64_t>(ttl_s) * 1000)});
  return rows ? static_cast<size_t>(rows->changed()) : 0;
}

util::Status PgLedger::task_insert(const TaskRow& r) {
  auto rows = run(pgsql::kTaskInsert, {r.task_id, r.tenant, r.tool, r.status, r.status_message,
                                       pgsql::num(r.created_ms), pgsql::num(r.updated_ms), pgsql::num(r.ttl_ms),
                                       pgsql::num(r.expires_ms), pgsql::json_text(r.result), replica_});
  if (!rows) return rows.error();
  return util::ok_status();
}

util::Result<bool> PgLedger::task_finish(const TaskRow& r) {
  auto rows = run(pgsql::kTaskFinish, {r.status, r.status_message, pgsql::num(r.updated_ms), pgsql::num(r.expires_ms),
                                       pgsql::json_text(r.result), r.task_id});
  if (!rows) return rows.error();
  return rows->changed() > 0;
}

util::Status PgLedger::task_set_result(const std::string& task_id, const nlohmann::json& result) {
  auto rows = run(pgsql::kTaskSetResult, {pgsql::json_text(result), task_id});
  if (!rows) return rows.error();
  return util::ok_status();
}

util::Status PgLedger::task_delete(const std::string& task_id) {
  auto rows = run(pgsql::kTaskDelete, {task_id});
  if (!rows) return rows.error();
  return util::ok_status();
}

std::optional<TaskRow> PgLedger::task_find(const std::string& tenant, const std::string& task_id, int64_t now_ms) {
  auto rows = run(pgsql::kTaskFind, {tenant, task_id, pgsql::num(now_ms)});
  if (!rows || rows->count() == 0) return std::nullopt;
  return pgsql::read_task(*rows, 0);
}

std::vector<TaskRow> PgLedger::tasks_ended(const std::vector<std::string>& task_ids) {
  std::vector<TaskRow> out;
  if (task_ids.empty()) return out;
  // An array literal: task ids are 32 hex digits, nothing to quote.
  std::string ids = "{";
  for (const auto& id : task_ids) {
    if (id.find_first_not_of("0123456789abcdef") != std::string::npos) continue;
    ids += (ids.size() > 1 ? "," : "") + id;
  }
  ids += "}";
  auto rows = run(pgsql::kTasksEnded, {ids});
  if (!rows) return out;
  for (int i = 0; i < rows->count(); ++i) out.push_back(pgsql::read_task(*rows, i));
  return out;
}

std::vector<TaskRow> PgLedger::task_list(const std::string& tenant, int64_t after_created_ms,
                                         const std::string& after_task_id, size_t limit, int64_t now_ms) {
  std::vector<TaskRow> out;
  auto rows = run(pgsql::kTaskList, {tenant, pgsql::num(now_ms), pgsql::num(after_created_ms), after_task_id,
                                     pgsql::num(static_cast<int64_t>(limit))});
  if (!rows) return out;
  for (int i = 0; i < rows->count(); ++i) out.push_back(pgsql::read_task(*rows, i));
  return out;
}

uint64_t PgLedger::task_count(const std::string& tenant, int64_t now_ms) {
  auto rows = run(pgsql::kTaskCount, {tenant, pgsql::num(now_ms)});
  if (!rows || rows->count() == 0) return 0;
  return static_cast<uint64_t>(rows->num(0, 0));
}

size_t PgLedger::task_fail_interrupted(const std::string& message, const nlohmann::json& result, int64_t now_ms,
                                       int64_t keep_ms) {
  {
    std::lock_guard lock(lost_mu_);
    task_loss_ = TaskLoss{message, result, keep_ms};
  }
  // Settled by the lease rounds, as jobs are (settle_lost): a server that has
  // just started waits a lease first.
  (void)now_ms;
  return settle_lost();
}

size_t PgLedger::task_expire(const std::string& tenant, int64_t now_ms) {
  auto rows = tenant.empty() ? run(pgsql::kTaskExpireAll, {pgsql::num(now_ms)})
                             : run(pgsql::kTaskExpireTenant, {pgsql::num(now_ms), tenant});
  return rows ? static_cast<size_t>(rows->changed()) : 0;
}

util::Status PgLedger::workspace_insert(const WorkspaceRow& r) {
  auto rows = run(pgsql::kWorkspaceInsert,
                  {r.workspace_id, r.tenant, pgsql::num(r.created_ms), pgsql::num(r.ttl_ms), pgsql::num(r.expires_ms)});
  if (!rows) return rows.error();
  return util::ok_status();
}

std::optional<WorkspaceRow> PgLedger::workspace_find(const std::string& tenant, const std::string& workspace_id,
                                                     int64_t now_ms) {
  auto rows = run(pgsql::kWorkspaceFind, {tenant, workspace_id, pgsql::num(now_ms)});
  if (!rows || rows->count() == 0) return std::nullopt;
  return pgsql::read_workspace(*rows, 0);
}

uint64_t PgLedger::workspace_count(const std::string& tenant) {
  auto rows = run(pgsql::kWorkspaceCount, {tenant});
  if (!rows || rows->count() == 0) return 0;
  return static_cast<uint64_t>(rows->num(0, 0));
}

util::Status PgLedger::workspace_used(const std::string& workspace_id, uint64_t size_bytes, int64_t expires_ms) {
  auto rows =
      run(pgsql::kWorkspaceUsed, {pgsql::num(static_cast<int64_t>(size_bytes)), pgsql::num(expires_ms), workspace_id});
  if (!rows) return rows.error();
  return util::ok_status();
}

util::Result<bool> PgLedger::workspace_close(const std::string& tenant, const std::string& workspace_id, int64_t now_ms,
                                             const std::string& by) {
  auto rows = run(pgsql::kWorkspaceClose, {pgsql::num(now_ms), by, tenant, workspace_id});
  if (!rows) return rows.error();
  return rows->changed() > 0;
}

std::vector<WorkspaceRow> PgLedger::workspace_expired(int64_t now_ms) {
  std::vector<WorkspaceRow> out;
  auto rows = run(pgsql::kWorkspaceExpired, {pgsql::num(now_ms)});
  if (!rows) return out;
  for (int i = 0; i < rows->count(); ++i) out.push_back(pgsql::read_workspace(*rows, i));
  return out;
}

std::vector<std::string> PgLedger::workspace_open_ids() {
  std::vector<std::string> out;
  auto rows = run(pgsql::kWorkspaceOpenIds, {});
  if (!rows) return out;
  for (int i = 0; i < rows->count(); ++i) out.push_back(rows->text(i, 0));
  return out;
}

util::Result<bool> PgLedger::workspace_hold(const std::string& tenant, const std::string& workspace_id) {
  auto rows = run(pgsql::kWorkspaceHold, {workspace_id, tenant, replica_});
  if (!rows) return rows.error();
  return rows->changed() > 0;
}

void PgLedger::workspace_unhold(const std::string& workspace_id) {
  if (auto rows = run(pgsql::kWorkspaceUnhold, {workspace_id, replica_}); !rows)
    spdlog::warn("{} (the hold goes with this server's lease)", rows.error().message);
}

size_t PgLedger::workspace_forget(uint64_t ttl_s) {
  auto rows = run(pgsql::kWorkspaceForget, {pgsql::num(pgsql::wall_ms() - static_cast<int64_t>(ttl_s) * 1000)});
  return rows ? static_cast<size_t>(rows->changed()) : 0;
}

}  // namespace broker
