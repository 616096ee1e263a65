// The one parse of run_code's arguments (job_request.h).
#include "tools/job_request.h"

#include <cmath>

#include "server/broker/workspaces.h"
#include "tools/registry.h"

namespace tools {

using nlohmann::json;

util::Result<broker::JobRequest> parse_job_request(const json& args, const std::string& tenant,
                                                   std::initializer_list<const char*> known) {
  auto bad = [](const std::string& message) { return util::make_error(util::ErrorCode::kInvalidArgument, message); };
  if (auto s = reject_unknown_fields(args, known); !s) return s.error();
  broker::JobRequest req;
  req.tenant = tenant;
  if (!args.contains("runtime") || !args["runtime"].is_string())
    return bad("runtime: required, must be a string naming a runtime");
  req.runtime = args["runtime"].get<std::string>();
  if (!args.contains("code") || !args["code"].is_string())
    return bad("code: required, must be a string holding the program");
  req.code = args["code"].get<std::string>();
  if (args.contains("input_ids")) {
    const json& ids = args["input_ids"];
    if (!ids.is_array()) return bad("input_ids: must be an array of input_id strings");
    for (auto& id : ids) {
      if (!id.is_string()) return bad("input_ids: must be an array of input_id strings");
      req.input_ids.push_back(id.get<std::string>());
    }
  }
  if (args.contains("timeout_s")) {
    const json& t = args["timeout_s"];
    if (!t.is_number()) return bad("timeout_s: must be a number of seconds");
    double v = t.get<double>();
    if (!std::isfinite(v) || v <= 0) return bad("timeout_s: must be greater than 0");
    req.timeout_s = v;
  }
  if (args.contains("idempotency_key")) {
    const json& k = args["idempotency_key"];
    if (!k.is_string() || k.get_ref<const std::string&>().empty() || k.get_ref<const std::string&>().size() > 128)
      return bad("idempotency_key: must be a string of 1-128 characters");
    req.idempotency_key = k.get<std::string>();
  }
  if (args.contains("workspace_id")) {
    const json& w = args["workspace_id"];
    if (!w.is_string()) return bad("workspace_id: must be a string from open_workspace");
    req.workspace_id = w.get<std::string>();
    if (req.workspace_id.empty()) return bad("workspace_id: " + std::string(broker::kUnknownWorkspace));
  }
  if (args.contains("artifact_ids")) {
    const json& ids = args["artifact_ids"];
    if (!ids.is_array()) return bad("artifact_ids: must be an array of artifact_id strings");
    for (auto& id : ids) {
      if (!id.is_string()) return bad("artifact_ids: must be an array of artifact_id strings");
      req.artifact_ids.push_back(id.get<std::string>());
    }
  }
  if (args.contains("checks")) {
    const json& names = args["checks"];
    if (!names.is_array()) return bad("checks: must be an array of check names");
    for (auto& n : names) {
      if (!n.is_string() || n.get_ref<const std::string&>().empty())
        return bad("checks: must be an array of check names");
      req.checks.push_back(n.get<std::string>());
    }
  }
  if (args.contains("network")) {
    const json& n = args["network"];
    if (!n.is_string() || n.get_ref<const std::string&>().empty())
      return bad("network: must be the name of a network profile");
    req.network = n.get<std::string>();
  }
  return req;
}

}  // namespace tools
