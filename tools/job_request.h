// run_code's arguments as a broker request: the MCP tool and the HTTP job
// API (POST /jobs) parse them here, with the same checks and error texts.
#pragma once
#include <initializer_list>
#include <string>

#include <nlohmann/json.hpp>

#include "server/broker/job.h"
#include "server/util/result.h"

namespace tools {

// The arguments run_code takes, and those of POST /jobs (no workspace,
// artifacts or network over the HTTP job API).
inline constexpr std::initializer_list<const char*> kRunCodeFields = {
    "runtime", "code",         "input_ids",    "timeout_s", "idempotency_key",
    "network", "workspace_id", "artifact_ids", "checks"};
inline constexpr std::initializer_list<const char*> kHttpJobFields = {
    "runtime", "code", "input_ids", "timeout_s", "idempotency_key", "checks"};

// A request for `tenant` from an arguments object; a field outside `known`
// is refused. Errors (kInvalidArgument) name the field.
util::Result<broker::JobRequest> parse_job_request(const nlohmann::json& args, const std::string& tenant,
                                                   std::initializer_list<const char*> known);

}  // namespace tools
