// Requests inside an intercepted connection, as the parser helper reads
// them: the target normalised, the Host the connection's own, no chunked
// body or upgrade, the job's credential header and hop-by-hop headers gone.
#include <doctest/doctest.h>

#include "server/network/inner_head.h"

namespace {

network::Authority api() {
  auto a = network::parse_authority("api.example.com:443", std::nullopt);
  REQUIRE(a);
  return *a;
}

network::InnerRequest parse(const std::string& head, std::string_view credential = "Authorization") {
  return network::parse_inner_request(head, api(), credential);
}

}  // namespace

TEST_CASE("a request goes on in origin form with the normalised target and without the job's credential") {
  auto r = parse(
      "POST /v1/reports/../reports/q1?x=1 HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer forged\r\n"
      "authorization: Bearer again\r\nContent-Length: 12\r\nProxy-Authorization: x\r\nConnection: keep-alive, "
      "X-Drop\r\nTE: trailers\r\nAccept: */*\r\n\r\n");
  REQUIRE_MESSAGE(r.ok, r.reason);
  CHECK(r.method == "POST");
  CHECK(r.path == "/v1/reports/q1");
  CHECK(r.query == "?x=1");
  CHECK(r.body_bytes == 12);
  CHECK_FALSE(r.close);
  CHECK(r.forward.rfind("POST /v1/reports/q1?x=1 HTTP/1.1\r\n", 0) == 0);
  CHECK(r.forward.find("forged") == std::string::npos);
  CHECK(r.forward.find("again") == std::string::npos);
  CHECK(r.forward.find("Proxy-Authorization") == std::string::npos);
  CHECK(r.forward.find("TE:") == std::string::npos);
  CHECK(r.forward.find("Accept: */*\r\n") != std::string::npos);
  CHECK(r.forward.find("Connection: keep-alive\r\n") != std::string::npos);
  CHECK(r.forward.size() >= 4);
  CHECK(r.forward.substr(r.forward.size() - 4) == "\r\n\r\n");
}

TEST_CASE("HTTP/1.0 and Connection: close end the connection after the request") {
  CHECK(parse("GET / HTTP/1.0\r\nHost: api.example.com\r\n\r\n").close);
  CHECK(parse("GET / HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n\r\n").close);
  CHECK(parse("GET / HTTP/1.1\r\nHost: api.example.com:443\r\n\r\n").ok);
}

TEST_CASE("another host, a chunked body, an upgrade or a bad target is refused, saying why") {
  auto other = parse("GET / HTTP/1.1\r\nHost: admin.example.com\r\n\r\n");
  CHECK_FALSE(other.ok);
  CHECK(other.status == 403);
  CHECK(other.reason.find("not the host this connection was opened to") != std::string::npos);
  auto port = parse("GET / HTTP/1.1\r\nHost: api.example.com:8443\r\n\r\n");
  CHECK_FALSE(port.ok);
  auto two = parse("GET / HTTP/1.1\r\nHost: api.example.com\r\nHost: admin.example.com\r\n\r\n");
  CHECK_FALSE(two.ok);
  auto none = parse("GET / HTTP/1.1\r\n\r\n");
  CHECK_FALSE(none.ok);
  auto chunked = parse("POST /v1/ HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\n\r\n");
  CHECK_FALSE(chunked.ok);
  CHECK(chunked.status == 411);
  auto ws = parse("GET /ws HTTP/1.1\r\nHost: api.example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
  CHECK_FALSE(ws.ok);
  auto absolute = parse("GET https://admin.example.com/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n");
  CHECK_FALSE(absolute.ok);
  CHECK(absolute.reason.find("origin form") != std::string::npos);
  auto slash = parse("GET /v1/reports/..%2fadmin HTTP/1.1\r\nHost: api.example.com\r\n\r\n");
  CHECK_FALSE(slash.ok);
  CHECK(slash.reason.find("encoded slash") != std::string::npos);
  auto connect = parse("CONNECT admin.example.com:443 HTTP/1.1\r\nHost: admin.example.com:443\r\n\r\n");
  CHECK_FALSE(connect.ok);
  auto garbage = parse("GET / HTTP/1.1\r\nHost api.example.com\r\n\r\n");
  CHECK_FALSE(garbage.ok);
  CHECK(garbage.status == 400);
}

TEST_CASE("the server takes the helper's answer only as it would have made it") {
  auto r = parse("GET /v1/reports/q1?x=1 HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: forged\r\n\r\n");
  REQUIRE(r.ok);
  auto back = network::inner_from_json(network::to_json(r), r.forward, api(), "Authorization");
  REQUIRE_MESSAGE(back, (back ? std::string() : back.error().message));
  CHECK(back->path == "/v1/reports/q1");
  CHECK(back->forward == r.forward);
  auto refuse = [&](nlohmann::json meta, std::string forward, const char* why) {
    auto got = network::inner_from_json(meta, std::move(forward), api(), "Authorization");
    REQUIRE_FALSE(got);
    CHECK_MESSAGE(got.error().message.find(why) != std::string::npos, got.error().message);
  };
  const std::string line = "GET /v1/reports/q1?x=1 HTTP/1.1\r\n";
  refuse(network::to_json(r), line + "Host: api.example.com\r\nAuthorization: x\r\n\r\n", "credential header");
  refuse(network::to_json(r), line + "host: admin.example.com\r\n\r\n", "Host");
  refuse(network::to_json(r), line + "Host: api.example.com\r\nHost: api.example.com\r\n\r\n", "Host");
  refuse(network::to_json(r), line + "Host: api.example.com\r\nTransfer-Encoding: chunked\r\n\r\n",
         "Transfer-Encoding");
  refuse(network::to_json(r), "GET /v1/admin HTTP/1.1\r\nHost: api.example.com\r\n\r\n", "request line");
  refuse(network::to_json(r), line + "Host: api.example.com\r\n\r\nGET / HTTP/1.1\r\n\r\n", "end once");
  nlohmann::json climbed = network::to_json(r);
  climbed["path"] = "/v1/reports/../admin";
  refuse(climbed, line + "Host: api.example.com\r\n\r\n", "normal form");
  nlohmann::json method = network::to_json(r);
  method["method"] = "GET /x";
  refuse(method, line + "Host: api.example.com\r\n\r\n", "method");
  // A refusal keeps its status and a printable reason.
  auto no = network::inner_from_json({{"ok", false}, {"status", 411}, {"reason", "chunked\r\nX: y"}}, "", api(), "");
  REQUIRE(no);
  CHECK(no->status == 411);
  CHECK(no->reason == "chunked??X: y");
  CHECK_FALSE(network::inner_from_json({{"ok", false}, {"status", 200}}, "", api(), ""));
}
