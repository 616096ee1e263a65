// protocol::jsonrpc::parse_line on one framed line: it never throws; the depth
// scan on raw text agrees with the depth of what was built; and every message
// it accepts re-serialises to a line it accepts again as the same message.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "server/protocol/jsonrpc.h"
#include "tests/fuzz/check.h"

namespace jsonrpc = protocol::jsonrpc;
using nlohmann::json;

namespace {

// A small depth cap, so the fuzzer reaches it; sizes as the server has them.
constexpr jsonrpc::Limits kLimits{4 * 1024 * 1024, 12};

int depth_of(const json& v) {
  if (!v.is_structured()) return 0;
  int deepest = 0;
  for (const json& child : v) deepest = std::max(deepest, depth_of(child));
  return deepest + 1;
}

void check_same(const jsonrpc::Item& a, const jsonrpc::Item& b) {
  FUZZ_CHECK(a.index() == b.index());
  if (auto* m = std::get_if<jsonrpc::Message>(&a)) {
    auto& n = std::get<jsonrpc::Message>(b);
    FUZZ_CHECK(m->kind == n.kind && m->id == n.id && m->method == n.method && m->params == n.params);
  } else {
    auto& f = std::get<jsonrpc::Failure>(a);
    auto& g = std::get<jsonrpc::Failure>(b);
    FUZZ_CHECK(f.code == g.code && f.id == g.id);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view line(reinterpret_cast<const char*>(data), size);
  jsonrpc::Parsed parsed = jsonrpc::parse_line(line, kLimits);
  FUZZ_CHECK(!parsed.items.empty());
  if (parsed.whole_line_failed) {
    FUZZ_CHECK(parsed.items.size() == 1 && std::holds_alternative<jsonrpc::Failure>(parsed.items[0]));
    return 0;
  }
  // Built, so within the cap: the raw-text scan must have seen its real depth.
  json doc = json::parse(line, nullptr, false);
  FUZZ_CHECK(!doc.is_discarded());
  const int depth = depth_of(doc);
  FUZZ_CHECK(depth <= kLimits.max_depth);
  FUZZ_CHECK(jsonrpc::nesting_depth(line, 1000) == depth);
  FUZZ_CHECK(parsed.is_batch == doc.is_array());

  for (const jsonrpc::Item& item : parsed.items) {
    auto* f = std::get_if<jsonrpc::Failure>(&item);
    if (f) {
      FUZZ_CHECK(f->code == jsonrpc::kInvalidRequest || f->code == jsonrpc::kInvalidParams);
      FUZZ_CHECK(f->id.is_null() || f->id.is_string() || f->id.is_number_integer());
      continue;
    }
    auto& m = std::get<jsonrpc::Message>(item);
    FUZZ_CHECK(m.kind == jsonrpc::Message::Kind::kNotification ? m.id.is_null()
                                                               : m.id.is_string() || m.id.is_number_integer());
    FUZZ_CHECK(m.params.is_null() || m.params.is_object() || m.params.is_array());
    // Strict dump: an accepted message is valid UTF-8 all through.
    const std::string again = m.body.dump();
    // The re-serialised text may be longer ("1e2" becomes "100.0"): only the
    // size cap is waived for it.
    jsonrpc::Parsed reparsed = jsonrpc::parse_line(again, jsonrpc::Limits{SIZE_MAX, kLimits.max_depth});
    FUZZ_CHECK(!reparsed.whole_line_failed && !reparsed.is_batch && reparsed.items.size() == 1);
    check_same(item, reparsed.items[0]);
    // And as the answer's id is echoed: make_error/make_result serialise.
    (void)jsonrpc::make_error(m.id, jsonrpc::kInternalError, "x").dump();
  }
  return 0;
}
