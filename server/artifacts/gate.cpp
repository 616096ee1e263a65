// Artifact gate decisions, in order: size, type agreement and allowlist,
// active content in markup, formula cells in CSV/TSV. Fails closed: a file the
// gate cannot classify or parse is rejected with the reason.
#include "server/artifacts/gate.h"

#include <algorithm>
#include <cctype>

#include "server/artifacts/active_content.h"
#include "server/artifacts/images.h"
#include "server/artifacts/markdown.h"
#include "server/artifacts/pdf.h"
#include "server/artifacts/names.h"

namespace artifacts {
namespace {

bool is_markup(const std::string& type) {
  return type == "text/html" || type == "application/xhtml+xml" || type == "image/svg+xml";
}

bool allowed(const GatePolicy& p, const std::string& type) {
  return std::find(p.allowed_media_types.begin(), p.allowed_media_types.end(), type) !=
         p.allowed_media_types.end();
}

Verdict reject(std::string reason) { return {VerdictKind::kRejected, std::move(reason), "", ""}; }

}  // namespace

util::Result<Gate> Gate::create(GatePolicy policy) {
  auto sniffer = types::Sniffer::create();
  if (!sniffer) return sniffer.error();
  return Gate(std::move(*sniffer), std::move(policy));
}

std::string_view to_string(VerdictKind kind) {
  switch (kind) {
    case VerdictKind::kAccepted: return "accepted";
    case VerdictKind::kSanitized: return "sanitized";
    case VerdictKind::kRejected: return "rejected";
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

// The name first (what the person's machine will make of it), then the bytes;
// last, whether the name's extension is one the policy allows for what the
// file is, so that the program a double-click opens is one meant for it.
Verdict Gate::check(const std::string& name, std::string content) const {
  if (auto why = names::problem(name)) return reject("name: " + *why);
  const std::string ext = names::extension(name);
  if (names::is_executable_extension(ext))
    return reject("name: the extension " + ext + " makes the file run as a program or script when it is opened");
  std::string named_as;
  Verdict v = check_content(name, std::move(content), named_as);
  if (v.verdict == VerdictKind::kRejected) return v;
  const std::vector<std::string> allowed = extensions_for(named_as);
  if (std::find(allowed.begin(), allowed.end(), ext) == allowed.end()) {
    std::string list;
    for (auto& x : allowed) list += (list.empty() ? "" : ", ") + x;
    return reject("name: " + (ext.empty() ? std::string("no extension") : "the extension " + ext) +
                  " is not allowed for " + named_as + " files; allowed: " + (list.empty() ? "none" : list));
  }
  return v;
}

// named_as: the type whose extensions the file's name must have: what the
// file is, except that markup delivered as text (active content, or a markup
// type the policy does not allow, under active_content "text") is safe only
// as text, so it must be named as text/plain is.
Verdict Gate::check_content(const std::string& name, std::string content, std::string& named_as) const {
  if (content.size() > policy_.file_max_bytes)
    return reject("larger than the policy's " + std::to_string(policy_.file_max_bytes) + " bytes per file");

  // Markup types are let through decide() so that they can be scanned here;
  // the allowlist decides whether they leave as themselves, the active-content
  // policy whether anything else leaves as text/plain.
  std::vector<std::string> admissible = policy_.allowed_media_types;
  for (const char* m : {"text/html", "application/xhtml+xml", "image/svg+xml"}) admissible.push_back(m);
  types::Decision d = types::decide(name, content, sniffer_, admissible);
  if (!d.ok) return reject(d.reason);
  named_as = d.media_type;

  if (is_markup(d.media_type) || d.media_type == "text/markdown") {
    // Markdown as CommonMark's reference parser builds it: its links, images
    // and definitions, and its raw HTML through the markup scanner; code
    // spans and blocks render as text, so what they hold is not a finding.
    active::Finding f = d.media_type == "text/markdown" ? markdown::scan(content) : active::scan_markup(content);
    const bool as_text = policy_.active_content_as_text;
    if (f.active && !as_text) return reject("active content: " + f.reason);
    if (f.active || (as_text && !allowed(policy_, d.media_type))) {
      // Delivered as text, never rendered: the policy chose text over rejection.
      if (!allowed(policy_, "text/plain")) return reject("active content: " + f.reason);
      named_as = "text/plain";
      return {VerdictKind::kAccepted,
              (f.active ? "active content (" + f.reason + ")" : "markup (" + d.media_type + ")") +
                  " delivered as text/plain, never rendered",
              "text/plain", std::move(content)};
    }
    if (!allowed(policy_, d.media_type))
      return reject("media type " + d.media_type + " is not allowed by the policy");
    // HTML is never served as text/html: a client must not render it.
    if (d.media_type == "text/html" || d.media_type == "application/xhtml+xml")
      return {VerdictKind::kAccepted, "no active content found; HTML is delivered as text/plain", "text/plain",
              std::move(content)};
  }

  if (d.media_type == "text/csv" || d.media_type == "text/tab-separated-values") {
    char delimiter = d.media_type == "text/csv" ? ',' : '\t';
    csv::Result r = csv::process(content, delimiter, policy_.csv_mode);
    if (!r.ok) return reject("spreadsheet check: " + r.reason);
    if (r.cells_changed > 0)
      return {VerdictKind::kSanitized, r.reason, d.media_type, std::move(r.output)};
    return {VerdictKind::kAccepted, "no formula cells; type agrees with content", d.media_type, std::move(content)};
  }
  if (d.media_type == "image/png" || d.media_type == "image/jpeg" || d.media_type == "image/gif") {
    images::Result r = images::check(content, d.media_type, policy_.image_pixels_max);
    if (!r.ok) return reject(r.reason);
    return {VerdictKind::kAccepted,
            "type agrees with content (" + d.media_type + ", " + std::to_string(r.width) + " x " +
                std::to_string(r.height) + (r.frames > 1 ? ", " + std::to_string(r.frames) + " frames" : "") + ")",
            d.media_type, std::move(content)};
  }
  if (d.media_type == "application/pdf") {
    pdf::Result r = pdf::check(content, policy_.pdf_strip ? pdf::Mode::kStrip : pdf::Mode::kReject);
    if (!r.ok) return reject(r.reason);
    if (r.removed > 0) return {VerdictKind::kSanitized, r.reason, d.media_type, std::move(r.output)};
    return {VerdictKind::kAccepted, "type agrees with content (application/pdf); no active content found by qpdf",
            d.media_type, std::move(content)};
  }
  return {VerdictKind::kAccepted, "type agrees with content (" + d.media_type + ")", d.media_type, std::move(content)};
}

std::string Gate::input_media_type(const std::string& name, const std::string& content) const {
  std::vector<std::string> everything = policy_.allowed_media_types;
  for (const char* m : {"text/html", "application/xhtml+xml", "image/svg+xml"}) everything.push_back(m);
  types::Decision d = types::decide(name, content, sniffer_, everything);
  if (d.ok) return d.media_type;
  types::Sniffed s = sniffer_.sniff(content);
  return s.mime.empty() ? "application/octet-stream" : s.mime;
}

}  // namespace artifacts
