// fetch_artifact: return a stored artifact as MCP content, tenant-checked.
#include "tools/registry.h"

#include "server/util/base64.h"

namespace tools {

Tool make_fetch_artifact(const policy::Policy& policy) {
  const uint64_t inline_max = policy.limits.artifact_inline_max_bytes;
  json def = {
      {"name", "fetch_artifact"},
      {"title", "Fetch an artifact"},
      {"description",
       "Return a file that a run_code job wrote to /outputs, by the artifact_id listed in the "
       "run_code result. Text comes back as text, images as image content, anything else as an "
       "embedded binary resource. Files larger than " + std::to_string(inline_max) +
           " bytes cannot be returned inline."},
      {"inputSchema",
       {{"type", "object"},
        {"properties", {{"artifact_id", {{"type", "string"}, {"description", "From run_code's artifacts list."}}}}},
        {"required", {"artifact_id"}},
        {"additionalProperties", false}}},
      {"outputSchema",
       {{"type", "object"},
        {"properties",
         {{"artifact_id", {{"type", "string"}}},
          {"name", {{"type", "string"}}},
          {"media_type", {{"type", "string"}}},
          {"size", {{"type", "integer"}, {"minimum", 0}}},
          {"sha256", {{"type", "string"}}}}},
        {"required", {"artifact_id", "name", "media_type", "size", "sha256"}}}},
      {"annotations",
       {{"title", "Fetch an artifact"}, {"readOnlyHint", true}, {"destructiveHint", false},
        {"idempotentHint", true}, {"openWorldHint", false}}}};

  auto call = [inline_max](const json& args, CallContext& ctx) -> ToolResult {
    if (auto s = require_object(args); !s) return error_result(s.error().message);
    if (auto s = reject_unknown_fields(args, {"artifact_id"}); !s) return error_result(s.error().message);
    if (!args.contains("artifact_id") || !args["artifact_id"].is_string())
      return error_result("artifact_id: required, must be a string");
    auto rec = ctx.store.get_artifact(ctx.tenant, args["artifact_id"].get<std::string>());
    if (!rec) return error_result("artifact_id: " + rec.error().message);
    if (rec->size > inline_max)
      return error_result("artifact_id: the artifact is " + std::to_string(rec->size) +
                          " bytes, above the inline limit of " + std::to_string(inline_max) + " bytes");
    auto content = ctx.store.read_blob(rec->blob_path, inline_max);
    if (!content) return error_result("artifact_id: the artifact could not be read");
    ToolResult r;
    const std::string& type = rec->media_type;
    if (store::is_text_media_type(type)) {
      r.content.push_back({{"type", "text"}, {"text", *content}});
    } else if (type.rfind("image/", 0) == 0) {
      r.content.push_back({{"type", "image"}, {"data", util::base64_encode(*content)}, {"mimeType", type}});
    } else {
      r.content.push_back({{"type", "resource"},
                           {"resource", {{"uri", "throwbox://artifacts/" + rec->artifact_id},
                                         {"mimeType", type},
                                         {"blob", util::base64_encode(*content)}}}});
    }
    r.structured = {{"artifact_id", rec->artifact_id}, {"name", rec->name}, {"media_type", type},
                    {"size", rec->size}, {"sha256", rec->sha256}};
    return r;
  };
  return Tool{def, call};
}

}  // namespace tools
