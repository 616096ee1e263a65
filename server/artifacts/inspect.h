// The part of the artifact gate that parses a file's bytes: its type
// (libmagic against the name), markup and Markdown for active content,
// CSV/TSV formula cells, image headers, PDF structure (qpdf). It runs in the
// parser helper (server/parser/main.cpp), never in the server, and in tests.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/artifacts/gate.h"
#include "server/artifacts/types.h"
#include "server/util/result.h"

namespace artifacts {

struct Inspection {
  Verdict verdict;
  std::string named_as;  // the type whose extensions the name must have; empty when rejected
  bool changed = false;  // the content is the gate's rewrite (sanitized), not the file's
};
Inspection inspect(const std::string& name, std::string content, const types::Sniffer& sniffer,
                   const GatePolicy& policy);
// An inspection's fields without its content (that travels as raw bytes).
nlohmann::json to_json(const Inspection& inspection);

// The media type of an upload: what the gate would serve it as, else libmagic's.
std::string upload_media_type(const std::string& name, const std::string& content, const types::Sniffer& sniffer,
                              const std::vector<std::string>& allowed_media_types);

// The whole gate in one process, with a libmagic of its own: the name, the
// inspection, the extension (tests, and tools that check a file by hand).
class InProcessGate {
 public:
  static util::Result<InProcessGate> create(GatePolicy policy);
  Verdict check(const std::string& name, std::string content) const;
  const Gate& gate() const { return gate_; }
  const types::Sniffer& sniffer() const { return sniffer_; }

 private:
  InProcessGate(types::Sniffer sniffer, GatePolicy policy) : sniffer_(std::move(sniffer)), gate_(std::move(policy)) {}
  types::Sniffer sniffer_;
  Gate gate_;
};

}  // namespace artifacts
