// HTTP transport pieces that need no socket: the tokens file, bearer headers,
// listen addresses.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "server/transport/auth.h"
#include "server/transport/http.h"
#include "server/transport/http_headers.h"
#include "server/util/crypto.h"

using transport::http::Auth;

TEST_CASE("tokens file: tenant by the token's sha256; comments and blanks ignored") {
  std::string text =
      "# team tokens\n\nalpha " + util::sha256_hex("secret-a") + "\nbeta " + util::sha256_hex("secret-b") + "  # ops\n";
  auto a = Auth::parse(text, "tokens");
  REQUIRE(a.ok());
  CHECK(a->size() == 2);
  CHECK(a->tenant_for("secret-a") == std::optional<std::string>("alpha"));
  CHECK(a->tenant_for("secret-b") == std::optional<std::string>("beta"));
  CHECK_FALSE(a->tenant_for("secret-c"));
  CHECK_FALSE(a->tenant_for(""));
  // The digest in the file is not itself a token.
  CHECK_FALSE(a->tenant_for(util::sha256_hex("secret-a")));
}

TEST_CASE("tokens file errors name the line") {
  CHECK(Auth::parse("alpha\n", "t").error().message == "t:1: expected \"<tenant> <sha256 hex of the token>\"");
  CHECK(Auth::parse("\nAlpha " + std::string(64, 'a') + "\n", "t").error().message ==
        "t:2: tenant names are 1-64 of [a-z0-9_-]");
  CHECK(Auth::parse("alpha abc\n", "t").error().message == "t:1: the digest must be 64 hex digits (sha256)");
  CHECK(Auth::parse("alpha " + std::string(63, 'a') + "g\n", "t").error().message ==
        "t:1: the digest must be 64 hex digits (sha256)");
  CHECK(Auth::parse("# nothing\n", "t").error().message == "t: no token in the file");
}

TEST_CASE("a tokens file may not name a tenant oauth-...: those are OAuth users") {
  const std::string digest(64, 'a');
  CHECK(Auth::parse("oauth-alice " + digest + "\n", "t").error().message ==
        "t:1: tenant \"oauth-alice\": names starting with \"oauth-\" are OAuth users' (--oauth); choose another");
  CHECK(Auth::parse("oauth-sha256-0123 " + digest + "\n", "t").error().code == util::ErrorCode::kAuth);
  CHECK(Auth::parse("oauthalice " + digest + "\n", "t"));
}

TEST_CASE("a tokens file readable by group or others is refused") {
  char path[] = "/tmp/throwbox-tokens-XXXXXX";
  int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  std::string line = "alpha " + util::sha256_hex("t") + "\n";
  REQUIRE(::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()));
  ::close(fd);
  ::chmod(path, 0640);
  auto bad = Auth::load(path);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("chmod 600") != std::string::npos);
  ::chmod(path, 0600);
  CHECK(Auth::load(path).ok());
  ::unlink(path);
}

TEST_CASE("bearer header parsing") {
  using transport::http::bearer_token;
  CHECK(bearer_token("Bearer abc") == std::optional<std::string>("abc"));
  CHECK(bearer_token("bearer  abc ") == std::optional<std::string>("abc"));
  CHECK_FALSE(bearer_token(""));
  CHECK_FALSE(bearer_token("Bearer "));
  CHECK_FALSE(bearer_token("Basic abc"));
  CHECK_FALSE(bearer_token("Bearer a b"));
  CHECK_FALSE(bearer_token("Bearer a\x01"));
  CHECK_FALSE(bearer_token("Bearer " + std::string(5000, 'a')));
}

TEST_CASE("listen addresses and loopback") {
  using transport::http::is_loopback;
  using transport::http::parse_listen;
  auto a = parse_listen("127.0.0.1:8080", {});
  REQUIRE(a.ok());
  CHECK(a->host == "127.0.0.1");
  CHECK(a->port == 8080);
  auto b = parse_listen(":0", {});
  REQUIRE(b.ok());
  CHECK(b->host == "127.0.0.1");
  CHECK(b->port == 0);
  auto c = parse_listen("[::1]:9000", {});
  REQUIRE(c.ok());
  CHECK(c->host == "::1");
  CHECK_FALSE(parse_listen("8080", {}).ok());
  CHECK_FALSE(parse_listen("h:99999", {}).ok());
  CHECK_FALSE(parse_listen("h:-1", {}).ok());
  CHECK(is_loopback("127.0.0.1"));
  CHECK(is_loopback("127.3.2.1"));
  CHECK(is_loopback("::1"));
  CHECK(is_loopback("localhost"));
  CHECK_FALSE(is_loopback("0.0.0.0"));
  CHECK_FALSE(is_loopback("10.0.0.1"));
  CHECK_FALSE(is_loopback("::"));
}

TEST_CASE("the challenge of a server without OAuth says a bearer token is needed, header-safe") {
  CHECK(transport::http::bearer_challenge(transport::http::kBearerTokenNeeded) ==
        "Bearer realm=\"throwbox\", error=\"invalid_token\", error_description=\"this server needs a bearer token "
        "(Authorization: Bearer <token>); it has no OAuth\"");
  // No quote, backslash or control character can end the value or the header.
  CHECK(transport::http::bearer_challenge("a \"b\" \\c\r\nd\x7f\xc3\xa9") ==
        "Bearer realm=\"throwbox\", error=\"invalid_token\", error_description=\"a b cd\"");
  CHECK(transport::http::bearer_challenge(std::string(500, 'x')).size() ==
        std::string(R"(Bearer realm="throwbox", error="invalid_token", error_description="")").size() + 300);
}
