// The artifact gate: every file a job leaves in /outputs passes here before
// it is stored or shown. Size, type (extension vs libmagic vs the policy's
// allowlist), spreadsheet formulas, active content. The parsing (inspect.h)
// is done by the parser helper, outside the server; the server's Gate makes
// the policy's decisions around it. Thread-safe.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/artifacts/csv.h"
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

// The policy as the server sends it to the parser helper.
nlohmann::json to_json(const GatePolicy& policy);
util::Result<GatePolicy> gate_policy_from_json(const nlohmann::json& j);

// The gate's decisions that need no parsing of the file: its name, and what
// an inspection (inspect.h, run by the parser helper) may say, against the
// policy. The server's; it reads no file's bytes.
class Gate {
 public:
  explicit Gate(GatePolicy policy) : policy_(std::move(policy)) {}

  // name: the path under /outputs ("charts/a.png"). A verdict when the name
  // alone is refused.
  std::optional<Verdict> check_name(const std::string& name) const;
  // An inspection's answer (inspect.h's to_json), trusted no further than
  // the policy allows (a verdict, a type the policy serves, content within
  // the size cap; else rejected), then the name's extension against the
  // type. `content`: the file's own bytes, kept unless the inspection
  // changed them into `inspected_content`.
  Verdict finish(const std::string& name, const nlohmann::json& inspection, std::string content,
                 std::string inspected_content) const;
  // The last step: the name's extension against the type the file is named as.
  Verdict check_extension(const std::string& name, Verdict v, const std::string& named_as) const;
  const GatePolicy& policy() const { return policy_; }

 private:
  std::vector<std::string> extensions_for(const std::string& media_type) const;
  GatePolicy policy_;
};

// Verdict helpers both sides use.
Verdict rejected(std::string reason);
bool is_markup(const std::string& media_type);
bool allowed(const GatePolicy& policy, const std::string& media_type);

}  // namespace artifacts
