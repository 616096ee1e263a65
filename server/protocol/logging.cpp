// The MCP logging utility: level names and the data of each event. Server
// threads; pure functions of their arguments.
#include "server/protocol/logging.h"

#include "server/protocol/jsonrpc.h"

namespace protocol::logging {

using nlohmann::json;

namespace {
constexpr const char* kNames[] = {"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"};
}  // namespace

std::optional<Level> parse_level(std::string_view name) {
  for (size_t i = 0; i < std::size(kNames); ++i)
    if (name == kNames[i]) return static_cast<Level>(i);
  return std::nullopt;
}

const char* level_names() { return "debug, info, notice, warning, error, critical, alert, emergency"; }

json message(Level level, json data, const std::string& task_id) {
  json params{{"level", kNames[static_cast<int>(level)]}, {"logger", "throwbox"}, {"data", std::move(data)}};
  if (!task_id.empty()) params["_meta"] = {{"io.modelcontextprotocol/related-task", {{"taskId", task_id}}}};
  return jsonrpc::make_notification("notifications/message", std::move(params));
}

Event call_started(const std::string& tool, const json& task_id) {
  const bool job = tool == "run_code";
  json data{{"event", job ? "job_started" : "call_started"}, {"tool", tool}};
  if (!task_id.is_null()) data["task_id"] = task_id;
  return {job ? Level::info : Level::debug, std::move(data)};
}

Event call_finished(const std::string& tool, const json& wire, const json& task_id) {
  json data{{"tool", tool}};
  if (!task_id.is_null()) data["task_id"] = task_id;
  const bool refused = wire.value("isError", false);
  const json sc = wire.contains("structuredContent") ? wire["structuredContent"] : json(nullptr);
  if (refused) {
    // The refusal's own text names the field or the limit; it never quotes
    // code or file contents (the tools' error texts name arguments only).
    data["event"] = "call_refused";
    std::string reason;
    if (wire.contains("content") && wire["content"].is_array() && !wire["content"].empty() &&
        wire["content"][0].value("type", "") == "text")
      reason = wire["content"][0].value("text", "");
    if (reason.size() > 512) reason = reason.substr(0, 512);
    data["reason"] = reason;
    return {Level::warning, std::move(data)};
  }
  if (!sc.is_object() || !sc.contains("job_id") || !sc.contains("status")) {
    data["event"] = "call_finished";
    return {Level::debug, std::move(data)};
  }
  data["event"] = "job_finished";
  for (const char* key : {"job_id", "status", "exit_code", "signal", "timed_out", "duration_ms", "cpu_ms",
                          "peak_memory_bytes", "stdout_truncated", "stderr_truncated"})
    if (sc.contains(key)) data[key] = sc[key];
  if (sc.contains("artifacts") && sc["artifacts"].is_array()) {
    json verdicts = json::object();
    for (const auto& a : sc["artifacts"])
      if (a.is_object() && a.contains("verdict") && a["verdict"].is_string())
        verdicts[a["verdict"].get<std::string>()] = verdicts.value(a["verdict"].get<std::string>(), 0) + 1;
    data["artifacts"] = verdicts;
  }
  const std::string status = sc["status"].is_string() ? sc["status"].get<std::string>() : "";
  Level level = Level::info;
  if (status == "sandbox_error")
    level = Level::error;
  else if (status == "timed_out" || status == "memory_exceeded")
    level = Level::warning;
  return {level, std::move(data)};
}

}  // namespace protocol::logging
