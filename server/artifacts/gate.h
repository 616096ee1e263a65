// The artifact gate: every file a job leaves in /outputs passes here, on the
// trusted side, before it is stored or shown. Size, type (extension vs
// libmagic vs the policy's allowlist), spreadsheet formulas, active content.
// Thread-safe; used by broker threads and by upload_input for media types.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "server/artifacts/csv.h"
#include "server/artifacts/types.h"
#include "server/util/result.h"

namespace artifacts {

struct GatePolicy {
  std::vector<std::string> allowed_media_types;
  uint64_t file_max_bytes = 0;
  csv::Mode csv_mode = csv::Mode::kNeutralise;
  bool active_content_as_text = false;  // false: reject active markup
  // Media type -> extensions a file served as it may have; a type missing
  // here has artifacts::names::default_extensions.
  std::map<std::string, std::vector<std::string>> allowed_extensions;
  uint64_t image_pixels_max = 50'000'000;  // width x height of a PNG, JPEG or GIF
  bool pdf_strip = false;                  // active PDF parts removed (sanitized) instead of rejected
};

// What the gate decided about one file.
enum class VerdictKind { kAccepted, kSanitized, kRejected };
// "accepted" | "sanitized" | "rejected": the names in results, records and metrics.
std::string_view to_string(VerdictKind kind);
// The inverse of to_string; a name it does not know reads as rejected (fail closed).
VerdictKind verdict_from_string(std::string_view name);

struct Verdict {
  VerdictKind verdict = VerdictKind::kRejected;
  std::string reason;
  std::string media_type;  // what it is served as; empty when rejected
  std::string content;     // the bytes to store (rewritten when sanitized)
};

class Gate {
 public:
  static util::Result<Gate> create(GatePolicy policy);
  // name: the path under /outputs ("charts/a.png").
  Verdict check(const std::string& name, std::string content) const;
  // The media type of an upload: what the gate would serve it as, else libmagic's.
  std::string input_media_type(const std::string& name, const std::string& content) const;

 private:
  Gate(types::Sniffer sniffer, GatePolicy policy) : sniffer_(std::move(sniffer)), policy_(std::move(policy)) {}
  Verdict check_content(const std::string& name, std::string content, std::string& named_as) const;
  std::vector<std::string> extensions_for(const std::string& media_type) const;
  types::Sniffer sniffer_;
  GatePolicy policy_;
};

}  // namespace artifacts
