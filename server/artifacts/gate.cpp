// Artifact gate decisions, in order: size, type agreement and allowlist,
// active content in markup, formula cells in CSV/TSV. Fails closed: a file the
// gate cannot classify or parse is rejected with the reason.
#include "server/artifacts/gate.h"

#include <algorithm>

#include "server/artifacts/active_content.h"

namespace artifacts {
namespace {

bool is_markup(const std::string& type) {
  return type == "text/html" || type == "application/xhtml+xml" || type == "image/svg+xml";
}

bool allowed(const GatePolicy& p, const std::string& type) {
  return std::find(p.allowed_media_types.begin(), p.allowed_media_types.end(), type) !=
         p.allowed_media_types.end();
}

Verdict reject(std::string reason) { return {"rejected", std::move(reason), "", ""}; }

}  // namespace

util::Result<Gate> Gate::create(GatePolicy policy) {
  auto sniffer = types::Sniffer::create();
  if (!sniffer) return sniffer.error();
  return Gate(std::move(*sniffer), std::move(policy));
}

Verdict Gate::check(const std::string& name, std::string content) const {
  if (content.size() > policy_.file_max_bytes)
    return reject("larger than the policy's " + std::to_string(policy_.file_max_bytes) + " bytes per file");

  // Markup types are let through decide() so that they can be scanned here;
  // the allowlist still decides whether they may leave.
  std::vector<std::string> admissible = policy_.allowed_media_types;
  for (const char* m : {"text/html", "application/xhtml+xml", "image/svg+xml"}) admissible.push_back(m);
  types::Decision d = types::decide(name, content, sniffer_, admissible);
  if (!d.ok) return reject(d.reason);

  if (is_markup(d.media_type) || d.media_type == "text/markdown") {
    active::Finding f = active::scan_markup(content);
    if (f.active) {
      if (!policy_.active_content_as_text) return reject("active content: " + f.reason);
      return {"accepted", "active content (" + f.reason + ") delivered as text/plain, never rendered",
              "text/plain", std::move(content)};
    }
    if (!allowed(policy_, d.media_type))
      return reject("media type " + d.media_type + " is not allowed by the policy");
    // HTML is never served as text/html: a client must not render it.
    if (d.media_type == "text/html" || d.media_type == "application/xhtml+xml")
      return {"accepted", "no active content found; HTML is delivered as text/plain", "text/plain",
              std::move(content)};
  }

  if (d.media_type == "text/csv" || d.media_type == "text/tab-separated-values") {
    char delimiter = d.media_type == "text/csv" ? ',' : '\t';
    csv::Result r = csv::process(content, delimiter, policy_.csv_mode);
    if (!r.ok) return reject("spreadsheet check: " + r.reason);
    if (r.cells_changed > 0)
      return {"sanitized", r.reason, d.media_type, std::move(r.output)};
    return {"accepted", "no formula cells; type agrees with content", d.media_type, std::move(content)};
  }
  return {"accepted", "type agrees with content (" + d.media_type + ")", d.media_type, std::move(content)};
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
