// Tool registry and the CallToolResult shape.
#include "tools/registry.h"

#include <set>

namespace tools {

json ToolResult::to_json() const {
  json r{{"content", content}, {"isError", is_error}};
  if (!structured.is_null()) r["structuredContent"] = structured;
  return r;
}

ToolResult error_result(const std::string& message) {
  ToolResult r;
  r.is_error = true;
  r.content.push_back({{"type", "text"}, {"text", message}});
  return r;
}

ToolResult ok_result(json structured, std::string summary) {
  ToolResult r;
  // The text copy lets clients without structured-content support read the result.
  r.content.push_back({{"type", "text"}, {"text", std::move(summary)}});
  r.structured = std::move(structured);
  return r;
}

void Registry::add(Tool tool) {
  std::string name = tool.definition.at("name").get<std::string>();
  tools_[name] = std::move(tool);
}

const Tool* Registry::find(const std::string& name) const {
  auto it = tools_.find(name);
  return it == tools_.end() ? nullptr : &it->second;
}

json Registry::list(bool with_task_support) const {
  json out = json::array();
  for (auto& [_, t] : tools_) {
    out.push_back(t.definition);
    // Absent means forbidden (MCP tasks, tool-level negotiation).
    if (with_task_support && t.task_support != "forbidden")
      out.back()["execution"] = {{"taskSupport", t.task_support}};
  }
  return out;
}

Registry make_registry(const policy::Policy& policy) {
  Registry r;
  r.add(make_upload_input(policy));
  r.add(make_run_code(policy));
  r.add(make_fetch_artifact(policy));
  r.add(make_open_workspace(policy));
  r.add(make_close_workspace(policy));
  return r;
}

util::Status require_object(const json& args) {
  if (!args.is_object()) return util::make_error(util::ErrorCode::kInvalidArgument, "arguments: must be an object");
  return util::ok_status();
}

util::Status reject_unknown_fields(const json& args, std::initializer_list<const char*> known) {
  std::set<std::string> k(known.begin(), known.end());
  for (auto& [name, _] : args.items())
    if (!k.count(name)) return util::make_error(util::ErrorCode::kInvalidArgument, name + ": unknown argument");
  return util::ok_status();
}

bool needs_run_scope(const std::string& tool) { return tool != "fetch_artifact"; }

}  // namespace tools
