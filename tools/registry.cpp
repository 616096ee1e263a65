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

std::shared_ptr<const Registry::Map> Registry::snapshot() const {
  std::lock_guard lock(mu_);
  return tools_;
}

void Registry::add(Tool tool) {
  std::string name = tool.definition.at("name").get<std::string>();
  std::lock_guard lock(mu_);
  auto next = std::make_shared<Map>(*tools_);
  (*next)[name] = std::make_shared<const Tool>(std::move(tool));
  tools_ = std::move(next);
}

void Registry::replace(const Registry& next) {
  auto tools = next.snapshot();
  std::lock_guard lock(mu_);
  tools_ = std::move(tools);
}

std::shared_ptr<const Tool> Registry::find(const std::string& name) const {
  auto tools = snapshot();
  auto it = tools->find(name);
  return it == tools->end() ? nullptr : it->second;
}

json Registry::list(bool with_task_support) const {
  json out = json::array();
  for (auto& [_, t] : *snapshot()) {
    out.push_back(t->definition);
    // Absent means forbidden (MCP tasks, tool-level negotiation).
    if (with_task_support && t->task_support != "forbidden")
      out.back()["execution"] = {{"taskSupport", t->task_support}};
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
