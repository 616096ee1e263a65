// protocol::id_scan: the top-level id of an over-cap message, read as it
// streams; every doubt is null; the answer does not depend on the chunking.
#include <doctest/doctest.h>

#include <string>

#include "server/protocol/id_scan.h"
#include "server/protocol/jsonrpc.h"
#include "server/transport/stdio_framing.h"

using nlohmann::json;
using protocol::id_scan::IdScanner;

namespace {

json scan(const std::string& text, size_t chunk = 0) {
  IdScanner s;
  if (chunk == 0)
    s.feed(text);
  else
    for (size_t i = 0; i < text.size(); i += chunk) s.feed(std::string_view(text).substr(i, chunk));
  return s.finish();
}

// The id, checked to be the same whole and in chunks of 1, 2, 3 and 7 bytes.
json id_of(const std::string& text) {
  json whole = scan(text);
  for (size_t chunk : {1, 2, 3, 7}) CHECK_MESSAGE(scan(text, chunk) == whole, "chunks of " << chunk);
  return whole;
}

const std::string kPad = std::string(10000, 'x');

}  // namespace

TEST_CASE("the id before or after a large params, as an integer or a string") {
  CHECK(id_of(R"({"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"pad":")" + kPad + "\"}}") == 42);
  CHECK(id_of(R"({"jsonrpc":"2.0","method":"tools/call","params":{"pad":")" + kPad + R"("},"id":42})") == 42);
  CHECK(id_of(R"({"id":"req-7","params":{"a":[1,2,{"b":"]}"}]}})") == "req-7");
  CHECK(id_of(R"( { "id" : -3 , "x" : null } )") == -3);
  CHECK(id_of(R"({"id":"a\"b\\c\u00e9"})") == "a\"b\\c\u00e9");
  CHECK(id_of("{\"id\":7}\r") == 7);
  CHECK(id_of(R"({"id":0})") == 0);
  CHECK(id_of(R"({"a":"x","b":12.5e3,"c":true,"d":[],"e":{},"id":9})") == 9);
  // A string id of exactly 256 bytes is kept.
  std::string at_cap(256, 'k');
  CHECK(id_of(R"({"id":")" + at_cap + "\"}") == at_cap);
}

TEST_CASE("an id inside params or inside a string never counts") {
  CHECK(id_of(R"({"jsonrpc":"2.0","method":"x","params":{"id":42,"pad":")" + kPad + "\"}}").is_null());
  CHECK(id_of(R"({"jsonrpc":"2.0","method":"x","params":[{"id":42}]})").is_null());
  CHECK(id_of(R"({"note":"\"id\":42","method":"x"})").is_null());
  CHECK(id_of(R"({"note":"\\","id":5})") == 5);             // an escaped backslash ends before the quote
  CHECK(id_of(R"({"note":"\\\",\"id\":6","id":5})") == 5);  // escaped quotes stay inside the string
  CHECK(id_of(R"({"idx":1,"xid":2,"i":3})").is_null());
}

TEST_CASE("every doubt is null") {
  for (const char* text : {
           "",                                   // nothing
           "[{\"id\":1}]",                       // a batch
           "\"id\"",                             // a scalar
           "{\"id\":1",                          // unclosed object
           "{\"id\":1}{\"id\":2}",               // two objects
           "{\"id\":1} x",                       // bytes after it
           "{\"id\":1,\"id\":2}",                // two ids
           "{\"id\":1,\"params\":{},\"id\":1}",  // two ids, even equal
           "{\"\\u0069d\":1}",                   // a key with an escape
           "{\"id\":1.5}",                       // not an integer
           "{\"id\":1e3}",                       // not an integer
           "{\"id\":01}",                        // not JSON
           "{\"id\":99999999999999999999999}",   // beyond 64 bits
           "{\"id\":true}",                      // not a string or integer
           "{\"id\":null}",                      // null is null
           "{\"id\":{\"a\":1}}",                 // an object
           "{\"id\":[1]}",                       // an array
           "{\"id\":\"a\nb\"}",                  // a raw control character in the string
           "{\"id\":\"abc}",                     // an unclosed string
           "{\"id\":1,}",                        // a trailing comma
           "{\"id\" 1}",                         // no colon
           "{\"p\":{\"a\":1],\"id\":1}",         // mismatched brackets
           "{\"p\":[}\"id\":1}",                 // mismatched brackets
           "{,\"id\":1}",                        // a comma first
       }) {
    CAPTURE(std::string(text));
    CHECK(id_of(text).is_null());
  }
  CHECK(id_of(R"({"id":")" + std::string(257, 'k') + "\"}").is_null());  // over 256 bytes
  CHECK(id_of(R"({"id":)" + std::string(300, '1') + "}").is_null());
  // Nesting deeper than the scanner follows.
  CHECK(id_of("{\"id\":1,\"p\":" + std::string(300, '[') + std::string(300, ']') + "}").is_null());
  CHECK(id_of("{\"id\":1,\"p\":" + std::string(255, '[') + std::string(255, ']') + "}") == 1);
}

TEST_CASE("LineFramer: an over-cap line is reported with its id, in any chunking") {
  const std::string lines = R"({"jsonrpc":"2.0","id":42,"method":"ping","params":{"pad":")" + kPad + "\"}}\n" +
                            R"({"jsonrpc":"2.0","method":"ping","params":{"pad":")" + kPad + R"("},"id":"s"})" +
                            "\r\n" + R"({"jsonrpc":"2.0","method":"ping","params":{"id":3,"pad":")" + kPad + "\"}}\n" +
                            R"({"id":5,"method":"ping"})" + "\n" + R"({"id":6,"method":"ping","pad":")" + kPad + "\"}";
  for (size_t chunk : {size_t{0}, size_t{1}, size_t{5}, size_t{4096}, size_t{65536}}) {
    CAPTURE(chunk);
    transport::stdio::LineFramer framer(1000);
    std::vector<json> ids;
    std::vector<std::string> small;
    auto on_line = [&](std::string_view l) { small.emplace_back(l); };
    auto on_oversized = [&](size_t bytes, const json& id) {
      CHECK(bytes > 1000);
      ids.push_back(id);
    };
    if (chunk == 0)
      framer.feed(lines, on_line, on_oversized);
    else
      for (size_t i = 0; i < lines.size(); i += chunk)
        framer.feed(std::string_view(lines).substr(i, chunk), on_line, on_oversized);
    framer.finish(on_line, on_oversized);
    CHECK(ids == std::vector<json>{42, "s", nullptr, 6});
    CHECK(small == std::vector<std::string>{R"({"id":5,"method":"ping"})"});
  }
  // A line of exactly cap + 1 bytes is held, then refused at its newline: the id is read from it too.
  const std::string just_over = R"({"id":8,"p":")" + std::string(1000 - 14, 'x') + "\"}";
  REQUIRE(just_over.size() == 1001);
  transport::stdio::LineFramer framer(1000);
  json got = "unset";
  framer.feed(
      just_over + "\n", [](std::string_view) { FAIL("not a line"); }, [&](size_t, const json& id) { got = id; });
  CHECK(got == 8);
}

TEST_CASE("parse_line: an over-cap message fails whole, with its id and the cap") {
  protocol::jsonrpc::Limits small{32, 64};
  auto p = protocol::jsonrpc::parse_line(R"({"jsonrpc":"2.0","method":"ping","id":"after"})", small);
  REQUIRE(p.whole_line_failed);
  auto& f = std::get<protocol::jsonrpc::Failure>(p.items.front());
  CHECK(f.code == -32600);
  CHECK(f.id == "after");
  CHECK(f.message == "Invalid Request: message of 46 bytes exceeds the cap of 32 bytes (server.message_max_bytes)");
}
