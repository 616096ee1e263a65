// Acceptance checks: the policy's checks and their program files, which checks
// a job runs, and how a check's outcome becomes its verdict (never "pass" by
// accident).
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "server/broker/checks.h"
#include "server/policy/policy.h"
#include "server/util/text.h"
#include "tests/unit/temp_dir.h"

using nlohmann::json;

namespace {

struct TempDir : unit::TempDir {
  TempDir() : unit::TempDir("checks", 0755) {}
};

json policy_with(const json& checks, const json& required = json::array()) {
  return json{
      {"version", 1},
      {"runtimes",
       {{"sh", {{"command", json::array({"/bin/sh"})}, {"code_file", "main.sh"}, {"required_checks", required}}}}},
      {"sandbox", {{"readonly_paths", json::array({"/usr"})}}},
      {"checks", checks}};
}

std::string error_of(const json& doc) {
  auto r = policy::parse(doc, "test.json");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == util::ErrorCode::kPolicy);
  return r.error().message;
}

sandbox::Outcome exited(int code, const std::string& out) {
  sandbox::Outcome o;
  o.status = code == 0 ? sandbox::Status::completed : sandbox::Status::failed;
  o.exited = true;
  o.exit_code = code;
  o.stdout_text = out;
  return o;
}

}  // namespace

TEST_CASE("a check is read from the policy: runtime, program, limits") {
  TempDir d;
  const std::string file = d.write("c.sh", "echo '{\"verdict\":\"pass\"}'\n");
  auto p = policy::parse(policy_with({{"totals", {{"runtime", "sh"}, {"code_file", file}, {"timeout_s", 5}}},
                                      {"listing", {{"runtime", "sh"}, {"command", json::array({"/bin/ls", "/job"})}}}},
                                     json::array({"totals"})),
                         "test.json");
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
  const policy::Check* c = p->find_check("totals");
  REQUIRE(c != nullptr);
  CHECK(c->code_file == file);
  CHECK(c->timeout_s == 5);
  CHECK(c->max_output_bytes == 64 * 1024);
  CHECK(p->find_check("listing")->command == std::vector<std::string>{"/bin/ls", "/job"});
  CHECK(p->runtimes.at("sh").required_checks == std::vector<std::string>{"totals"});
  // What policy check prints loads again as the same policy.
  auto again = policy::parse(policy::effective_json(*p), "test.json");
  REQUIRE(again.ok());
  CHECK(again->find_check("totals")->code_file == file);
  CHECK(again->runtimes.at("sh").required_checks == std::vector<std::string>{"totals"});
}

TEST_CASE("a relative code_file is the policy file's neighbour") {
  TempDir d;
  d.write("c.py", "print(1)\n");
  auto p = policy::parse(policy_with({{"near", {{"runtime", "sh"}, {"code_file", "c.py"}}}}), d.path + "/policy.json");
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
  CHECK(p->find_check("near")->code_file == d.path + "/c.py");
}

TEST_CASE("bad checks are refused at load, naming the check") {
  TempDir d;
  const std::string file = d.write("c.sh", "true\n");
  CHECK(error_of(policy_with({{"1st", {{"runtime", "sh"}, {"code_file", file}}}})).find("checks.1st: check names") !=
        std::string::npos);
  CHECK(error_of(policy_with({{"a-b", {{"runtime", "sh"}, {"code_file", file}}}})).find("plain identifiers") !=
        std::string::npos);
  CHECK(error_of(policy_with({{"x", {{"runtime", "ruby"}, {"code_file", file}}}})) ==
        "test.json: checks.x.runtime: \"ruby\" is not a runtime of the policy");
  CHECK(error_of(policy_with({{"x", {{"code_file", file}}}})).find("checks.x.runtime: is required") !=
        std::string::npos);
  CHECK(error_of(policy_with({{"x", {{"runtime", "sh"}}}})).find("checks.x: needs \"command\"") != std::string::npos);
  CHECK(
      error_of(policy_with({{"x", {{"runtime", "sh"}, {"code_file", file}, {"command", json::array({"/bin/true"})}}}}))
          .find("has both") != std::string::npos);
  CHECK(error_of(policy_with({{"x", {{"runtime", "sh"}, {"code_file", d.path + "/missing.sh"}}}}))
            .find("checks.x.code_file: " + d.path + "/missing.sh: open") != std::string::npos);
  CHECK(error_of(policy_with({{"x", {{"runtime", "sh"}, {"command", json::array({"relative"})}}}}))
            .find("checks.x.command: must start with") != std::string::npos);
  CHECK(error_of(policy_with({{"x", {{"runtime", "sh"}, {"code_file", file}, {"colour", "red"}}}})) ==
        "test.json: checks.x.colour: unknown key");
  CHECK(error_of(policy_with({{"x", {{"runtime", "sh"}, {"code_file", file}, {"timeout_s", 0}}}}))
            .find("checks.x.timeout_s") != std::string::npos);
  CHECK(error_of(policy_with(json::object(), json::array({"nope"}))) ==
        "test.json: runtimes.sh.required_checks: \"nope\" is not a check of the policy (checks.nope)");
}

TEST_CASE("a check's program must be one only root or the server's user can change") {
  TempDir d;
  const std::string ok = d.write("ok.py", "print(1)\n", 0644);
  CHECK(policy::read_check_program(ok, 1024).value() == "print(1)\n");
  const std::string writable = d.write("w.py", "print(1)\n", 0664);
  CHECK(policy::read_check_program(writable, 1024).error().message.find("writable by its group or by others") !=
        std::string::npos);
  const std::string other = d.write("o.py", "print(1)\n", 0646);
  CHECK(!policy::read_check_program(other, 1024).ok());
  std::filesystem::create_symlink(ok, d.path + "/link.py");
  CHECK(policy::read_check_program(d.path + "/link.py", 1024).error().message.find("symbolic link") !=
        std::string::npos);
  CHECK(policy::read_check_program(ok, 4).error().message.find("larger than 4 bytes") != std::string::npos);
  CHECK(policy::read_check_program(d.path, 1024).error().message.find("not a regular file") != std::string::npos);
  CHECK(policy::read_check_program("relative.py", 1024).error().message.find("canonical absolute") !=
        std::string::npos);
  // A directory above it that others may write (and is not sticky).
  std::filesystem::create_directory(d.path + "/open");
  ::chmod((d.path + "/open").c_str(), 0777);
  const std::string inside = d.write("open/c.py", "print(1)\n", 0644);
  CHECK(policy::read_check_program(inside, 1024).error().message.find("directory " + d.path + "/open is writable") !=
        std::string::npos);
  // A sticky one (as /tmp is) lets no one replace what another user made there.
  ::chmod((d.path + "/open").c_str(), 01777);
  CHECK(policy::read_check_program(inside, 1024).ok());
  if (::geteuid() == 0) {
    // Owned by someone else: refused even though it is not writable to them.
    const std::string foreign = d.write("f.py", "print(1)\n", 0644);
    REQUIRE(::chown(foreign.c_str(), 4242, 4242) == 0);
    CHECK(policy::read_check_program(foreign, 1024).error().message.find("belongs to uid 4242") != std::string::npos);
  }
}

TEST_CASE("which checks run: the runtime's required ones, then the asked, each once") {
  TempDir d;
  const std::string file = d.write("c.sh", "true\n");
  auto p = policy::parse(
      policy_with({{"a", {{"runtime", "sh"}, {"code_file", file}}}, {"b", {{"runtime", "sh"}, {"code_file", file}}}},
                  json::array({"b"})),
      "test.json");
  REQUIRE(p.ok());
  auto none_asked = broker::checks_to_run(*p, "sh", {});
  REQUIRE(none_asked.ok());
  REQUIRE(none_asked->size() == 1);
  CHECK((*none_asked)[0]->name == "b");
  auto both = broker::checks_to_run(*p, "sh", {"a", "b", "a"});
  REQUIRE(both.ok());
  REQUIRE(both->size() == 2);
  CHECK((*both)[0]->name == "b");
  CHECK((*both)[1]->name == "a");
  auto unknown = broker::checks_to_run(*p, "sh", {"zz"});
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().code == util::ErrorCode::kInvalidArgument);
  CHECK(unknown.error().message == "checks: \"zz\" is not a check of this server; checks: a, b");
}

TEST_CASE("a check's verdict is its last stdout line, and nothing else passes") {
  using broker::check_verdict;
  auto pass = check_verdict(exited(0, "working\n{\"verdict\": \"pass\", \"evidence\": \"totals match\"}\n"), 1024);
  CHECK(pass.verdict == "pass");
  CHECK(pass.evidence == "totals match");
  auto fail = check_verdict(exited(1, "{\"verdict\": \"fail\", \"evidence\": \"tx1 twice\"}\n\n"), 1024);
  CHECK(fail.verdict == "fail");
  CHECK(fail.evidence == "tx1 twice");
  // An earlier verdict line is not the last one.
  CHECK(check_verdict(exited(0, "{\"verdict\": \"pass\"}\ndone\n"), 1024).verdict == "error");
  CHECK(check_verdict(exited(0, ""), 1024).verdict == "error");
  CHECK(check_verdict(exited(0, "{\"verdict\": \"PASS\"}\n"), 1024).verdict == "error");
  CHECK(check_verdict(exited(0, "{\"verdict\": true}\n"), 1024).verdict == "error");
  CHECK(check_verdict(exited(0, "[\"pass\"]\n"), 1024).verdict == "error");
  CHECK(check_verdict(exited(0, "{\"verdict\": \"pass\", \"evidence\": 3}\n"), 1024).verdict == "error");
  // pass with a failing exit contradicts itself
  auto contradicted = check_verdict(exited(2, "{\"verdict\": \"pass\"}\n"), 1024);
  CHECK(contradicted.verdict == "error");
  CHECK(contradicted.evidence == "the check said pass but exited with status 2");
  // past max_output_bytes, or cut by the sandbox
  CHECK(check_verdict(exited(0, std::string(2000, 'x') + "\n{\"verdict\": \"pass\"}\n"), 1024).verdict == "error");
  sandbox::Outcome cut = exited(0, "{\"verdict\": \"pass\"}\n");
  cut.stdout_truncated = true;
  CHECK(check_verdict(cut, 1024).verdict == "error");
  for (auto status : {sandbox::Status::timed_out, sandbox::Status::memory_exceeded, sandbox::Status::cancelled,
                      sandbox::Status::sandbox_error}) {
    sandbox::Outcome o = exited(0, "{\"verdict\": \"pass\"}\n");
    o.status = status;
    CHECK(check_verdict(o, 1024).verdict == "error");
  }
  sandbox::Outcome killed = exited(0, "{\"verdict\": \"pass\"}\n");
  killed.status = sandbox::Status::failed;
  killed.exited = false;
  killed.signal = 9;
  auto k = check_verdict(killed, 1024);
  CHECK(k.verdict == "error");
  CHECK(k.evidence.find("SIGKILL") != std::string::npos);
  // Evidence is bounded.
  auto long_evidence =
      check_verdict(exited(0, "{\"verdict\": \"pass\", \"evidence\": \"" + std::string(10000, 'e') + "\"}\n"), 1 << 20);
  CHECK(long_evidence.verdict == "pass");
  CHECK(long_evidence.evidence.size() < 4200);
}

TEST_CASE("a check's view names the job's files where the check finds them") {
  broker::JobResult r;
  r.job_id = "j1";
  r.outcome = exited(0, "out\n");
  broker::ArtifactSummary kept;
  kept.artifact_id = "a1";
  kept.name = "report/total.csv";
  kept.verdict = artifacts::VerdictKind::kAccepted;
  broker::ArtifactSummary refused;
  refused.name = "evil.html";
  r.artifacts = {kept, refused};
  json v = broker::check_view_json(r, "python", {{"i1", "orders.csv", "abc"}});
  CHECK(v["status"] == "completed");
  CHECK(v["exit_code"] == 0);
  CHECK(v["stdout"] == "out\n");
  CHECK(v["inputs"][0]["path"] == "/job/inputs/orders.csv");
  CHECK(v["artifacts"][0]["path"] == "/job/artifacts/report/total.csv");
  CHECK(v["artifacts"][1]["path"].is_null());
  CHECK(v["artifacts"][1]["verdict"] == "rejected");
}

TEST_CASE("names under a check's /job: a few plain names joined by '/'") {
  CHECK(util::input_path_problem("result.json") == nullptr);
  CHECK(util::input_path_problem("inputs/orders.csv") == nullptr);
  CHECK(util::input_path_problem("artifacts/a/b/c.csv") == nullptr);
  CHECK(util::input_path_problem("artifacts/a/b/c/d/e/f/g.csv") == nullptr);
  CHECK(util::input_path_problem("artifacts/a/b/c/d/e/f/g/h.csv") != nullptr);
  CHECK(util::input_path_problem("inputs/../x") != nullptr);
  CHECK(util::input_path_problem("/abs") != nullptr);
  CHECK(util::input_path_problem("inputs//x") != nullptr);
  CHECK(util::input_path_problem("inputs/") != nullptr);
}
