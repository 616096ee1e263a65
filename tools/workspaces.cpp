// open_workspace and close_workspace: a tenant's /work kept between the
// run_code calls that name it, until closed or idle past its TTL.
#include <cmath>

#include "tools/registry.h"

namespace tools {
namespace {

json workspace_schema() {
  return {{"type", "object"},
          {"properties",
           {{"workspace_id", {{"type", "string"}}},
            {"expires_at", {{"type", "string"}, {"description", "When it is deleted unless used again (UTC)."}}},
            {"ttl_s", {{"type", "integer"}, {"minimum", 1}}},
            {"size_max_bytes", {{"type", "integer"}, {"minimum", 0}}},
            {"size_bytes", {{"type", "integer"}, {"minimum", 0}}}}},
          {"required", {"workspace_id", "expires_at", "size_max_bytes"}}};
}

}  // namespace

Tool make_open_workspace(const policy::Policy& policy) {
  const policy::Workspaces& w = policy.workspaces;
  json def = {
      {"name", "open_workspace"},
      {"title", "Open a workspace"},
      {"description",
       "Open a workspace: pass its workspace_id to run_code and that call's /work (the working directory) "
       "is the workspace's files, kept for the next call that names it (intermediate files, a virtualenv, "
       "packages installed with pip --target). Open one only when a task spans several runs that build on "
       "each other; a single run needs none. /tmp, /outputs and processes never persist. One call at a "
       "time per workspace. It holds at most " +
           std::to_string(w.size_max_bytes) + " bytes and is deleted after ttl_s idle seconds (default " +
           std::to_string(w.ttl_s_default) + ", at most " + std::to_string(w.ttl_s_max) +
           "). Close it with close_workspace when the task is done."},
      {"inputSchema",
       {{"type", "object"},
        {"properties",
         {{"ttl_s",
           {{"type", "integer"},
            {"minimum", 1},
            {"maximum", w.ttl_s_max},
            {"description", "Idle seconds before it is deleted; each run_code in it starts the count again."}}}}},
        {"additionalProperties", false}}},
      {"outputSchema", workspace_schema()},
      {"annotations",
       {{"title", "Open a workspace"},
        {"readOnlyHint", false},
        {"destructiveHint", false},
        {"idempotentHint", false},
        {"openWorldHint", false}}}};
  auto call = [](const json& args, CallContext& ctx) -> ToolResult {
    if (auto s = require_object(args); !s) return error_result(s.error().message);
    if (auto s = reject_unknown_fields(args, {"ttl_s"}); !s) return error_result(s.error().message);
    std::optional<double> ttl;
    if (args.contains("ttl_s")) {
      const json& t = args["ttl_s"];
      if (!t.is_number()) return error_result("ttl_s: must be a number of seconds");
      ttl = t.get<double>();
    }
    auto opened = ctx.broker.open_workspace(ctx.tenant, ttl);
    if (!opened) return error_result(opened.error().message);
    json s = broker::to_json(*opened);
    return ok_result(s, "workspace " + opened->workspace_id + " open until " + s["expires_at"].get<std::string>() +
                            " unless used; pass workspace_id to run_code, close it with close_workspace");
  };
  return Tool{def, call, "forbidden", nullptr};
}

Tool make_close_workspace(const policy::Policy&) {
  json def = {{"name", "close_workspace"},
              {"title", "Close a workspace"},
              {"description",
               "Delete a workspace and every file in it, once the task that needed it is done. The id is unknown "
               "afterwards."},
              {"inputSchema",
               {{"type", "object"},
                {"properties", {{"workspace_id", {{"type", "string"}, {"description", "From open_workspace."}}}}},
                {"required", {"workspace_id"}},
                {"additionalProperties", false}}},
              {"outputSchema",
               {{"type", "object"},
                {"properties", {{"workspace_id", {{"type", "string"}}}, {"closed", {{"type", "boolean"}}}}},
                {"required", {"workspace_id", "closed"}}}},
              {"annotations",
               {{"title", "Close a workspace"},
                {"readOnlyHint", false},
                {"destructiveHint", true},
                {"idempotentHint", false},
                {"openWorldHint", false}}}};
  auto call = [](const json& args, CallContext& ctx) -> ToolResult {
    if (auto s = require_object(args); !s) return error_result(s.error().message);
    if (auto s = reject_unknown_fields(args, {"workspace_id"}); !s) return error_result(s.error().message);
    if (!args.contains("workspace_id") || !args["workspace_id"].is_string())
      return error_result("workspace_id: required, must be a string");
    const std::string id = args["workspace_id"].get<std::string>();
    if (auto s = ctx.broker.close_workspace(ctx.tenant, id); !s)
      return error_result(s.error().code == util::ErrorCode::kNotFound ? "workspace_id: " + s.error().message
                                                                       : s.error().message);
    return ok_result({{"workspace_id", id}, {"closed", true}}, "workspace " + id + " closed and deleted");
  };
  return Tool{def, call, "forbidden", nullptr};
}

}  // namespace tools
