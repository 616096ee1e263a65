// A job's ledger record: the row written before it starts, the result JSON
// written when it ends, and that JSON read back as the result run() returned
// (a replayed idempotency key, GET /jobs/{id}, crash-interrupted rows).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/broker/job.h"
#include "server/broker/ledger.h"

namespace broker {

// The row record_start writes: what runs (hashes, not code), its inputs and limits.
struct InputRef {
  std::string input_id;
  std::string name;
  std::string sha256;
};
LedgerRow start_row(const JobRequest& request, const std::string& job_id, const std::string& request_sha256,
                    const std::vector<InputRef>& inputs, const sandbox::LaunchSpec& spec);
// {"outcome": ..., "artifacts": [...]}: what record_end stores for an ended job.
nlohmann::json recorded_result(const JobResult& result);
// An ended job's ledger row as the result run() returned.
JobResult job_result_from_row(const LedgerRow& row);

}  // namespace broker
