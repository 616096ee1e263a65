// Artifact inspection (inspect.h), in order: size, type agreement and
// allowlist, active content in markup, formula cells in CSV/TSV, image and
// PDF structure. Fails closed: a file it cannot classify or parse is
// rejected with the reason. Runs in the parser helper and in tests.
#include "server/artifacts/inspect.h"

#include <algorithm>

#include "server/artifacts/active_content.h"
#include "server/artifacts/images.h"
#include "server/artifacts/markdown.h"
#include "server/artifacts/pdf.h"

namespace artifacts {

util::Result<InProcessGate> InProcessGate::create(GatePolicy policy) {
  auto sniffer = types::Sniffer::create();
  if (!sniffer) return sniffer.error();
  return InProcessGate(std::move(*sniffer), std::move(policy));
}

// The name first (what the person's machine will make of it), then the bytes;
// last, whether the name's extension is one the policy allows for what the
// file is, so that the program a double-click opens is one meant for it.
Verdict InProcessGate::check(const std::string& name, std::string content) const {
  if (auto refused = gate_.check_name(name)) return *refused;
  Inspection i = inspect(name, std::move(content), sniffer_, gate_.policy());
  if (i.verdict.verdict == VerdictKind::kRejected) return std::move(i.verdict);
  return gate_.check_extension(name, std::move(i.verdict), i.named_as);
}

// named_as: the type whose extensions the file's name must have: what the
// file is, except that markup delivered as text (active content, or a markup
// type the policy does not allow, under active_content "text") is safe only
// as text, so it must be named as text/plain is.
Inspection inspect(const std::string& name, std::string content, const types::Sniffer& sniffer,
                   const GatePolicy& policy) {
  Inspection out;
  auto done = [&](Verdict v, bool changed = false) {
    out.verdict = std::move(v);
    out.changed = changed;
    if (out.verdict.verdict == VerdictKind::kRejected) out.named_as.clear();
    return std::move(out);
  };
  if (content.size() > policy.file_max_bytes)
    return done(rejected("larger than the policy's " + std::to_string(policy.file_max_bytes) + " bytes per file"));

  // Markup types are let through decide() so that they can be scanned here;
  // the allowlist decides whether they leave as themselves, the active-content
  // policy whether anything else leaves as text/plain.
  std::vector<std::string> admissible = policy.allowed_media_types;
  for (const char* m : {"text/html", "application/xhtml+xml", "image/svg+xml"}) admissible.push_back(m);
  types::Decision d = types::decide(name, content, sniffer, admissible);
  if (!d.ok) return done(rejected(d.reason));
  out.named_as = d.media_type;

  if (is_markup(d.media_type) || d.media_type == "text/markdown") {
    // Markdown as CommonMark's reference parser builds it: its links, images
    // and definitions, and its raw HTML through the markup scanner; code
    // spans and blocks render as text, so what they hold is not a finding.
    active::Finding f = d.media_type == "text/markdown" ? markdown::scan(content) : active::scan_markup(content);
    const bool as_text = policy.active_content_as_text;
    if (f.active && !as_text) return done(rejected("active content: " + f.reason));
    if (f.active || (as_text && !allowed(policy, d.media_type))) {
      // Delivered as text, never rendered: the policy chose text over rejection.
      if (!allowed(policy, "text/plain")) return done(rejected("active content: " + f.reason));
      out.named_as = "text/plain";
      return done({VerdictKind::kAccepted,
                   (f.active ? "active content (" + f.reason + ")" : "markup (" + d.media_type + ")") +
                       " delivered as text/plain, never rendered",
                   "text/plain", std::move(content)});
    }
    if (!allowed(policy, d.media_type))
      return done(rejected("media type " + d.media_type + " is not allowed by the policy"));
    // HTML is never served as text/html: a client must not render it.
    if (d.media_type == "text/html" || d.media_type == "application/xhtml+xml")
      return done({VerdictKind::kAccepted, "no active content found; HTML is delivered as text/plain", "text/plain",
                   std::move(content)});
  }

  if (d.media_type == "text/csv" || d.media_type == "text/tab-separated-values") {
    char delimiter = d.media_type == "text/csv" ? ',' : '\t';
    csv::Result r = csv::process(content, delimiter, policy.csv_mode);
    if (!r.ok) return done(rejected("spreadsheet check: " + r.reason));
    if (r.cells_changed > 0) return done({VerdictKind::kSanitized, r.reason, d.media_type, std::move(r.output)}, true);
    return done(
        {VerdictKind::kAccepted, "no formula cells; type agrees with content", d.media_type, std::move(content)});
  }
  if (d.media_type == "image/png" || d.media_type == "image/jpeg" || d.media_type == "image/gif") {
    images::Result r = images::check(content, d.media_type, policy.image_pixels_max);
    if (!r.ok) return done(rejected(r.reason));
    return done({VerdictKind::kAccepted,
                 "type agrees with content (" + d.media_type + ", " + std::to_string(r.width) + " x " +
                     std::to_string(r.height) + (r.frames > 1 ? ", " + std::to_string(r.frames) + " frames" : "") + ")",
                 d.media_type, std::move(content)});
  }
  if (d.media_type == "application/pdf") {
    pdf::Result r = pdf::check(content, policy.pdf_strip ? pdf::Mode::kStrip : pdf::Mode::kReject);
    if (!r.ok) return done(rejected(r.reason));
    if (r.removed > 0) return done({VerdictKind::kSanitized, r.reason, d.media_type, std::move(r.output)}, true);
    return done({VerdictKind::kAccepted, "type agrees with content (application/pdf); no active content found by qpdf",
                 d.media_type, std::move(content)});
  }
  return done(
      {VerdictKind::kAccepted, "type agrees with content (" + d.media_type + ")", d.media_type, std::move(content)});
}

std::string upload_media_type(const std::string& name, const std::string& content, const types::Sniffer& sniffer,
                              const std::vector<std::string>& allowed_media_types) {
  std::vector<std::string> everything = allowed_media_types;
  for (const char* m : {"text/html", "application/xhtml+xml", "image/svg+xml"}) everything.push_back(m);
  types::Decision d = types::decide(name, content, sniffer, everything);
  if (d.ok) return d.media_type;
  types::Sniffed s = sniffer.sniff(content);
  return s.mime.empty() ? "application/octet-stream" : s.mime;
}

nlohmann::json to_json(const Inspection& i) {
  return {{"verdict", to_string(i.verdict.verdict)},
          {"reason", i.verdict.reason},
          {"media_type", i.verdict.media_type},
          {"named_as", i.named_as},
          {"changed", i.changed}};
}

}  // namespace artifacts
