// The MCP tools: each is a definition (name, description, JSON Schemas,
// annotations) and a handler mapping arguments -> broker -> result.
// Handlers run on server worker threads.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "server/broker/broker.h"
#include "server/policy/policy.h"
#include "server/store/store.h"

namespace tools {

using nlohmann::json;

struct CallContext {
  std::string tenant;
  const policy::Policy& policy;
  store::Store& store;
  broker::Broker& broker;
  std::shared_ptr<broker::Cancellation> cancel;                  // notifications/cancelled
  std::function<void(const nlohmann::json& progress)> progress;  // empty without a progressToken
  std::shared_ptr<broker::WorkspaceUse> workspace;               // held before a task was created (Tool::hold)
};

// An MCP CallToolResult. Errors inside a tool are results with isError, never
// JSON-RPC errors, so the model can read and correct them.
struct ToolResult {
  json content = json::array();
  json structured;  // null when absent
  bool is_error = false;
  json to_json() const;
};

ToolResult error_result(const std::string& message);
ToolResult ok_result(json structured, std::string summary);

struct Tool {
  json definition;  // as listed by tools/list
  std::function<ToolResult(const json& args, CallContext& ctx)> call;
  // MCP tasks (2025-11-25) execution.taskSupport: "forbidden", "optional" or "required".
  std::string task_support = "forbidden";
  // What a task of this tool must hold before the task exists (run_code: its
  // workspace, so a call arriving after the task was created cannot take it
  // first); an error answers the call instead of a task. May be empty.
  std::function<util::Result<std::shared_ptr<broker::WorkspaceUse>>(const json& args, const std::string& tenant,
                                                                    broker::Broker& broker)>
      hold;
};

// Thread-safe. A reload replaces the tools whole (their schemas name the
// policy's runtimes, profiles and limits); a call keeps the Tool it found.
class Registry {
 public:
  Registry() = default;
  Registry(Registry&& other) noexcept : tools_(other.snapshot()) {}
  void add(Tool tool);
  std::shared_ptr<const Tool> find(const std::string& name) const;
  // with_task_support: add execution.taskSupport (sessions that negotiated tasks).
  json list(bool with_task_support = false) const;
  // Every tool of `next` instead of these.
  void replace(const Registry& next);

 private:
  using Map = std::map<std::string, std::shared_ptr<const Tool>>;
  std::shared_ptr<const Map> snapshot() const;
  mutable std::mutex mu_;
  std::shared_ptr<const Map> tools_ = std::make_shared<Map>();
};

Registry make_registry(const policy::Policy& policy);

// Whether calling the tool runs code or changes state (an OAuth token needs
// the run scope for it). Only the tools that read are listed as not: a tool
// added later needs the run scope until it is listed here.
bool needs_run_scope(const std::string& tool);

// One per file in tools/.
Tool make_upload_input(const policy::Policy& policy);
Tool make_run_code(const policy::Policy& policy);
Tool make_fetch_artifact(const policy::Policy& policy);
Tool make_open_workspace(const policy::Policy& policy);
Tool make_close_workspace(const policy::Policy& policy);
// A job result as run_code's structuredContent, the fixed shape its
// outputSchema declares; the HTTP job API answers with the same shape.
json job_result_json(const broker::JobResult& result);

// Argument checks shared by the tools: each names the field it rejects.
util::Status require_object(const json& args);
util::Status reject_unknown_fields(const json& args, std::initializer_list<const char*> known);

}  // namespace tools
