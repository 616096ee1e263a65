// What the server does with what its parser helper says: the framing's caps,
// a child that never answers or answers nonsense, and the checks every answer
// passes (a request head's destination and forwarded head, an inspection's
// verdict, type and content) before the server acts on it. A helper that a
// hostile file took over can say anything; these say what it cannot make the
// server do.
#include <doctest/doctest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "server/artifacts/gate.h"
#include "server/helper/client.h"
#include "server/helper/wire.h"
#include "server/network/head.h"

using helper::Kind;
using helper::Message;
using nlohmann::json;

namespace {

struct Pair {
  int server = -1, helper = -1;
  Pair() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    server = fds[0];
    helper = fds[1];
  }
  ~Pair() {
    if (helper >= 0) ::close(helper);
  }
};

artifacts::Gate csv_gate() {
  artifacts::GatePolicy p;
  p.allowed_media_types = {"text/plain", "text/csv", "image/png"};
  p.file_max_bytes = 1024;
  return artifacts::Gate(p);
}

json inspection(const char* verdict, const char* type, const char* named_as, bool changed = false) {
  return {{"verdict", verdict}, {"reason", "r"}, {"media_type", type}, {"named_as", named_as}, {"changed", changed}};
}

}  // namespace

TEST_CASE("framing: a message reads back as written; a header over a cap or of no known kind is refused") {
  Message m;
  m.kind = Kind::kInspectArtifact;
  m.meta = {{"name", "a.csv"}};
  m.bytes = std::string("x\0y", 3);
  const std::string wire = helper::encode(m);
  auto h = helper::decode_header(std::string_view(wire).substr(0, helper::kHeaderBytes), 3);
  REQUIRE(h);
  CHECK(h->kind == Kind::kInspectArtifact);
  auto back = helper::decode_body(*h, std::string_view(wire).substr(helper::kHeaderBytes, h->meta_bytes),
                                  wire.substr(helper::kHeaderBytes + h->meta_bytes));
  REQUIRE(back);
  CHECK(back->meta == m.meta);
  CHECK(back->bytes == m.bytes);
  CHECK_FALSE(helper::decode_header(std::string_view(wire).substr(0, helper::kHeaderBytes), 2));  // bytes over the cap
  std::string unknown = wire.substr(0, helper::kHeaderBytes);
  unknown[0] = 77;
  CHECK_FALSE(helper::decode_header(unknown, 1 << 20));
  std::string big_meta = wire.substr(0, helper::kHeaderBytes);
  const uint32_t huge = helper::kMetaMaxBytes + 1;
  std::memcpy(big_meta.data() + 4, &huge, 4);
  CHECK_FALSE(helper::decode_header(big_meta, 1 << 20));
  CHECK_FALSE(helper::decode_body(*h, "[1,2]", ""));  // meta must be an object
}

TEST_CASE("a child that never answers is given up at the timeout and killed; a failure answer is an error") {
  {
    Pair p;
    helper::Child child{util::UniqueFd(p.server), util::UniqueFd()};
    Message req;
    req.kind = Kind::kProbe;
    auto r = child.call(req, 100, 0);
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("no answer within 100 ms (killed)") != std::string::npos);
    CHECK_FALSE(child.alive());
    CHECK_FALSE(child.call(req, 100, 0));
  }
  {
    Pair p;
    helper::Child child{util::UniqueFd(p.server), util::UniqueFd()};
    std::thread peer([&] {
      auto got = helper::read_message(p.helper, 0, 1 << 20);
      REQUIRE(got);
      Message fail;
      fail.kind = Kind::kFailure;
      fail.meta = {{"error", "bad\nline"}};
      REQUIRE(helper::write_message(p.helper, fail));
      // Then an answer of the wrong shape: a header announcing more than the caller takes.
      got = helper::read_message(p.helper, 0, 1 << 20);
      Message big;
      big.kind = Kind::kAnswer;
      big.bytes = std::string(64, 'x');
      (void)helper::write_message(p.helper, big);
    });
    Message req;
    req.kind = Kind::kProbe;
    auto r = child.call(req, 5000, 0);
    REQUIRE_FALSE(r);
    CHECK(r.error().message == "parser helper: bad\\nline");
    CHECK(child.alive());  // a failure it reports is its answer
    auto r2 = child.call(req, 5000, 16);
    REQUIRE_FALSE(r2);
    CHECK_FALSE(child.alive());
    peer.join();
  }
}

TEST_CASE("request heads: what the helper parses, and the server's checks of its answer") {
  using network::Head;
  Head c = network::parse_head("CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\n\r\n");
  CHECK(c.kind == Head::Kind::kConnect);
  CHECK(c.dest.text() == "api.example.com:443");
  auto c_back = network::head_from_json(network::to_json(c), "");
  REQUIRE(c_back);
  CHECK(c_back->dest.text() == "api.example.com:443");

  Head a = network::parse_head(
      "GET http://data.test/x?y=1#frag HTTP/1.1\r\nHost: evil.test\r\nProxy-Authorization: k\r\n\r\n");
  REQUIRE(a.kind == Head::Kind::kAbsolute);
  CHECK(a.forward.rfind("GET /x?y=1 HTTP/1.1\r\n", 0) == 0);
  CHECK(a.forward.find("Host: data.test\r\n") != std::string::npos);
  CHECK(a.forward.find("Proxy-Authorization") == std::string::npos);
  CHECK(network::head_from_json(network::to_json(a), a.forward));

  CHECK(network::parse_head("GET /relative HTTP/1.1\r\nHost: x\r\n\r\n").kind == Head::Kind::kMalformed);
  CHECK(network::parse_head("CONNECT 127.1:443 HTTP/1.1\r\n\r\n").kind == Head::Kind::kMalformed);

  // A helper that lies: each answer refused by the server's own checks.
  const json lie = network::to_json(a);
  auto refused = [&](json j, std::string forward = "") { return !network::head_from_json(j, std::move(forward)); };
  CHECK(refused(json{{"kind", "connect"}, {"reason", ""}, {"authority", "127.1:443"}}));
  CHECK(refused(json{{"kind", "connect"}, {"reason", ""}, {"authority", "a.test"}}));  // no port
  CHECK(refused(json{{"kind", "tunnel"}, {"reason", ""}, {"authority", "a.test:1"}}));
  // A second request smuggled on; another Host; an absolute target; nothing.
  CHECK(refused(lie, a.forward + "GET / HTTP/1.1\r\nHost: data.test\r\n\r\n"));
  CHECK(refused(lie, "GET / HTTP/1.1\r\nHost: internal.test\r\n\r\n"));
  CHECK(refused(lie, "GET http://internal.test/ HTTP/1.1\r\nHost: data.test\r\n\r\n"));
  CHECK(refused(lie, ""));
  CHECK(refused(json{{"kind", "absolute"}, {"reason", ""}}, a.forward));
  json reason{{"kind", "malformed"}, {"reason", "a\r\nInjected: header"}, {"authority", ""}};
  auto m = network::head_from_json(reason, "");
  REQUIRE(m);
  CHECK(m->reason == "a??Injected: header");
}

TEST_CASE("inspections: the server serves only what its policy allows, whatever the helper says") {
  const artifacts::Gate gate = csv_gate();
  auto verdict = [&](const json& j, std::string content = "a,b\n", std::string rewritten = "") {
    return gate.finish("out.csv", j, std::move(content), std::move(rewritten));
  };
  CHECK(verdict(inspection("accepted", "text/csv", "text/csv")).verdict == artifacts::VerdictKind::kAccepted);
  CHECK(verdict(inspection("accepted", "text/csv", "text/csv")).content == "a,b\n");  // the file's own bytes
  // A verdict, type or field that is not one: rejected.
  CHECK(verdict(inspection("approved", "text/csv", "text/csv")).verdict == artifacts::VerdictKind::kRejected);
  CHECK(verdict({{"verdict", "accepted"}}).verdict == artifacts::VerdictKind::kRejected);
  auto html = verdict(inspection("accepted", "text/html", "text/html"));
  CHECK(html.verdict == artifacts::VerdictKind::kRejected);
  CHECK(html.reason.find("a type the policy does not serve (text/html)") != std::string::npos);
  CHECK(verdict(inspection("accepted", "application/x-sharedlib", "text/csv")).verdict ==
        artifacts::VerdictKind::kRejected);
  // Rewritten content: only with a sanitized verdict, within the size cap.
  CHECK(verdict(inspection("accepted", "text/csv", "text/csv", true), "a,b\n", "x").verdict ==
        artifacts::VerdictKind::kRejected);
  CHECK(verdict(inspection("sanitized", "text/csv", "text/csv", true), "a,b\n", std::string(2048, 'x')).verdict ==
        artifacts::VerdictKind::kRejected);
  auto fixed = verdict(inspection("sanitized", "text/csv", "text/csv", true), "=1,b\n", "'=1,b\n");
  CHECK(fixed.verdict == artifacts::VerdictKind::kSanitized);
  CHECK(fixed.content == "'=1,b\n");
  // The name's extension is still the server's: a PNG named .csv is refused.
  CHECK(verdict(inspection("accepted", "image/png", "image/png")).verdict == artifacts::VerdictKind::kRejected);
  // A reason reaches the result escaped and bounded.
  json long_reason = inspection("rejected", "", "");
  long_reason["reason"] = std::string(1000, 'r') + "\n";
  auto r = verdict(long_reason);
  CHECK(r.reason.size() <= 400);
  CHECK(r.reason.find('\n') == std::string::npos);
}
