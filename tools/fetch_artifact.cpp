// fetch_artifact: return a stored artifact as MCP content, tenant-checked.
#include "tools/registry.h"

#include <algorithm>

#include "server/util/base64.h"

namespace tools {
namespace {

// Resource links listed at most; beyond, the text gives the URI pattern.
constexpr uint64_t kPartLinksMax = 64;

// An artifact above the inline limit: its metadata and how to read it in parts.
ToolResult parts_result(const store::ArtifactRecord& rec, uint64_t part_bytes) {
  const uint64_t parts = store::artifact_parts(rec.size, part_bytes);
  const std::string pattern = store::artifact_uri(rec.artifact_id) + "/parts/<k>";
  std::string text = "\"" + rec.name + "\" (" + rec.media_type + ", sha256 " + rec.sha256 + ") is " +
                     std::to_string(rec.size) + " bytes, above the inline limit of " + std::to_string(part_bytes) +
                     " bytes. Read it in " + std::to_string(parts) + " parts with resources/read: " + pattern +
                     " for k = 0 to " + std::to_string(parts - 1) + ", each a base64 blob of " +
                     std::to_string(part_bytes) + " bytes (the last one shorter); joined in order they are the file.";
  if (parts > kPartLinksMax)
    text += " The first " + std::to_string(kPartLinksMax) + " parts are linked below; the rest follow the pattern.";
  ToolResult r;
  r.content.push_back({{"type", "text"}, {"text", text}});
  for (uint64_t k = 0; k < parts && k < kPartLinksMax; ++k) {
    const uint64_t bytes = std::min(part_bytes, rec.size - k * part_bytes);
    r.content.push_back({{"type", "resource_link"},
                         {"uri", store::artifact_part_uri(rec.artifact_id, k)},
                         {"name", rec.name + " part " + std::to_string(k + 1) + "/" + std::to_string(parts)},
                         {"mimeType", rec.media_type},
                         {"size", bytes}});
  }
  r.structured = {
      {"artifact_id", rec.artifact_id}, {"name", rec.name}, {"media_type", rec.media_type}, {"size", rec.size},
      {"sha256", rec.sha256},           {"parts", parts},   {"part_bytes", part_bytes}};
  return r;
}

}  // namespace

Tool make_fetch_artifact(const policy::Policy& policy) {
  const uint64_t inline_max = policy.limits.artifact_inline_max_bytes;
  json def = {
      {"name", "fetch_artifact"},
      {"title", "Fetch an artifact"},
      {"description",
       "Return a file that a run_code job wrote to /outputs, by the artifact_id listed in the "
       "run_code result. Text comes back as text, images as image content, anything else as an "
       "embedded binary resource. A file larger than " +
           std::to_string(inline_max) + " bytes is not returned inline: the result lists it in parts of " +
           std::to_string(inline_max) +
           " bytes (`parts`, `part_bytes`, one resource_link per part, throwbox://artifacts/<artifact_id>/parts/<k> "
           "for k = 0 .. parts-1); read each with resources/read (a base64 blob) and join them in order."},
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
          {"sha256", {{"type", "string"}}},
          {"parts",
           {{"type", "integer"},
            {"minimum", 2},
            {"description", "Only for a file above the inline limit: how many parts to read with resources/read"}}},
          {"part_bytes",
           {{"type", "integer"},
            {"minimum", 1},
            {"description", "Only with parts: the bytes of every part but the last"}}}}},
        {"required", {"artifact_id", "name", "media_type", "size", "sha256"}}}},
      {"annotations",
       {{"title", "Fetch an artifact"},
        {"readOnlyHint", true},
        {"destructiveHint", false},
        {"idempotentHint", true},
        {"openWorldHint", false}}}};

  auto call = [inline_max](const json& args, CallContext& ctx) -> ToolResult {
    if (auto s = require_object(args); !s) return error_result(s.error().message);
    if (auto s = reject_unknown_fields(args, {"artifact_id"}); !s) return error_result(s.error().message);
    if (!args.contains("artifact_id") || !args["artifact_id"].is_string())
      return error_result("artifact_id: required, must be a string");
    auto rec = ctx.store.get_artifact(ctx.tenant, args["artifact_id"].get<std::string>());
    if (!rec) return error_result("artifact_id: " + rec.error().message);
    if (rec->size > inline_max) return parts_result(*rec, inline_max);
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
                           {"resource",
                            {{"uri", "throwbox://artifacts/" + rec->artifact_id},
                             {"mimeType", type},
                             {"blob", util::base64_encode(*content)}}}});
    }
    r.structured = {{"artifact_id", rec->artifact_id},
                    {"name", rec->name},
                    {"media_type", type},
                    {"size", rec->size},
                    {"sha256", rec->sha256}};
    return r;
  };
  return Tool{def, call, "forbidden", nullptr};
}

}  // namespace tools
