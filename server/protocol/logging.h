// The MCP logging utility of a session (basic/utilities/logging, 2025-03-26
// to 2025-11-25): the level the client set with logging/setLevel, and the
// notifications/message for server events at or above it. Runs on reader and
// call threads. Never puts code, input or output contents in a message.
#pragma once
#include <atomic>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace protocol::logging {

// RFC 5424 severities, as MCP names them, least severe first.
enum class Level { debug, info, notice, warning, error, critical, alert, emergency };

// The level a name denotes, or nullopt for any other string.
std::optional<Level> parse_level(std::string_view name);
// The names, for an error message.
const char* level_names();

// What a client asked to see. Until it sends logging/setLevel a session
// sends no log messages at all (the spec lets the server choose; a client
// that never asked gets none).
class Threshold {
 public:
  void set(Level level) { value_.store(static_cast<int>(level)); }
  bool wants(Level level) const { return static_cast<int>(level) >= value_.load(); }

 private:
  static constexpr int kOff = 8;  // above emergency
  std::atomic<int> value_{kOff};
};

// notifications/message {level, logger: "throwbox", data}; a task's carries
// the related-task _meta (MCP tasks: every message about a task names it).
nlohmann::json message(Level level, nlohmann::json data, const std::string& task_id = "");

// The events of one tools/call, as log data: what the structured result says
// of the job (ids, status, exit, duration, sizes), never its streams or code.
// The level of a finished call: error for sandbox_error, warning for a
// refusal or a job stopped by a limit, info otherwise.
struct Event {
  Level level;
  nlohmann::json data;
};
Event call_started(const std::string& tool, const nlohmann::json& task_id);
Event call_finished(const std::string& tool, const nlohmann::json& wire_result, const nlohmann::json& task_id);

}  // namespace protocol::logging
