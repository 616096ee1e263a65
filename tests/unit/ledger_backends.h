// The ledger backends a case runs against: SQLite (a file in a temp
// directory) always; PostgreSQL too when THROWBOX_TEST_PG_HOST names the
// socket directory of a running cluster (tests/database/postgres.sh starts
// one; THROWBOX_TEST_PG_USER is its superuser). Each PostgreSQL backend is a
// database of its own, created for the case and dropped after it.
#pragma once
#include <doctest/doctest.h>

#include <libpq-fe.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "server/broker/ledger.h"
#include "server/util/random.h"
#include "tests/unit/temp_dir.h"

namespace unit {

// The test cluster's connection URI for database `db`, or "" without one.
inline std::string pg_uri(const std::string& db) {
  const char* host = std::getenv("THROWBOX_TEST_PG_HOST");
  if (!host || !*host) return "";
  const char* user = std::getenv("THROWBOX_TEST_PG_USER");
  return "postgresql:///" + db + "?host=" + host + "&user=" + (user && *user ? user : "throwbox");
}

// Runs `sql` on database `db` of the test cluster; the first value of its
// first row ("" when none). REQUIREs success.
inline std::string pg_exec(const std::string& db, const std::string& sql) {
  PGconn* c = PQconnectdb(pg_uri(db).c_str());
  REQUIRE_MESSAGE(PQstatus(c) == CONNECTION_OK, PQerrorMessage(c));
  PGresult* r = PQexec(c, sql.c_str());
  const ExecStatusType s = PQresultStatus(r);
  std::string message = PQresultErrorMessage(r);
  std::string out = (s == PGRES_TUPLES_OK && PQntuples(r) > 0) ? PQgetvalue(r, 0, 0) : "";
  PQclear(r);
  PQfinish(c);
  const std::string why = sql + ": " + message;
  REQUIRE_MESSAGE((s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK), why);
  return out;
}

struct LedgerBackend {
  std::string name;   // "sqlite" or "postgresql"
  std::string where;  // what Ledger::open takes
  std::unique_ptr<TempDir> dir;
  std::string database;  // PostgreSQL: the case's own database

  ~LedgerBackend() {
    if (!database.empty()) pg_exec("postgres", "DROP DATABASE IF EXISTS " + database + " WITH (FORCE)");
  }
  bool shared() const { return name == "postgresql"; }
  std::unique_ptr<broker::Ledger> open(int64_t lease_ms = 15000) const {
    broker::LedgerConfig config{where};
    config.lease_ms = lease_ms;
    auto ledger = broker::Ledger::open(config);
    REQUIRE_MESSAGE(ledger.ok(), (ledger.ok() ? "" : ledger.error().message));
    return std::move(*ledger);
  }
};

inline std::vector<std::unique_ptr<LedgerBackend>> ledger_backends() {
  std::vector<std::unique_ptr<LedgerBackend>> out;
  auto sqlite = std::make_unique<LedgerBackend>();
  sqlite->name = "sqlite";
  sqlite->dir = std::make_unique<TempDir>("ledger");
  sqlite->where = sqlite->dir->path + "/ledger.sqlite3";
  out.push_back(std::move(sqlite));
  if (!pg_uri("postgres").empty()) {
    auto pg = std::make_unique<LedgerBackend>();
    pg->name = "postgresql";
    pg->database = "t_" + util::random_id().substr(0, 16);
    pg_exec("postgres", "CREATE DATABASE " + pg->database);
    pg->where = pg_uri(pg->database);
    out.push_back(std::move(pg));
  }
  return out;
}

}  // namespace unit
