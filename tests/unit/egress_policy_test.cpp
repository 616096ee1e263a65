// A network profile's credentials and rules as the policy loader reads them:
// the secret read from its file (which nobody else may read) and never
// printed, every host one the profile allows, headers the proxy may set,
// rules of upper-case methods and normalised path prefixes.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include "server/policy/policy.h"
#include "tests/unit/temp_dir.h"

using nlohmann::json;

namespace {

json doc_with(const json& credentials, const json& rules) {
  json d{{"version", 1},
         {"runtimes", {{"sh", {{"command", json::array({"/bin/sh"})}, {"code_file", "main.sh"}}}}},
         {"sandbox", {{"readonly_paths", json::array({"/usr"})}}}};
  json& p = d["network"]["profiles"]["reports"];
  p["allow"] = {"api.example.com:443", "files.example.com:443"};
  if (!credentials.is_null()) p["credentials"] = credentials;
  if (!rules.is_null()) p["rules"] = rules;
  return d;
}

std::string error_of(const json& doc) {
  auto r = policy::parse(doc, "test.json");
  REQUIRE_FALSE(r);
  return r.error().message;
}

struct Secrets : unit::TempDir {
  std::string key;
  Secrets() : unit::TempDir("egress-policy", 0755) { key = write("key", "s3cret-value\n", 0600); }
};

json credential(const std::string& file, const std::string& host = "api.example.com") {
  return {{"host", host}, {"header", "Authorization"}, {"value_file", file}, {"value_prefix", "Bearer "}};
}

const json kRules =
    json::array({{{"host", "api.example.com"}, {"methods", {"GET", "POST"}}, {"paths", {"/v1/reports/"}}}});

}  // namespace

TEST_CASE("a profile with a credential and rules loads; the secret stays out of the effective policy") {
  Secrets s;
  auto p = policy::parse(doc_with(json::array({credential(s.key)}), kRules), "test.json");
  REQUIRE_MESSAGE(p, (p ? "" : p.error().message));
  const auto& prof = p->network.profiles.at("reports");
  REQUIRE(prof.credentials.size() == 1);
  CHECK(prof.credentials[0].value == "Bearer s3cret-value");
  CHECK(prof.credentials[0].port == 443);
  REQUIRE(prof.rules.size() == 1);
  CHECK(prof.rules[0].paths == std::vector<std::string>{"/v1/reports/"});
  const std::string effective = policy::effective_json(*p).dump();
  CHECK(effective.find("s3cret") == std::string::npos);
  CHECK(effective.find(s.key) != std::string::npos);
  // What effective_json prints loads again, the secret read again.
  auto again = policy::parse(policy::effective_json(*p), "again.json");
  REQUIRE_MESSAGE(again, (again ? "" : again.error().message));
  CHECK(again->network.profiles.at("reports").credentials[0].value == "Bearer s3cret-value");
}

TEST_CASE("a secret file that is missing, readable by others or not one line is refused, naming it") {
  Secrets s;
  const std::string key = "test.json: network.profiles.reports.credentials[0].value_file: ";
  CHECK(error_of(doc_with(json::array({credential(s.path + "/nothing")}), nullptr)) ==
        key + s.path + "/nothing: is missing");
  ::chmod(s.key.c_str(), 0644);
  CHECK(error_of(doc_with(json::array({credential(s.key)}), nullptr)) ==
        key + s.key + ": may be read or changed by others (mode 644): chmod o-rwx,g-w");
  ::chmod(s.key.c_str(), 0640);  // its group may read it: the packaged service's way
  CHECK(policy::parse(doc_with(json::array({credential(s.key)}), nullptr), "t"));
  const std::string two = s.write("two", "a\nb\n", 0600);
  CHECK(error_of(doc_with(json::array({credential(two)}), nullptr)).find("a second line") != std::string::npos);
  const std::string empty = s.write("empty", "\n", 0600);
  CHECK(error_of(doc_with(json::array({credential(empty)}), nullptr)).find("is empty") != std::string::npos);
  CHECK(error_of(doc_with(json::array({credential("relative/key")}), nullptr)).find("canonical absolute path") !=
        std::string::npos);
}

TEST_CASE("credentials name an allowed host and a header the proxy may set") {
  Secrets s;
  const std::string at = "test.json: network.profiles.reports.credentials[0]";
  CHECK(error_of(doc_with(json::array({credential(s.key, "other.example.com")}), nullptr)) ==
        at + ".host: \"other.example.com:443\" is not in network.profiles.reports.allow");
  CHECK(error_of(doc_with(json::array({credential(s.key, "API.example.com")}), nullptr)).find("lower case") !=
        std::string::npos);
  json c = credential(s.key);
  c["port"] = 8443;
  CHECK(error_of(doc_with(json::array({c}), nullptr)).find("api.example.com:8443") != std::string::npos);
  for (const char* h : {"Host", "content-length", "Transfer-Encoding", "Bad Header", ""}) {
    json bad = credential(s.key);
    bad["header"] = h;
    CHECK(error_of(doc_with(json::array({bad}), nullptr)).find(".header: must be a header field name") !=
          std::string::npos);
  }
  json prefix = credential(s.key);
  prefix["value_prefix"] = "Bearer\r\nX: y";
  CHECK(error_of(doc_with(json::array({prefix}), nullptr)).find("control character") != std::string::npos);
  json extra = credential(s.key);
  extra["value"] = "inline";
  CHECK(error_of(doc_with(json::array({extra}), nullptr)) == at + ".value: unknown key");
  CHECK(error_of(doc_with(json::array({credential(s.key), credential(s.key)}), nullptr))
            .find("a second credential for api.example.com:443") != std::string::npos);
}

TEST_CASE("rules: upper-case methods, normalised prefixes, an allowed host, one rule a host") {
  const std::string at = "test.json: network.profiles.reports.rules[0]";
  auto rules = [](json methods, json paths, std::string host = "api.example.com") {
    return json::array({{{"host", host}, {"methods", methods}, {"paths", paths}}});
  };
  CHECK(error_of(doc_with(nullptr, rules({"get"}, {"/v1/"}))) ==
        at + ".methods: \"get\" is not a method in upper case");
  CHECK(error_of(doc_with(nullptr, rules({"GET"}, {"/v1/../admin/"}))).find(at + ".paths: \"/v1/../admin/\"") == 0);
  CHECK(error_of(doc_with(nullptr, rules({"GET"}, {"v1/"}))).find(at + ".paths") == 0);
  CHECK(error_of(doc_with(nullptr, rules({"GET"}, json::array()))) == at + ".paths: must list at least one prefix");
  CHECK(error_of(doc_with(nullptr, rules({"GET"}, {"/v1/"}, "evil.example.com"))) ==
        at + ".host: \"evil.example.com\" is not a host network.profiles.reports.allow lists");
  json twice = rules({"GET"}, {"/v1/"});
  twice.push_back(twice[0]);
  CHECK(error_of(doc_with(nullptr, twice)).find("a second rule for api.example.com") != std::string::npos);
  CHECK(policy::parse(doc_with(nullptr, rules({"GET"}, {"/"})), "t"));
}
