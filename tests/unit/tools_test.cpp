// The tools over a fake broker (tests/fakes/fake_broker.h): what run_code,
// upload_input and the workspace tools ask the broker for, what they answer
// with its results and errors, and that POST /jobs parses run_code's
// arguments with the same checks and texts (tools/job_request.h).
#include <doctest/doctest.h>

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "server/policy/policy.h"
#include "server/store/store.h"
#include "tests/fakes/fake_broker.h"
#include "tools/job_request.h"
#include "tools/registry.h"
#include "tests/unit/paths.h"

using nlohmann::json;

namespace {

struct Fixture {
  std::string dir;
  policy::Policy policy;
  std::unique_ptr<store::Store> store;
  fakes::FakeBroker broker;
  std::unique_ptr<tools::Registry> registry;

  explicit Fixture(fakes::FakeBroker::Runner runner = {}, fakes::FakeBroker::MediaType media = {})
      : broker(std::move(runner), std::move(media)) {
    char tmpl[] = "/tmp/throwbox-tools-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    auto p = policy::load_file(unit::source_path("/policies/default.json"));
    REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
    policy = std::move(*p);
    policy.network.profiles["web"] = policy::NetworkProfile{"web", "", {"example.org:443"}};
    store = std::make_unique<store::Store>(dir);
    registry = std::make_unique<tools::Registry>(tools::make_registry(policy));
  }
  ~Fixture() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  json call(const std::string& tool, const json& args, const std::string& tenant = "alice") {
    auto t = registry->find(tool);
    REQUIRE(t);
    tools::CallContext ctx{tenant, policy, *store, broker, nullptr, {}, nullptr};
    return t->call(args, ctx).to_json();
  }
};

std::string error_text(const json& result) {
  REQUIRE(result.value("isError", false));
  return result["content"][0]["text"].get<std::string>();
}

broker::JobResult completed(const std::string& job_id, const std::string& out) {
  broker::JobResult r;
  r.job_id = job_id;
  r.outcome.status = sandbox::Status::completed;
  r.outcome.exited = true;
  r.outcome.stdout_text = out;
  return r;
}

}  // namespace

TEST_CASE("run_code hands the broker every argument, and the caller's tenant") {
  Fixture f([](const broker::JobRequest& r) { return completed(std::string(32, 'a'), r.code); });
  json result = f.call("run_code",
                       {{"runtime", "python"},
                        {"code", "print(1)"},
                        {"input_ids", {"in1", "in2"}},
                        {"timeout_s", 2.5},
                        {"idempotency_key", "k-1"},
                        {"network", "web"},
                        {"workspace_id", "w1"},
                        {"artifact_ids", {"a1"}}},
                       "bob");
  CHECK_FALSE(result.value("isError", false));
  CHECK(result["structuredContent"]["stdout"] == "print(1)");
  CHECK(result["structuredContent"]["status"] == "completed");
  auto seen = f.broker.requests();
  REQUIRE(seen.size() == 1);
  const broker::JobRequest& r = seen[0];
  CHECK(r.tenant == "bob");
  CHECK(r.runtime == "python");
  CHECK(r.code == "print(1)");
  CHECK(r.input_ids == std::vector<std::string>{"in1", "in2"});
  REQUIRE(r.timeout_s.has_value());
  CHECK(*r.timeout_s == doctest::Approx(2.5));
  CHECK(r.idempotency_key == "k-1");
  CHECK(r.network == "web");
  CHECK(r.workspace_id == "w1");
  CHECK(r.artifact_ids == std::vector<std::string>{"a1"});
}

TEST_CASE("run_code refuses a bad argument by name and never asks the broker") {
  Fixture f([](const broker::JobRequest&) { return completed(std::string(32, 'a'), ""); });
  struct Case {
    json args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {json::array(), "arguments: must be an object"},
      {{{"code", "x"}}, "runtime: required, must be a string naming a runtime"},
      {{{"runtime", 1}, {"code", "x"}}, "runtime: required, must be a string naming a runtime"},
      {{{"runtime", "python"}}, "code: required, must be a string holding the program"},
      {{{"runtime", "python"}, {"code", "x"}, {"input_ids", "in1"}}, "input_ids: must be an array of input_id strings"},
      {{{"runtime", "python"}, {"code", "x"}, {"input_ids", {1}}}, "input_ids: must be an array of input_id strings"},
      {{{"runtime", "python"}, {"code", "x"}, {"timeout_s", "5"}}, "timeout_s: must be a number of seconds"},
      {{{"runtime", "python"}, {"code", "x"}, {"timeout_s", 0}}, "timeout_s: must be greater than 0"},
      {{{"runtime", "python"}, {"code", "x"}, {"idempotency_key", ""}},
       "idempotency_key: must be a string of 1-128 characters"},
      {{{"runtime", "python"}, {"code", "x"}, {"idempotency_key", std::string(129, 'k')}},
       "idempotency_key: must be a string of 1-128 characters"},
      {{{"runtime", "python"}, {"code", "x"}, {"workspace_id", 7}},
       "workspace_id: must be a string from open_workspace"},
      {{{"runtime", "python"}, {"code", "x"}, {"artifact_ids", {{"a", 1}}}},
       "artifact_ids: must be an array of artifact_id strings"},
      {{{"runtime", "python"}, {"code", "x"}, {"network", ""}}, "network: must be the name of a network profile"},
      {{{"runtime", "python"}, {"code", "x"}, {"stdin", "y"}}, "stdin: unknown argument"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.args.dump());
    CHECK(error_text(f.call("run_code", c.args)) == c.message);
  }
  CHECK(f.broker.requests().empty());
}

TEST_CASE("POST /jobs and run_code share one parse: the same texts, and the HTTP API's narrower fields") {
  const std::vector<json> shared = {
      {{"code", "x"}},
      {{"runtime", "python"}},
      {{"runtime", "python"}, {"code", "x"}, {"input_ids", {1}}},
      {{"runtime", "python"}, {"code", "x"}, {"timeout_s", -1}},
      {{"runtime", "python"}, {"code", "x"}, {"idempotency_key", 5}},
  };
  for (const json& args : shared) {
    CAPTURE(args.dump());
    auto mcp = tools::parse_job_request(args, "alice", tools::kRunCodeFields);
    auto http = tools::parse_job_request(args, "alice", tools::kHttpJobFields);
    REQUIRE_FALSE(mcp.ok());
    REQUIRE_FALSE(http.ok());
    CHECK(mcp.error().message == http.error().message);
    CHECK(http.error().code == util::ErrorCode::kInvalidArgument);
  }
  for (const char* field : {"network", "workspace_id", "artifact_ids"}) {
    json args = {{"runtime", "python"}, {"code", "x"}, {field, "v"}};
    auto http = tools::parse_job_request(args, "alice", tools::kHttpJobFields);
    REQUIRE_FALSE(http.ok());
    CHECK(http.error().message == std::string(field) + ": unknown argument");
  }
  auto ok = tools::parse_job_request({{"runtime", "python"}, {"code", "x"}, {"timeout_s", 3}}, "carol",
                                     tools::kHttpJobFields);
  REQUIRE(ok.ok());
  CHECK(ok->tenant == "carol");
  CHECK(ok->timeout_s.value_or(0) == doctest::Approx(3));
}

TEST_CASE("run_code answers the broker's refusal as a tool error the model can read") {
  Fixture f([](const broker::JobRequest&) -> util::Result<broker::JobResult> {
    return util::make_error(util::ErrorCode::kBusy, "busy: the server's job queue is full; retry later");
  });
  CHECK(error_text(f.call("run_code", {{"runtime", "python"}, {"code", "x"}})) ==
        "busy: the server's job queue is full; retry later");
}

TEST_CASE("run_code links each artifact that left the gate, and none that did not") {
  Fixture f([](const broker::JobRequest&) {
    broker::JobResult r = completed(std::string(32, 'b'), "");
    broker::ArtifactSummary kept;
    kept.artifact_id = "art1";
    kept.name = "chart.png";
    kept.media_type = "image/png";
    kept.size = 10;
    kept.verdict = artifacts::VerdictKind::kAccepted;
    kept.reason = "an image";
    broker::ArtifactSummary refused;
    refused.name = "run.exe";
    refused.reason = "no extension .exe is allowed";
    r.artifacts = {kept, refused};
    return r;
  });
  json result = f.call("run_code", {{"runtime", "python"}, {"code", "x"}});
  std::vector<json> links;
  for (auto& item : result["content"])
    if (item["type"] == "resource_link") links.push_back(item);
  REQUIRE(links.size() == 1);
  CHECK(links[0]["uri"] == store::artifact_uri("art1"));
  CHECK(links[0]["name"] == "chart.png");
  CHECK(links[0]["mimeType"] == "image/png");
  REQUIRE(result["structuredContent"]["artifacts"].size() == 2);
  CHECK(result["structuredContent"]["artifacts"][1]["artifact_id"].is_null());
  CHECK(result["structuredContent"]["artifacts"][1]["verdict"] == "rejected");
}

TEST_CASE("upload_input records the type the broker found for the bytes") {
  Fixture f({}, [](const std::string& name, const std::string& content) {
    return name == "data.csv" && content == "a,b\n" ? "text/csv" : "application/octet-stream";
  });
  json result = f.call("upload_input", {{"name", "data.csv"}, {"content", "a,b\n"}});
  CHECK_FALSE(result.value("isError", false));
  CHECK(result["structuredContent"]["media_type"] == "text/csv");
  CHECK(result["structuredContent"]["size"] == 4);
}

TEST_CASE("the workspace tools pass the broker's answers through") {
  Fixture f;
  CHECK(error_text(f.call("open_workspace", json::object())) == "the fake broker keeps no workspaces");
  CHECK(error_text(f.call("close_workspace", {{"workspace_id", "w1"}})).find(broker::kUnknownWorkspace) !=
        std::string::npos);
}
