// Ledger rows <-> job results. Pure mapping; the Ledger does the I/O.
#include "server/broker/job_records.h"

#include "server/broker/checks.h"
#include "server/network/proxy.h"
#include "server/util/crypto.h"

namespace broker {
namespace {

nlohmann::json artifacts_to_json(const std::vector<ArtifactSummary>& list) {
  nlohmann::json out = nlohmann::json::array();
  for (auto& a : list) out.push_back(to_json(a));
  return out;
}

std::vector<ArtifactSummary> artifacts_from_json(const nlohmann::json& j) {
  std::vector<ArtifactSummary> out;
  if (!j.is_array()) return out;
  for (auto& a : j) {
    ArtifactSummary s;
    if (a.contains("artifact_id") && a["artifact_id"].is_string()) s.artifact_id = a["artifact_id"].get<std::string>();
    s.name = a.value("name", "");
    s.media_type = a.value("media_type", "");
    s.size = a.value("size", uint64_t{0});
    s.sha256 = a.value("sha256", "");
    s.verdict = artifacts::verdict_from_string(a.value("verdict", ""));
    s.reason = a.value("reason", "");
    out.push_back(s);
  }
  return out;
}

}  // namespace

LedgerRow start_row(const JobRequest& req, const std::string& job_id, const std::string& request_sha256,
                    const std::vector<InputRef>& inputs, const sandbox::LaunchSpec& spec) {
  LedgerRow row;
  row.job_id = job_id;
  row.tenant = req.tenant;
  row.runtime = req.runtime;
  row.code_sha256 = util::sha256_hex(req.code);
  row.inputs = nlohmann::json::array();
  for (auto& in : inputs) row.inputs.push_back({{"input_id", in.input_id}, {"name", in.name}, {"sha256", in.sha256}});
  row.limits = {{"timeout_ms", spec.timeout_ms},
                {"memory_max_bytes", spec.memory_max_bytes},
                {"pids_max", spec.pids_max},
                {"stdout_max_bytes", spec.stdout_max_bytes}};
  if (!req.workspace_id.empty()) row.limits["workspace_id"] = req.workspace_id;
  if (!req.network.empty()) row.limits["network"] = req.network;
  row.idempotency_key = req.idempotency_key;
  row.request_sha256 = request_sha256;
  return row;
}

nlohmann::json recorded_result(const JobResult& result) {
  nlohmann::json outcome = sandbox::to_json(result.outcome);
  outcome["files"] = nlohmann::json::array();  // host paths of a scratch dir now gone
  nlohmann::json checks = nlohmann::json::array();
  for (const CheckResult& c : result.checks) checks.push_back(to_json(c));
  nlohmann::json out{{"outcome", outcome}, {"artifacts", artifacts_to_json(result.artifacts)}, {"checks", checks}};
  if (!result.network.is_null()) out["network"] = result.network;
  if (!result.workspace.is_null()) out["workspace"] = result.workspace;
  if (!result.receipt.is_null()) out["receipt"] = result.receipt;
  return out;
}

JobResult job_result_from_row(const LedgerRow& row) {
  JobResult r;
  r.job_id = row.job_id;
  if (row.result.is_object() && row.result.contains("outcome")) {
    nlohmann::json o = row.result["outcome"];
    o["files"] = nlohmann::json::array();
    // Rows recorded before the cut counts were: the outcome reader wants them.
    for (const char* key : {"stdout_cut_bytes", "stderr_cut_bytes"})
      if (!o.contains(key)) o[key] = 0;
    if (auto parsed = sandbox::outcome_from_json(o)) r.outcome = *parsed;
    r.artifacts = artifacts_from_json(row.result.value("artifacts", nlohmann::json::array()));
    r.checks = checks_from_json(row.result.value("checks", nlohmann::json::array()));
    if (row.result.contains("network") && row.result["network"].is_object())
      r.network = network::to_json(network::report_from_json(row.result["network"]));
    if (row.result.contains("workspace") && row.result["workspace"].is_object()) r.workspace = row.result["workspace"];
    if (row.result.contains("receipt") && row.result["receipt"].is_object()) r.receipt = row.result["receipt"];
  } else {
    r.outcome.status = sandbox::status_from_string(row.status).value_or(sandbox::Status::sandbox_error);
    r.outcome.error =
        row.result.is_object() ? row.result.value("interrupted", "no result recorded") : "no result recorded";
  }
  return r;
}

}  // namespace broker
