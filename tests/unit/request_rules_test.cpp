// The credential proxy's request rules: targets normalised as the
// destination reads them, the tricks that climb out of a prefix refused or
// resolved inside it, and the rules' verdicts.
#include <doctest/doctest.h>

#include "server/network/request_rules.h"

namespace {

std::string norm(std::string_view target) {
  auto t = network::normalise_target(target);
  REQUIRE_MESSAGE(t, (std::string(target) + ": " + (t ? std::string() : t.error().message)));
  return t->path + t->query;
}

std::string refused(std::string_view target) {
  auto t = network::normalise_target(target);
  REQUIRE_MESSAGE(!t, (std::string(target) + " was let through as " + (t ? t->path : std::string())));
  return t.error().message;
}

const std::vector<network::RequestRule> kRules = {{"api.example.com", {"GET", "POST"}, {"/v1/reports/", "/v1/status"}}};

}  // namespace

TEST_CASE("targets are normalised: dot segments, empty segments, escapes") {
  CHECK(norm("/") == "/");
  CHECK(norm("/v1/reports/q1?x=1&y=%2F") == "/v1/reports/q1?x=1&y=%2F");
  CHECK(norm("/v1/reports/../admin") == "/v1/admin");
  CHECK(norm("/v1/reports/%2e%2e/admin") == "/v1/admin");
  CHECK(norm("/v1/reports/%2E%2E/%2e%2E/admin") == "/admin");
  CHECK(norm("//admin") == "/admin");
  CHECK(norm("/v1//reports///q1") == "/v1/reports/q1");
  CHECK(norm("/v1/./reports/.") == "/v1/reports/");
  CHECK(norm("/v1/reports/a/..") == "/v1/reports/");
  CHECK(norm("/v1/%7ereports/%41") == "/v1/~reports/A");
  CHECK(norm("/v1/a%20b/%c3%a9") == "/v1/a%20b/%C3%A9");
}

TEST_CASE("what cannot be normalised safely is refused, saying why") {
  CHECK(refused("/v1/reports/..%2fadmin").find("encoded slash") != std::string::npos);
  CHECK(refused("/v1/reports%2F..%2Fadmin").find("encoded slash") != std::string::npos);
  CHECK(refused("/v1/reports/%5c..").find("encoded slash") != std::string::npos);
  CHECK(refused("/v1/reports;/../admin").find("';'") != std::string::npos);
  CHECK(refused("/v1/reports/%3b/admin").find("';'") != std::string::npos);
  CHECK(refused("/v1/reports/%00").find("control") != std::string::npos);
  CHECK(refused("/v1/reports\\..\\admin").find("backslash") != std::string::npos);
  CHECK(refused("/..").find("above the root") != std::string::npos);
  CHECK(refused("/v1/../../etc").find("above the root") != std::string::npos);
  CHECK(refused("/v1/%zz").find("not an escape") != std::string::npos);
  CHECK(refused("/v1/%4").find("not an escape") != std::string::npos);
  CHECK(refused("http://other.example/").find("origin form") != std::string::npos);
  CHECK(refused("*").find("origin form") != std::string::npos);
  CHECK(refused("/a b").find("escaped") != std::string::npos);
  CHECK(refused("/a#frag").find("fragment") != std::string::npos);
  CHECK(refused("/a?b c").find("query") != std::string::npos);
  CHECK(refused("/" + std::string(9000, 'a')).find("8 KiB") != std::string::npos);
}

TEST_CASE("prefixes cover their own segments only") {
  CHECK(network::under_prefix("/v1/reports/q1", "/v1/reports/"));
  CHECK_FALSE(network::under_prefix("/v1/reports", "/v1/reports/"));
  CHECK(network::under_prefix("/v1/status", "/v1/status"));
  CHECK(network::under_prefix("/v1/status/x", "/v1/status"));
  CHECK_FALSE(network::under_prefix("/v1/statusx", "/v1/status"));
  CHECK_FALSE(network::under_prefix("/v1/admin", "/v1/reports/"));
  CHECK(network::under_prefix("/anything", "/"));
  CHECK(network::check_prefix("/v1/reports/"));
  CHECK_FALSE(network::check_prefix("/v1/../reports/"));
  CHECK_FALSE(network::check_prefix("v1/reports"));
  CHECK_FALSE(network::check_prefix("/v1//reports"));
  CHECK_FALSE(network::check_prefix("/v1/reports?x"));
}

TEST_CASE("the rules let listed methods and paths through, and say why not") {
  CHECK(network::refusal(kRules, "api.example.com", "GET", "/v1/reports/q1").empty());
  CHECK(network::refusal(kRules, "api.example.com", "POST", "/v1/status").empty());
  CHECK(network::refusal(kRules, "api.example.com", "DELETE", "/v1/reports/q1") ==
        "method DELETE is not allowed for api.example.com by the network profile");
  CHECK(network::refusal(kRules, "api.example.com", "GET", "/v1/admin") ==
        "path /v1/admin is not under an allowed prefix for api.example.com");
  CHECK(network::refusal(kRules, "api.example.com", "get", "/v1/reports/q1").find("method get") == 0);
  // A host without rules: only the credential applies.
  CHECK(network::refusal(kRules, "other.example.com", "DELETE", "/x").empty());
  // Through normalisation: the trick lands outside the prefix and is refused.
  auto t = network::normalise_target("/v1/reports/%2e%2e/admin");
  REQUIRE(t);
  CHECK_FALSE(network::refusal(kRules, "api.example.com", "GET", t->path).empty());
}
