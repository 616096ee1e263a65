// The gate's decisions around an inspection (gate.h): the name, the checks of
// an inspection's answer, the extension. Fails closed: an answer it cannot
// use is a rejection with the reason.
#include "server/artifacts/gate.h"

#include <algorithm>
#include <cctype>

#include "server/artifacts/names.h"
#include "server/util/text.h"

namespace artifacts {
namespace {

// Of a reason an inspection gives: what a result and a log line show.
constexpr size_t kReasonMaxBytes = 400;

Verdict reject(std::string reason) { return rejected(std::move(reason)); }

}  // namespace

bool is_markup(const std::string& type) {
  return type == "text/html" || type == "application/xhtml+xml" || type == "image/svg+xml";
}

bool allowed(const GatePolicy& p, const std::string& type) {
  return std::find(p.allowed_media_types.begin(), p.allowed_media_types.end(), type) != p.allowed_media_types.end();
}

Verdict rejected(std::string reason) { return {VerdictKind::kRejected, std::move(reason), "", ""}; }

std::string_view to_string(VerdictKind kind) {
  switch (kind) {
    case VerdictKind::kAccepted:
      return "accepted";
    case VerdictKind::kSanitized:
      return "sanitized";
    case VerdictKind::kRejected:
      return "rejected";
  }
  return "rejected";
}

VerdictKind verdict_from_string(std::string_view name) {
  if (name == "accepted") return VerdictKind::kAccepted;
  if (name == "sanitized") return VerdictKind::kSanitized;
  return VerdictKind::kRejected;
}

std::vector<std::string> Gate::extensions_for(const std::string& media_type) const {
  auto it = policy_.allowed_extensions.find(media_type);
  return it != policy_.allowed_extensions.end() ? it->second : names::default_extensions(media_type);
}

std::optional<Verdict> Gate::check_name(const std::string& name) const {
  if (auto why = names::problem(name)) return reject("name: " + *why);
  const std::string ext = names::extension(name);
  if (names::is_executable_extension(ext))
    return reject("name: the extension " + ext + " makes the file run as a program or script when it is opened");
  return std::nullopt;
}

Verdict Gate::check_extension(const std::string& name, Verdict v, const std::string& named_as) const {
  const std::string ext = names::extension(name);
  const std::vector<std::string> allowed = extensions_for(named_as);
  if (std::find(allowed.begin(), allowed.end(), ext) == allowed.end()) {
    std::string list;
    for (auto& x : allowed) list += (list.empty() ? "" : ", ") + x;
    return reject("name: " + (ext.empty() ? std::string("no extension") : "the extension " + ext) +
                  " is not allowed for " + named_as + " files; allowed: " + (list.empty() ? "none" : list));
  }
  return v;
}

Verdict Gate::finish(const std::string& name, const nlohmann::json& inspection, std::string content,
                     std::string inspected_content) const {
  // An answer from the helper, which parsed hostile bytes: every field checked.
  auto text = [&](const char* key) -> std::optional<std::string> {
    if (!inspection.contains(key) || !inspection[key].is_string()) return std::nullopt;
    return inspection[key].get<std::string>();
  };
  const auto verdict = text("verdict"), reason = text("reason"), media_type = text("media_type"),
             named_as = text("named_as");
  const bool changed =
      inspection.contains("changed") && inspection["changed"].is_boolean() && inspection["changed"].get<bool>();
  if (!verdict || !reason || !media_type || !named_as ||
      (*verdict != "accepted" && *verdict != "sanitized" && *verdict != "rejected"))
    return reject("the gate's inspection gave no usable answer");
  // A reason is shown to the model and logged: printable, bounded.
  std::string shown = util::escape_for_log(util::utf8_prefix(*reason, kReasonMaxBytes));
  if (*verdict == "rejected") return reject(std::move(shown));
  const VerdictKind kind = verdict_from_string(*verdict);
  if (!allowed(policy_, *media_type) || *media_type == "text/html" || *media_type == "application/xhtml+xml")
    return reject("the gate's inspection named a type the policy does not serve (" +
                  util::escape_for_log(util::utf8_prefix(*media_type, 80)) + ")");
  if (named_as->empty() || (!allowed(policy_, *named_as) && !is_markup(*named_as)))
    return reject("the gate's inspection named no type the name could be checked against");
  if (changed && (kind != VerdictKind::kSanitized || inspected_content.size() > policy_.file_max_bytes))
    return reject("the gate's inspection rewrote the file beyond what a sanitizing may");
  if (!changed && content.size() > policy_.file_max_bytes)
    return reject("larger than the policy's " + std::to_string(policy_.file_max_bytes) + " bytes per file");
  Verdict v{kind, std::move(shown), *media_type, changed ? std::move(inspected_content) : std::move(content)};
  return check_extension(name, std::move(v), *named_as);
}

nlohmann::json to_json(const GatePolicy& p) {
  return {{"allowed_media_types", p.allowed_media_types},
          {"file_max_bytes", p.file_max_bytes},
          {"csv_reject", p.csv_mode == csv::Mode::kReject},
          {"active_content_as_text", p.active_content_as_text},
          {"allowed_extensions", p.allowed_extensions},
          {"image_pixels_max", p.image_pixels_max},
          {"pdf_strip", p.pdf_strip}};
}

util::Result<GatePolicy> gate_policy_from_json(const nlohmann::json& j) {
  try {
    GatePolicy p;
    j.at("allowed_media_types").get_to(p.allowed_media_types);
    j.at("file_max_bytes").get_to(p.file_max_bytes);
    p.csv_mode = j.at("csv_reject").get<bool>() ? csv::Mode::kReject : csv::Mode::kNeutralise;
    j.at("active_content_as_text").get_to(p.active_content_as_text);
    j.at("allowed_extensions").get_to(p.allowed_extensions);
    j.at("image_pixels_max").get_to(p.image_pixels_max);
    j.at("pdf_strip").get_to(p.pdf_strip);
    return p;
  } catch (const nlohmann::json::exception& e) {
    return util::make_error(util::ErrorCode::kInvalidArgument, std::string("gate policy: ") + e.what());
  }
}

}  // namespace artifacts
