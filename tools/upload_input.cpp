// upload_input: store a file for later runs; it appears read-only at /inputs/<name>.
#include "tools/registry.h"

#include <spdlog/spdlog.h>

#include "server/util/base64.h"

namespace tools {

Tool make_upload_input(const policy::Policy& policy) {
  const uint64_t max_bytes = policy.limits.input_max_bytes;
  json def = {{"name", "upload_input"},
              {"title", "Upload an input file"},
              {"description",
               "Store a file so that run_code can read it. Returns an input_id; pass it in run_code's "
               "input_ids and the program reads the file read-only at /inputs/<name>. Use encoding "
               "\"base64\" for binary content. Inputs are immutable; uploading the same name and content "
               "again returns the same input_id. Maximum size: " +
                   std::to_string(max_bytes) + " bytes."},
              {"inputSchema",
               {{"type", "object"},
                {"properties",
                 {{"name",
                   {{"type", "string"},
                    {"minLength", 1},
                    {"maxLength", 255},
                    {"description", "File name inside /inputs, e.g. \"orders.csv\" (no \"/\")."}}},
                  {"content", {{"type", "string"}, {"description", "File content, as text or base64."}}},
                  {"encoding",
                   {{"type", "string"},
                    {"enum", {"utf-8", "base64"}},
                    {"description", "How content is encoded; default \"utf-8\"."}}}}},
                {"required", {"name", "content"}},
                {"additionalProperties", false}}},
              {"outputSchema",
               {{"type", "object"},
                {"properties",
                 {{"input_id", {{"type", "string"}}},
                  {"name", {{"type", "string"}}},
                  {"size", {{"type", "integer"}, {"minimum", 0}}},
                  {"sha256", {{"type", "string"}}},
                  {"media_type", {{"type", "string"}}}}},
                {"required", {"input_id", "name", "size", "sha256", "media_type"}}}},
              {"annotations",
               {{"title", "Upload an input file"},
                {"readOnlyHint", false},
                {"destructiveHint", false},
                {"idempotentHint", true},
                {"openWorldHint", false}}}};

  auto call = [max_bytes](const json& args, CallContext& ctx) -> ToolResult {
    if (auto s = require_object(args); !s) return error_result(s.error().message);
    if (auto s = reject_unknown_fields(args, {"name", "content", "encoding"}); !s)
      return error_result(s.error().message);
    if (!args.contains("name") || !args["name"].is_string()) return error_result("name: required, must be a string");
    if (!args.contains("content") || !args["content"].is_string())
      return error_result("content: required, must be a string");
    std::string encoding = "utf-8";
    if (args.contains("encoding")) {
      if (!args["encoding"].is_string()) return error_result("encoding: must be \"utf-8\" or \"base64\"");
      encoding = args["encoding"].get<std::string>();
      if (encoding != "utf-8" && encoding != "base64") return error_result("encoding: must be \"utf-8\" or \"base64\"");
    }
    const std::string& raw = args["content"].get_ref<const std::string&>();
    std::string content;
    if (encoding == "base64") {
      if (raw.size() / 4 * 3 > max_bytes + 3)
        return error_result("content: larger than the policy's " + std::to_string(max_bytes) + " bytes");
      auto decoded = util::base64_decode(raw);
      if (!decoded) return error_result("content: not valid base64 (RFC 4648, padded, no whitespace)");
      content = std::move(*decoded);
    } else {
      content = raw;
    }
    if (content.size() > max_bytes)
      return error_result("content: larger than the policy's " + std::to_string(max_bytes) + " bytes");
    const std::string name = args["name"].get<std::string>();
    // Name first: libmagic should never see content under a name we refuse.
    if (auto s = store::validate_input_name(name); !s) return error_result(s.error().message);
    auto rec = ctx.store.put_input(ctx.tenant, name, content, ctx.broker.upload_media_type(name, content));
    if (!rec) {
      if (rec.error().code == util::ErrorCode::kIo)
        spdlog::error("upload_input: tenant {}: {}", ctx.tenant, rec.error().message);
      return error_result(store::client_message(rec.error()));
    }
    json out{{"input_id", rec->input_id},
             {"name", rec->name},
             {"size", rec->size},
             {"sha256", rec->sha256},
             {"media_type", rec->media_type}};
    return ok_result(out, out.dump());
  };
  return Tool{def, call, "forbidden", nullptr};
}

}  // namespace tools
