// transport::stdio::LineFramer against a model written here: the stream split
// at every LF, one trailing CR stripped, a line over the cap reported (with a
// size over the cap and the id protocol::id_scan reads from the whole line)
// and dropped, a blank line skipped, an unterminated last line kept. The same
// events, ids included, come out whole and in any chunking; an id read from a
// line nlohmann parses is that object's top-level "id".
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/protocol/id_scan.h"
#include "server/transport/stdio_framing.h"
#include "tests/fuzz/check.h"

namespace {

using nlohmann::json;

struct Event {
  bool oversized = false;
  std::string line;  // a line; empty when oversized
  json id;           // an oversized line's id; null otherwise
  bool operator==(const Event&) const = default;
};

// The id of a whole line, and, where nlohmann parses the line (shallow
// enough to build), proof that a non-null id is the object's own.
json whole_line_id(std::string_view seg) {
  protocol::id_scan::IdScanner scan;
  scan.feed(seg);
  json id = scan.finish();
  FUZZ_CHECK(id.is_null() || id.is_string() || id.is_number_integer());
  size_t brackets = 0;
  for (char c : seg) brackets += c == '[' || c == '{';
  if (!id.is_null() && brackets < 200) {
    json doc = json::parse(seg, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_discarded()) {
      FUZZ_CHECK(doc.is_object());
      FUZZ_CHECK(doc.contains("id") && doc["id"] == id);
    }
  }
  return id;
}

std::vector<Event> model(std::string_view s, size_t max) {
  std::vector<Event> out;
  size_t start = 0;
  while (start < s.size()) {
    size_t nl = s.find('\n', start);
    std::string_view seg = s.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    if (!seg.empty() && seg.back() == '\r') seg.remove_suffix(1);
    if (seg.size() > max)
      out.push_back({true, "", whole_line_id(seg)});
    else if (seg.find_first_not_of(" \t\r") != std::string_view::npos)
      out.push_back({false, std::string(seg)});
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  return out;
}

std::vector<Event> frame(std::string_view s, size_t max, uint32_t chunk_seed) {
  std::vector<Event> out;
  transport::stdio::LineFramer framer(max);
  auto on_line = [&](std::string_view line) { out.push_back({false, std::string(line), nullptr}); };
  auto on_oversized = [&](size_t bytes, const json& id) {
    FUZZ_CHECK(bytes > max);
    out.push_back({true, "", id});
  };
  uint32_t x = chunk_seed | 1;
  for (size_t pos = 0; pos < s.size();) {
    size_t n = chunk_seed == 0 ? s.size() : 1 + (x % (2 * max + 3));
    x = x * 1103515245 + 12345;  // a new chunk size each read
    n = std::min(n, s.size() - pos);
    framer.feed(s.substr(pos, n), on_line, on_oversized);
    pos += n;
  }
  framer.finish(on_line, on_oversized);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  // Byte 0: the cap (small, so the fuzzer reaches it); byte 1: the chunking.
  const size_t max = data[0] % 32;
  std::string_view stream(reinterpret_cast<const char*>(data) + 2, size - 2);
  const std::vector<Event> want = model(stream, max);
  FUZZ_CHECK(frame(stream, max, 0) == want);
  FUZZ_CHECK(frame(stream, max, data[1]) == want);
  return 0;
}
