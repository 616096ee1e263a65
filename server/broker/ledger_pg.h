// The PostgreSQL ledger: one database shared by several servers (replicas).
// - The schema is versioned: open() applies the migrations this build knows,
//   one server at a time (an advisory lock), and refuses a database whose
//   schema is newer than it knows.
// - A pool of libpq connections; every statement is a prepared one, prepared
//   on a connection the first time it runs there. A statement that only reads,
//   or whose repeat changes nothing, is sent again once on a fresh connection
//   when the first was lost (a restarted database).
// - Each replica holds a lease on its row of the replicas table, renewed by a
//   thread of its own every third of lease_ms; jobs and tasks carry the
//   replica that runs them. On every renewal the replica fails the running
//   jobs and working tasks of replicas whose lease ran out ("replica lost"):
//   whichever replica is alive does it, once, and a lost replica's late end
//   changes nothing (an end only moves a row that is still running).
// - Time in leases is the database's clock, never a replica's.
#pragma once
#include <memory>
#include <string>

#include "server/broker/ledger.h"

namespace broker {

// What a lost replica's rows read (the job's result "interrupted", the task's
// status message).
inline constexpr const char* kReplicaLost =
    "replica lost: the server running it stopped or lost the database, and its lease expired";

class PgLedger;

// The PostgreSQL backend; Ledger::open chooses it for a connection URI.
util::Result<std::unique_ptr<Ledger>> open_pg_ledger(const LedgerConfig& config);

// This build's schema version (the highest migration it applies).
int pg_schema_version();

}  // namespace broker
