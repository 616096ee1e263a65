// Ledger::open: the backend a LedgerConfig names.
#include "server/broker/ledger.h"

#include "server/broker/ledger_pg.h"
#include "server/policy/policy.h"
#include "server/broker/ledger_sqlite.h"
#include "server/util/database_uri.h"

namespace broker {

LedgerConfig ledger_config(const policy::Policy& policy, const std::string& state_dir) {
  LedgerConfig config;
  config.where = policy.server.database.empty() ? state_dir + "/ledger.sqlite3" : policy.server.database;
  return config;
}

std::string describe(const LedgerConfig& config) {
  if (util::is_database_uri(config.where)) return "postgresql " + util::redact_database_uri(config.where);
  return "sqlite " + config.where;
}

util::Result<std::unique_ptr<Ledger>> Ledger::open(const LedgerConfig& config) {
  if (util::is_database_uri(config.where)) return open_pg_ledger(config);
  return SqliteLedger::open(config.where);
}

}  // namespace broker
