// The broker as its callers see it: the tools, the MCP session and the HTTP
// operations run jobs, take uploads, keep workspaces and read records through
// this face, never through the coordinator behind it (broker::Jobs, jobs.h).
// Tests stand a fake in its place. Every member is called from server worker
// threads at once.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "server/broker/job.h"
#include "server/broker/job_records.h"  // job_result_from_row: a record read back as its result
#include "server/broker/ledger.h"
#include "server/broker/workspaces.h"
#include "server/util/result.h"

namespace broker {

class Broker {
 public:
  virtual ~Broker() = default;

  // Runs one job to its end. Errors are request problems (kInvalidArgument,
  // kNotFound, kConflict for a reused idempotency key, kBusy with
  // retry_after_s for a tenant over its budget) or broker faults
  // (kInternal); a program that fails is a JobResult.
  virtual util::Result<JobResult> run(const JobRequest& request) = 0;
  // The media type an upload is recorded with; application/octet-stream
  // when it cannot be told.
  virtual std::string upload_media_type(const std::string& name, const std::string& content) = 0;

  // A tenant's workspaces: opened, closed, and held by a call for its length
  // (a task holds it from before it exists).
  virtual util::Result<WorkspaceInfo> open_workspace(const std::string& tenant, std::optional<double> ttl_s) = 0;
  virtual util::Status close_workspace(const std::string& tenant, const std::string& workspace_id) = 0;
  virtual util::Result<std::shared_ptr<WorkspaceUse>> hold_workspace(const std::string& tenant,
                                                                     const std::string& workspace_id) = 0;

  // The tenant's recorded job; a foreign or unknown id reads as none.
  virtual std::optional<LedgerRow> find_record(const std::string& tenant, const std::string& job_id) = 0;

  // The Prometheus text of the broker's metrics, with the gauges of this
  // moment (sessions_open comes from the transport).
  virtual std::string metrics_text(uint64_t sessions_open) = 0;
  // The public half of the key receipts are signed with: {"alg", "key_id",
  // "public_key_pem"} (receipts.h).
  virtual nlohmann::json receipt_key() = 0;
  // Why the broker cannot take jobs now (its runner is missing), or "".
  virtual std::string unready_reason() = 0;
};

}  // namespace broker
