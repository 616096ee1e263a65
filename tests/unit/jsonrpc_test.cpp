// JSON-RPC 2.0 envelopes: size and depth caps before parsing, exact error codes,
// id handling, message kinds, batches, response shapes.
#include <doctest/doctest.h>

#include <string>

#include "server/protocol/jsonrpc.h"

namespace rpc = protocol::jsonrpc;
using nlohmann::json;

namespace {

const rpc::Limits kLimits{4096, 64};

const rpc::Failure& only_failure(const rpc::Parsed& p) {
  REQUIRE(p.items.size() == 1);
  REQUIRE(std::holds_alternative<rpc::Failure>(p.items[0]));
  return std::get<rpc::Failure>(p.items[0]);
}

const rpc::Message& only_message(const rpc::Parsed& p) {
  REQUIRE(p.items.size() == 1);
  REQUIRE(std::holds_alternative<rpc::Message>(p.items[0]));
  return std::get<rpc::Message>(p.items[0]);
}

rpc::Failure classify_failure(const json& j) {
  rpc::Item item = rpc::classify(j);
  REQUIRE(std::holds_alternative<rpc::Failure>(item));
  return std::get<rpc::Failure>(item);
}

rpc::Message classify_message(const json& j) {
  rpc::Item item = rpc::classify(j);
  REQUIRE(std::holds_alternative<rpc::Message>(item));
  return std::get<rpc::Message>(item);
}

std::string nested_arrays(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

std::string nested_objects(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += "{\"a\":";
  s += "1";
  s += std::string(depth, '}');
  return s;
}

}  // namespace

TEST_CASE("not JSON is a whole-line parse error -32700 with a null id") {
  for (const char* text : {"hello", "{\"jsonrpc\":\"2.0\",", "{} {}", "{'a':1}", ""}) {
    CAPTURE(std::string(text));
    rpc::Parsed p = rpc::parse_line(text, kLimits);
    CHECK(p.whole_line_failed);
    CHECK_FALSE(p.is_batch);
    const rpc::Failure& f = only_failure(p);
    CHECK(f.code == rpc::kParseError);
    CHECK(f.code == -32700);
    CHECK(f.id.is_null());
    CHECK(f.message.find("Parse error") != std::string::npos);
  }
}

TEST_CASE("a NUL byte anywhere in a line is a parse error, not the end of the input") {
  using namespace std::string_literals;
  for (const std::string& text : {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\0garbage"s,
                                  "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\0"s,
                                  "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"pi\0ng\"}"s, "\0"s}) {
    CAPTURE(text.size());
    rpc::Parsed p = rpc::parse_line(text, kLimits);
    CHECK(p.whole_line_failed);
    CHECK(only_failure(p).code == rpc::kParseError);
  }
  // The same line without the NUL is a request (the check is on the byte, not the text).
  rpc::Parsed ok = rpc::parse_line("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}", kLimits);
  CHECK_FALSE(ok.whole_line_failed);
}

TEST_CASE("invalid UTF-8 inside a JSON string is a parse error") {
  rpc::Parsed p = rpc::parse_line("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}", kLimits);
  CHECK(p.whole_line_failed);
  CHECK(only_failure(p).code == -32700);
}

TEST_CASE("oversized line is rejected with -32600 before parsing") {
  rpc::Limits small{32, 64};
  std::string line = R"({"jsonrpc":"2.0","id":1,"method":"ping"})";
  REQUIRE(line.size() > 32);
  rpc::Parsed p = rpc::parse_line(line, small);
  CHECK(p.whole_line_failed);
  const rpc::Failure& f = only_failure(p);
  CHECK(f.code == -32600);
  CHECK(f.id == 1);  // read by protocol::id_scan without parsing the message
  CHECK(f.message == "Invalid Request: message of 40 bytes exceeds the cap of 32 bytes (server.message_max_bytes)");

  // Exactly at the cap is accepted.
  rpc::Limits exact{line.size(), 64};
  rpc::Parsed ok = rpc::parse_line(line, exact);
  CHECK_FALSE(ok.whole_line_failed);
  CHECK(only_message(ok).method == "ping");
}

TEST_CASE("oversized garbage is reported as too big, not as a parse error") {
  rpc::Limits small{8, 64};
  rpc::Parsed p = rpc::parse_line("not json at all", small);
  CHECK(only_failure(p).code == -32600);
}

TEST_CASE("deeply nested arrays beyond max_depth are rejected before parse") {
  rpc::Parsed p = rpc::parse_line(nested_arrays(65), kLimits);
  CHECK(p.whole_line_failed);
  const rpc::Failure& f = only_failure(p);
  CHECK(f.code == -32600);
  CHECK(f.id.is_null());
  CHECK(f.message == "Invalid Request: JSON nesting deeper than 64 levels");
}

TEST_CASE("nesting exactly at max_depth is parsed (then classified)") {
  rpc::Parsed p = rpc::parse_line(nested_arrays(64), kLimits);
  CHECK_FALSE(p.whole_line_failed);
  CHECK(p.is_batch);
  // A batch whose single item is an array, not an object: per-item -32600.
  REQUIRE(p.items.size() == 1);
  CHECK(std::get<rpc::Failure>(p.items[0]).code == -32600);
}

TEST_CASE("deeply nested objects beyond max_depth are rejected before parse") {
  std::string line = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":" + nested_objects(64) + "}";
  rpc::Parsed p = rpc::parse_line(line, kLimits);
  CHECK(p.whole_line_failed);
  CHECK(only_failure(p).code == -32600);
  CHECK(only_failure(p).message.find("nesting deeper than 64") != std::string::npos);

  std::string ok_line = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":" + nested_objects(63) + "}";
  rpc::Parsed ok = rpc::parse_line(ok_line, kLimits);
  CHECK_FALSE(ok.whole_line_failed);
  CHECK(only_message(ok).method == "x");
}

TEST_CASE("a million-deep array is refused without building it (no stack overflow)") {
  rpc::Parsed p = rpc::parse_line(std::string(1000000, '['), rpc::Limits{4u << 20, 64});
  CHECK(p.whole_line_failed);
  CHECK(only_failure(p).code == -32600);
}

TEST_CASE("brackets inside strings do not count towards depth") {
  std::string brackets(1000, '[');
  std::string line = R"({"jsonrpc":"2.0","id":7,"method":"echo","params":{"s":")" + brackets + "{{{\"}}";
  rpc::Parsed p = rpc::parse_line(line, kLimits);
  CHECK_FALSE(p.whole_line_failed);
  const rpc::Message& m = only_message(p);
  CHECK(m.method == "echo");
  CHECK(m.id == 7);
  CHECK(m.params["s"].get<std::string>() == brackets + "{{{");
}

TEST_CASE("nesting_depth handles escaped quotes and backslashes inside strings") {
  CHECK(rpc::nesting_depth("", 64) == 0);
  CHECK(rpc::nesting_depth("1", 64) == 0);
  CHECK(rpc::nesting_depth("[]", 64) == 1);
  CHECK(rpc::nesting_depth("[[],[[]]]", 64) == 3);
  CHECK(rpc::nesting_depth(R"({"a":[{"b":[]}]})", 64) == 4);
  // An escaped quote does not end the string: the brackets after it are text.
  CHECK(rpc::nesting_depth(R"(["\"[[[[", 1])", 64) == 1);
  // An escaped backslash then a quote does end the string.
  CHECK(rpc::nesting_depth(R"(["\\", [[1]]])", 64) == 3);
  CHECK(rpc::nesting_depth(R"(["\\\"[[", [1]])", 64) == 2);
  // Unicode escapes and brackets in keys.
  CHECK(rpc::nesting_depth(R"({"[[[\u0022[[": {"}}}": []}})", 64) == 3);
  // Stops early once past the limit.
  CHECK(rpc::nesting_depth(std::string(100, '['), 5) == 6);
  CHECK(rpc::nesting_depth(nested_arrays(10), 64) == 10);
}

TEST_CASE("escaped quote cannot hide deep nesting from the depth check") {
  // If "\"" ended the string, the brackets below would be counted as text.
  std::string line = R"({"jsonrpc":"2.0","id":1,"method":"x","params":{"s":"\"", "d":)" + nested_arrays(64) + "}}";
  rpc::Parsed p = rpc::parse_line(line, kLimits);
  CHECK(p.whole_line_failed);
  CHECK(only_failure(p).code == -32600);
}

TEST_CASE("missing jsonrpc or jsonrpc 1.0 is -32600 and keeps a valid id") {
  rpc::Failure f1 = classify_failure({{"id", 5}, {"method", "ping"}});
  CHECK(f1.code == -32600);
  CHECK(f1.id == 5);
  CHECK(f1.message == "Invalid Request: jsonrpc must be \"2.0\"");

  rpc::Failure f2 = classify_failure({{"jsonrpc", "1.0"}, {"id", "abc"}, {"method", "ping"}});
  CHECK(f2.code == -32600);
  CHECK(f2.id == "abc");

  rpc::Failure f3 = classify_failure({{"jsonrpc", 2.0}, {"id", 1}, {"method", "ping"}});
  CHECK(f3.code == -32600);
  CHECK(f3.id == 1);
}

TEST_CASE("id as object, float, bool, array or null is -32600 with a null id") {
  for (json bad : {json::object({{"x", 1}}), json(1.5), json(true), json::array({1}), json(nullptr)}) {
    CAPTURE(bad.dump());
    rpc::Failure f = classify_failure({{"jsonrpc", "2.0"}, {"id", bad}, {"method", "ping"}});
    CHECK(f.code == -32600);
    CHECK(f.id.is_null());
    CHECK(f.message == "Invalid Request: id must be a string or an integer");
  }
}

TEST_CASE("id string, positive and negative integers are preserved") {
  CHECK(classify_message({{"jsonrpc", "2.0"}, {"id", "req-1"}, {"method", "ping"}}).id == "req-1");
  CHECK(classify_message({{"jsonrpc", "2.0"}, {"id", 0}, {"method", "ping"}}).id == 0);
  CHECK(classify_message({{"jsonrpc", "2.0"}, {"id", -3}, {"method", "ping"}}).id == -3);
}

TEST_CASE("a non-object message is -32600") {
  for (json bad : {json(1), json("x"), json(nullptr), json::array()}) {
    rpc::Failure f = classify_failure(bad);
    CHECK(f.code == -32600);
    CHECK(f.id.is_null());
    CHECK(f.message == "Invalid Request: a message must be a JSON object");
  }
}

TEST_CASE("method that is not a string is -32600") {
  rpc::Failure f = classify_failure({{"jsonrpc", "2.0"}, {"id", 2}, {"method", 42}});
  CHECK(f.code == -32600);
  CHECK(f.id == 2);
  CHECK(f.message == "Invalid Request: method must be a string");
}

TEST_CASE("params that are not structured are -32602") {
  for (json bad : {json("x"), json(3), json(true), json(nullptr)}) {
    CAPTURE(bad.dump());
    rpc::Failure f = classify_failure({{"jsonrpc", "2.0"}, {"id", 9}, {"method", "m"}, {"params", bad}});
    CHECK(f.code == -32602);
    CHECK(f.id == 9);
    CHECK(f.message.find("params") != std::string::npos);
  }
  // Objects and arrays are fine.
  CHECK(classify_message({{"jsonrpc", "2.0"}, {"id", 9}, {"method", "m"}, {"params", json::array({1})}}).params ==
        json::array({1}));
  CHECK(classify_message({{"jsonrpc", "2.0"}, {"id", 9}, {"method", "m"}, {"params", {{"a", 1}}}}).params["a"] == 1);
}

TEST_CASE("request, notification and response kinds") {
  rpc::Message req = classify_message({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/list"}});
  CHECK(req.kind == rpc::Message::Kind::kRequest);
  CHECK(req.method == "tools/list");
  CHECK(req.params.is_null());
  CHECK(req.body["method"] == "tools/list");

  rpc::Message note = classify_message({{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}});
  CHECK(note.kind == rpc::Message::Kind::kNotification);
  CHECK(note.id.is_null());
  CHECK(note.method == "notifications/initialized");

  rpc::Message res = classify_message({{"jsonrpc", "2.0"}, {"id", 4}, {"result", {{"ok", true}}}});
  CHECK(res.kind == rpc::Message::Kind::kResponse);
  CHECK(res.id == 4);
  CHECK(res.body["result"]["ok"] == true);

  rpc::Message err = classify_message({{"jsonrpc", "2.0"}, {"id", "x"}, {"error", {{"code", -1}, {"message", "m"}}}});
  CHECK(err.kind == rpc::Message::Kind::kResponse);
  CHECK(err.id == "x");
}

TEST_CASE("a response needs exactly one of result and error, and an id") {
  rpc::Failure both =
      classify_failure({{"jsonrpc", "2.0"}, {"id", 4}, {"result", 1}, {"error", {{"code", 1}, {"message", "m"}}}});
  CHECK(both.code == -32600);
  CHECK(both.id == 4);
  CHECK(both.message == "Invalid Request: missing method");

  rpc::Failure neither = classify_failure({{"jsonrpc", "2.0"}, {"id", 4}});
  CHECK(neither.code == -32600);
  CHECK(neither.id == 4);

  rpc::Failure no_id = classify_failure({{"jsonrpc", "2.0"}, {"result", 1}});
  CHECK(no_id.code == -32600);
  CHECK(no_id.id.is_null());
}

TEST_CASE("a request cannot carry result or error") {
  rpc::Failure f = classify_failure({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "m"}, {"result", 1}});
  CHECK(f.code == -32600);
  CHECK(f.id == 1);
  CHECK(f.message == "Invalid Request: a request cannot carry result or error");
}

TEST_CASE("empty batch is a whole-line -32600") {
  rpc::Parsed p = rpc::parse_line("[]", kLimits);
  CHECK(p.whole_line_failed);
  const rpc::Failure& f = only_failure(p);
  CHECK(f.code == -32600);
  CHECK(f.id.is_null());
  CHECK(f.message == "Invalid Request: empty batch");
}

TEST_CASE("batch of two gives is_batch with two items classified independently") {
  rpc::Parsed p = rpc::parse_line(
      R"([{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"1.0","id":2,"method":"ping"}])", kLimits);
  CHECK_FALSE(p.whole_line_failed);
  CHECK(p.is_batch);
  REQUIRE(p.items.size() == 2);
  REQUIRE(std::holds_alternative<rpc::Message>(p.items[0]));
  CHECK(std::get<rpc::Message>(p.items[0]).id == 1);
  REQUIRE(std::holds_alternative<rpc::Failure>(p.items[1]));
  CHECK(std::get<rpc::Failure>(p.items[1]).code == -32600);
  CHECK(std::get<rpc::Failure>(p.items[1]).id == 2);
}

TEST_CASE("single message is not a batch") {
  rpc::Parsed p = rpc::parse_line(R"({"jsonrpc":"2.0","id":1,"method":"ping"})", kLimits);
  CHECK_FALSE(p.is_batch);
  CHECK_FALSE(p.whole_line_failed);
  CHECK(only_message(p).kind == rpc::Message::Kind::kRequest);
}

TEST_CASE("make_error shape: data only when given") {
  json e = rpc::make_error(3, -32601, "Method not found: x");
  CHECK(e["jsonrpc"] == "2.0");
  CHECK(e["id"] == 3);
  CHECK(e["error"]["code"] == -32601);
  CHECK(e["error"]["message"] == "Method not found: x");
  CHECK_FALSE(e["error"].contains("data"));
  CHECK_FALSE(e.contains("result"));
  CHECK(e.size() == 3);

  json withdata = rpc::make_error("q", -32002, "Resource not found", {{"uri", "u"}});
  CHECK(withdata["id"] == "q");
  CHECK(withdata["error"]["data"]["uri"] == "u");

  json nullid = rpc::make_error(nullptr, -32700, "Parse error");
  REQUIRE(nullid.contains("id"));
  CHECK(nullid["id"].is_null());
}

TEST_CASE("make_result shape") {
  json r = rpc::make_result("abc", json::object());
  CHECK(r == json{{"jsonrpc", "2.0"}, {"id", "abc"}, {"result", json::object()}});
  CHECK_FALSE(r.contains("error"));
}

TEST_CASE("make_notification omits null params") {
  json n = rpc::make_notification("notifications/progress", nullptr);
  CHECK(n == json{{"jsonrpc", "2.0"}, {"method", "notifications/progress"}});
  json n2 = rpc::make_notification("m", {{"a", 1}});
  CHECK(n2["params"]["a"] == 1);
  CHECK_FALSE(n2.contains("id"));
}
