// Policy validation: fail closed, and every error names the offending key.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "server/policy/policy.h"
#include "server/util/fs.h"
#include "tests/unit/temp_dir.h"
#include "tests/unit/paths.h"

using nlohmann::json;

namespace {

const std::string kDefaultPolicy = unit::source_path("/policies/default.json");
const char* kSource = "test.json";

json default_doc() {
  std::ifstream in(kDefaultPolicy);
  REQUIRE(in.good());
  return json::parse(in);
}

// A minimal valid policy that depends only on /bin/sh.
json minimal_doc() {
  return json{{"version", 1},
              {"runtimes", {{"sh", {{"command", json::array({"/bin/sh"})}, {"code_file", "main.sh"}}}}},
              {"sandbox", {{"readonly_paths", json::array({"/usr"})}}}};
}

// Parses and returns the error message; fails the test when parsing succeeds.
std::string error_of(const json& doc) {
  auto r = policy::parse(doc, kSource);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == util::ErrorCode::kPolicy);
  return r.error().message;
}

struct TempDir : unit::TempDir {
  TempDir() : unit::TempDir("policy") {}
};

}  // namespace

TEST_CASE("bundled default policy parses with python and bash available") {
  REQUIRE(::access("/usr/bin/python3", X_OK) == 0);
  REQUIRE(::access("/bin/bash", X_OK) == 0);
  auto r = policy::load_file(kDefaultPolicy);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  const policy::Policy& p = *r;
  CHECK(p.source == kDefaultPolicy);
  const policy::Runtime* py = p.find_runtime("python");
  REQUIRE(py != nullptr);
  CHECK(py->command == std::vector<std::string>{"/usr/bin/python3", "-I"});
  CHECK(py->code_file == "main.py");
  CHECK(py->available);
  const policy::Runtime* sh = p.find_runtime("bash");
  REQUIRE(sh != nullptr);
  CHECK(sh->code_file == "main.sh");
  // node is optional: present or not, it never makes the load fail.
  CHECK(p.runtimes.count("node") == 1);
  CHECK(p.runtimes.at("node").optional);
  CHECK((p.find_runtime("node") != nullptr) == (::access("/usr/bin/node", X_OK) == 0));
  CHECK(p.limits.timeout_s_default == 10);
  CHECK(p.limits.timeout_s_max == 60);
  CHECK(p.limits.stdout_max_bytes == 65536);
  CHECK(p.server.json_max_depth == 64);
  CHECK(p.server.message_max_bytes == 11250348);  // derived: 8 MiB as base64 + 64 KiB
  CHECK(p.server.http_connections_per_address_max == 128);
  CHECK(p.sandbox.uid_first == 1879048192);
  CHECK(p.sandbox.uid_count == 65536);
  CHECK(p.sandbox.env.at("HOME") == "/work");
  CHECK(p.find_runtime("ruby") == nullptr);
}

TEST_CASE("default_path: /etc/throwbox first, then the installed and build-tree copies beside the binary") {
  auto c = policy::default_path_candidates();
  REQUIRE(c.size() == 3);
  CHECK(c[0] == "/etc/throwbox/policy.json");
  CHECK(c[1].ends_with("/../share/throwbox/policies/default.json"));
  CHECK(c[2].ends_with("/../policies/default.json"));
  // This test binary is in build/tests: no copy beside it, so the first
  // readable is /etc's (a host with the package) or none, named by the first.
  const std::string d = policy::default_path();
  CHECK((d == c[0] || ::access(d.c_str(), R_OK) == 0));
}

TEST_CASE("minimal policy parses with defaults") {
  auto r = policy::parse(minimal_doc(), kSource);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  CHECK(r->limits.timeout_s_max == 60);
  CHECK(r->sandbox.uid_first == 1879048192);
  CHECK(r->available_runtimes() == std::vector<std::string>{"sh"});
}

TEST_CASE("unknown top-level key is an error naming it") {
  json d = minimal_doc();
  d["sandboxx"] = json::object();
  CHECK(error_of(d) == "test.json: sandboxx: unknown key");
}

TEST_CASE("policy that is not an object") { CHECK(error_of(json::array()) == "test.json: policy: must be an object"); }

TEST_CASE("unknown key in limits is named with its path") {
  json d = minimal_doc();
  d["limits"] = {{"bogus", 1}};
  CHECK(error_of(d) == "test.json: limits.bogus: unknown key");
}

TEST_CASE("unknown key in limits.timeout_s, server, sandbox and a runtime") {
  json d = minimal_doc();
  d["limits"] = {{"timeout_s", {{"default", 1}, {"maximum", 2}}}};
  CHECK(error_of(d) == "test.json: limits.timeout_s.maximum: unknown key");

  d = minimal_doc();
  d["server"] = {{"port", 80}};
  CHECK(error_of(d) == "test.json: server.port: unknown key");

  d = minimal_doc();
  d["sandbox"]["network"] = true;
  CHECK(error_of(d) == "test.json: sandbox.network: unknown key");

  d = minimal_doc();
  d["runtimes"]["sh"]["args"] = json::array();
  CHECK(error_of(d) == "test.json: runtimes.sh.args: unknown key");
}

TEST_CASE("server.message_max_bytes follows from the input and code caps") {
  // Left out: the larger of 4 MiB and what the caps need.
  auto m = policy::parse(minimal_doc(), kSource);
  REQUIRE(m.ok());
  CHECK(m->limits.input_max_bytes == 8388608);
  CHECK(policy::message_bytes_needed(m->limits) == 2796203ull * 4 + 65536);  // ceil(8 MiB / 3) * 4 + 64 KiB
  CHECK(m->server.message_max_bytes == 11250348);
  json d = minimal_doc();
  d["limits"] = {{"input_max_bytes", 1000u}};
  CHECK(policy::parse(d, kSource)->server.message_max_bytes == 4194304);
  // The code cap counts at 3 bytes per byte (JSON escapes).
  d["limits"] = {{"input_max_bytes", 1000u}, {"code_max_bytes", 16u << 20}};
  CHECK(policy::parse(d, kSource)->server.message_max_bytes == 3 * (16u << 20) + 65536);
  // An input cap that is not a multiple of 3 rounds its base64 up.
  d["limits"] = {{"input_max_bytes", 3145729u}};
  CHECK(policy::parse(d, kSource)->server.message_max_bytes == 1048577ull * 4 + 65536);

  // Set: at least what the caps need, and the message says why.
  d = minimal_doc();
  d["server"] = {{"message_max_bytes", 4194304u}};
  CHECK(error_of(d) ==
        "test.json: server.message_max_bytes: must be at least 11250348: an upload of limits.input_max_bytes "
        "(8388608) as base64 and a run_code of limits.code_max_bytes (262144) with JSON escapes must fit in one "
        "message; leave the key out to have it derived");
  d["server"] = {{"message_max_bytes", 11250347u}};
  CHECK(error_of(d).find("server.message_max_bytes: must be at least 11250348") != std::string::npos);
  d["server"] = {{"message_max_bytes", 11250348u}};
  CHECK(policy::parse(d, kSource).ok());
  d["limits"] = {{"input_max_bytes", 1000u}};
  d["server"] = {{"message_max_bytes", 4096u}};
  CHECK(error_of(d).find("server.message_max_bytes: must be at least 851968") != std::string::npos);
  d["limits"] = {{"input_max_bytes", 1000u}, {"code_max_bytes", 1024u}};
  d["server"] = {{"message_max_bytes", 3072u + 65536}};
  CHECK(policy::parse(d, kSource).ok());
  d["server"] = {{"message_max_bytes", 3072u + 65535}};
  CHECK(error_of(d).find("server.message_max_bytes: must be at least 68608") != std::string::npos);

  // The largest input whose base64 fits the largest message; one byte more is refused, saying why.
  d = minimal_doc();
  d["limits"] = {{"input_max_bytes", 50282496u}};
  auto top = policy::parse(d, kSource);
  REQUIRE(top.ok());
  CHECK(top->server.message_max_bytes == 67108864);
  d["limits"] = {{"input_max_bytes", 50282497u}};
  CHECK(error_of(d) ==
        "test.json: limits.input_max_bytes: must be between 1 and 50282496: a larger upload, as base64 in one "
        "message, would not fit the largest server.message_max_bytes (67108864)");
}

TEST_CASE("every bundled policy's message cap holds its own input and code caps") {
  for (const char* name : {"default", "strict", "data"}) {
    CAPTURE(std::string(name));
    auto r = policy::load_file(unit::source_path("/policies/") + name + ".json");
    REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
    CHECK(r->server.message_max_bytes >= policy::message_bytes_needed(r->limits));
  }
}

TEST_CASE("version must be 1") {
  json d = minimal_doc();
  d["version"] = 2;
  CHECK(error_of(d) == "test.json: version: must be 1");
  d["version"] = "1";
  CHECK(error_of(d) == "test.json: version: must be 1");
  d.erase("version");
  CHECK(error_of(d) == "test.json: version: must be 1");
}

TEST_CASE("wrong type for a byte limit names the key") {
  json d = minimal_doc();
  d["limits"] = {{"stdout_max_bytes", "x"}};
  CHECK(error_of(d) == "test.json: limits.stdout_max_bytes: must be a non-negative integer");
  d["limits"] = {{"stdout_max_bytes", -1}};
  CHECK(error_of(d) == "test.json: limits.stdout_max_bytes: must be a non-negative integer");
  d["limits"] = {{"stdout_max_bytes", 65536.5}};
  CHECK(error_of(d) == "test.json: limits.stdout_max_bytes: must be a non-negative integer");
}

TEST_CASE("value above its ceiling is refused (a typo must not become a huge tmpfs)") {
  json d = minimal_doc();
  d["limits"] = {{"tmp_max_bytes", 1ULL << 40}};
  std::string e = error_of(d);
  CHECK(e.find("test.json: limits.tmp_max_bytes: must be between 1048576 and 4294967296") == 0);

  d["limits"] = {{"stdout_max_bytes", 100u}};  // below the floor
  CHECK(error_of(d) == "test.json: limits.stdout_max_bytes: must be between 1024 and 67108864");

  d = minimal_doc();
  d["server"] = {{"message_max_bytes", 1ULL << 30}};
  CHECK(error_of(d).find("test.json: server.message_max_bytes: must be between") == 0);

  d = minimal_doc();
  d["server"] = {{"json_max_depth", 100000u}};
  CHECK(error_of(d) == "test.json: server.json_max_depth: must be between 4 and 256");

  // More than the server holds in all, or none at all, is a mistake.
  for (unsigned bad : {0u, 513u}) {
    d = minimal_doc();
    d["server"] = {{"http_connections_per_address_max", bad}};
    CHECK(error_of(d) == "test.json: server.http_connections_per_address_max: must be between 1 and 512");
  }

  d = minimal_doc();
  d["limits"] = {{"timeout_s", {{"max", 86400}}}};
  CHECK(error_of(d) == "test.json: limits.timeout_s.max: must be > 0 and <= 3600");
}

TEST_CASE("timeout values must be positive numbers") {
  json d = minimal_doc();
  d["limits"] = {{"timeout_s", {{"default", 0}}}};
  CHECK(error_of(d) == "test.json: limits.timeout_s.default: must be > 0 and <= 3600");
  d["limits"] = {{"timeout_s", {{"default", "10"}}}};
  CHECK(error_of(d) == "test.json: limits.timeout_s.default: must be a number of seconds");
}

TEST_CASE("timeout default above max is an error") {
  json d = minimal_doc();
  d["limits"] = {{"timeout_s", {{"default", 30}, {"max", 20}}}};
  CHECK(error_of(d) == "test.json: limits.timeout_s.default: exceeds limits.timeout_s.max");
  // Against the built-in max (60) when only the default is given.
  d["limits"] = {{"timeout_s", {{"default", 61}}}};
  CHECK(error_of(d) == "test.json: limits.timeout_s.default: exceeds limits.timeout_s.max");
}

TEST_CASE("runtime command must start with an absolute interpreter path") {
  json d = minimal_doc();
  d["runtimes"]["sh"]["command"] = {"sh", "-e"};
  CHECK(error_of(d) == "test.json: runtimes.sh.command: must start with an absolute interpreter path");
  d["runtimes"]["sh"]["command"] = json::array();
  CHECK(error_of(d) == "test.json: runtimes.sh.command: must start with an absolute interpreter path");
  d["runtimes"]["sh"]["command"] = "/bin/sh";
  CHECK(error_of(d) == "test.json: runtimes.sh.command: must be an array of strings");
  d["runtimes"]["sh"]["command"] = {"/bin/sh", ""};
  CHECK(error_of(d) == "test.json: runtimes.sh.command: must contain only non-empty strings");
  d["runtimes"]["sh"].erase("command");
  CHECK(error_of(d) == "test.json: runtimes.sh.command: is required");
}

TEST_CASE("missing interpreter that is not optional is an error") {
  json d = minimal_doc();
  d["runtimes"]["ghost"] = {{"command", json::array({"/nonexistent/ghost"})}, {"code_file", "main.g"}};
  std::string e = error_of(d);
  CHECK(e.find("test.json: runtimes.ghost.command: interpreter /nonexistent/ghost is not executable") == 0);
  CHECK(e.find("\"optional\": true") != std::string::npos);
}

TEST_CASE("missing optional interpreter loads with the runtime unavailable") {
  json d = minimal_doc();
  d["runtimes"]["ghost"] = {
      {"command", json::array({"/nonexistent/ghost"})}, {"code_file", "main.g"}, {"optional", true}};
  auto r = policy::parse(d, kSource);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  REQUIRE(r->runtimes.count("ghost") == 1);
  CHECK_FALSE(r->runtimes.at("ghost").available);
  CHECK(r->find_runtime("ghost") == nullptr);
  CHECK(r->find_runtime("sh") != nullptr);
  CHECK(r->available_runtimes() == std::vector<std::string>{"sh"});
}

TEST_CASE("no available runtime at all is an error") {
  json d = minimal_doc();
  d["runtimes"] = {
      {"ghost", {{"command", json::array({"/nonexistent/ghost"})}, {"code_file", "main.g"}, {"optional", true}}}};
  CHECK(error_of(d) == "test.json: runtimes: none is available on this host");
  d["runtimes"] = json::object();
  CHECK(error_of(d) == "test.json: runtimes: must be a non-empty object");
}

TEST_CASE("optional must be a boolean") {
  json d = minimal_doc();
  d["runtimes"]["sh"]["optional"] = "yes";
  CHECK(error_of(d) == "test.json: runtimes.sh.optional: must be true or false");
}

TEST_CASE("bad runtime names are refused") {
  for (const char* name : {"Python", "py thon", "../x", "", "a/b"}) {
    CAPTURE(std::string(name));
    json d = minimal_doc();
    d["runtimes"][name] = {{"command", json::array({"/bin/sh"})}, {"code_file", "main.sh"}};
    CHECK(error_of(d) == std::string("test.json: runtimes.") + name + ": runtime names are 1-32 of [a-z0-9_-]");
  }
  json d = minimal_doc();
  std::string longname(33, 'a');
  d["runtimes"][longname] = {{"command", json::array({"/bin/sh"})}, {"code_file", "main.sh"}};
  CHECK(error_of(d).find("runtime names are 1-32") != std::string::npos);
}

TEST_CASE("code_file must be a plain file name (no traversal)") {
  for (const char* bad : {"../x.py", "/etc/passwd", "a/b.py", ".hidden", "", "Main.py", "x y.py"}) {
    CAPTURE(std::string(bad));
    json d = minimal_doc();
    d["runtimes"]["sh"]["code_file"] = bad;
    CHECK(error_of(d) == "test.json: runtimes.sh.code_file: must be a plain file name such as main.py");
  }
  json d = minimal_doc();
  d["runtimes"]["sh"]["code_file"] = 5;
  CHECK(error_of(d) == "test.json: runtimes.sh.code_file: is required and must be a string");
}

TEST_CASE("readonly_paths must be canonical absolute paths") {
  for (const char* bad : {"usr", "./usr", "/usr/../etc", "/usr/..", "/", "/usr/", "//usr", "/usr/./lib"}) {
    CAPTURE(std::string(bad));
    json d = minimal_doc();
    d["sandbox"]["readonly_paths"] = json::array({bad});
    CHECK(error_of(d) == std::string("test.json: sandbox.readonly_paths: \"") + bad +
                             "\" must be a canonical absolute path (no \"//\", \".\", \"..\" or trailing \"/\")");
  }
  json d = minimal_doc();
  d["sandbox"]["readonly_paths"] = "/usr";
  CHECK(error_of(d) == "test.json: sandbox.readonly_paths: must be an array of strings");
  d["sandbox"].erase("readonly_paths");
  CHECK(error_of(d) == "test.json: sandbox.readonly_paths: is required");
}

TEST_CASE("readonly path overlapping a sandbox-owned path is refused") {
  for (const char* bad :
       {"/work", "/inputs", "/outputs", "/tmp", "/proc", "/dev", "/work/sub", "/inputs/x", "/proc/self"}) {
    CAPTURE(std::string(bad));
    json d = minimal_doc();
    d["sandbox"]["readonly_paths"] = {"/usr", bad};
    CHECK(error_of(d) ==
          std::string("test.json: sandbox.readonly_paths: \"") + bad + "\" overlaps a path the sandbox owns");
  }
  // Prefix without a separator is a different directory.
  json d = minimal_doc();
  d["sandbox"]["readonly_paths"] = {"/workspace", "/procfs"};
  CHECK(policy::parse(d, kSource).ok());
}

// Regression: the overlap check compared strings, so "//work" or "/." passed
// (and the bind target path.substr(1) of "/." is the sandbox root itself).
TEST_CASE("non-canonical spellings of sandbox-owned paths are refused") {
  for (const char* bad : {"//work", "/./work", "/inputs/.", "//proc", "/./", "/."}) {
    CAPTURE(std::string(bad));
    json d = minimal_doc();
    d["sandbox"]["readonly_paths"] = json::array({"/usr", bad});
    CHECK_FALSE(policy::parse(d, kSource).ok());
  }
}

TEST_CASE("sandbox.require accepts only landlock and cgroups booleans") {
  json d = minimal_doc();
  d["sandbox"]["require"] = {{"seccomp", true}};
  CHECK(error_of(d) == "test.json: sandbox.require.seccomp: unknown key");
  d["sandbox"]["require"] = {{"cgroups", "yes"}};
  CHECK(error_of(d) == "test.json: sandbox.require.cgroups: must be true or false");
  d["sandbox"]["require"] = {{"landlock", true}, {"cgroups", false}};
  auto r = policy::parse(d, kSource);
  REQUIRE(r.ok());
  CHECK(r->sandbox.require_landlock);
  CHECK_FALSE(r->sandbox.require_cgroups);
}

TEST_CASE("resource limits: pids, nofile, memory and cpu are bounded") {
  json d = minimal_doc();
  d["limits"] = {{"pids_max", 0u}};
  CHECK(error_of(d) == "test.json: limits.pids_max: must be between 1 and 65536");
  d["limits"] = {{"nofile_max", 1000000u}};
  CHECK(error_of(d) == "test.json: limits.nofile_max: must be between 16 and 65536");
  d["limits"] = {{"memory_max_bytes", 1024u}};
  CHECK(error_of(d).find("test.json: limits.memory_max_bytes: must be between 16777216 and") == 0);
  d["limits"] = {{"cpu_max_cores", 0}};
  CHECK(error_of(d) == "test.json: limits.cpu_max_cores: must be a number between 0.01 and 1024");
  d["limits"] = {{"cpu_max_cores", "1"}};
  CHECK(error_of(d) == "test.json: limits.cpu_max_cores: must be a number between 0.01 and 1024");
  d["limits"] = {{"cpu_max_cores", 0.5}};
  auto r = policy::parse(d, kSource);
  REQUIRE(r.ok());
  CHECK(r->limits.cpu_max_cores == 0.5);
}

TEST_CASE("uid_range never reaches host root, nobody or the ids from 2^31") {
  json d = minimal_doc();
  d["sandbox"]["uid_range"] = {{"first", 1u}, {"count", 10u}};
  CHECK(error_of(d) == "test.json: sandbox.uid_range.first: must be between 65536 and 2147418112");
  d["sandbox"]["uid_range"] = {{"first", 65530u}, {"count", 10u}};
  CHECK(error_of(d) == "test.json: sandbox.uid_range.first: must be between 65536 and 2147418112");
  d["sandbox"]["uid_range"] = {{"first", 4294967295ULL}, {"count", 1u}};  // (uid_t)-1
  CHECK(error_of(d) == "test.json: sandbox.uid_range.first: must be between 65536 and 2147418112");
  d["sandbox"]["uid_range"] = {{"first", 100000u}, {"count", 1u}, {"gid", 5u}};
  CHECK(error_of(d) == "test.json: sandbox.uid_range.gid: unknown key");
}

TEST_CASE("sandbox.env values must be strings and names without =") {
  json d = minimal_doc();
  d["sandbox"]["env"] = {{"PATH", 1}};
  CHECK(error_of(d) == "test.json: sandbox.env.PATH: must be a string value with a name without '='");
  d["sandbox"]["env"] = {{"A=B", "x"}};
  CHECK(error_of(d).find("test.json: sandbox.env.A=B: must be a string") == 0);
  d["sandbox"]["env"] = json::array();
  CHECK(error_of(d) == "test.json: sandbox.env: must be an object");
  d["sandbox"]["env"] = {{"LANG", "C.UTF-8"}};
  auto r = policy::parse(d, kSource);
  REQUIRE(r.ok());
  CHECK(r->sandbox.env == std::map<std::string, std::string>{{"LANG", "C.UTF-8"}});
}

TEST_CASE("sandbox section is required") {
  json d = minimal_doc();
  d.erase("sandbox");
  CHECK(error_of(d) == "test.json: sandbox: is required");
}

TEST_CASE("load_file on a missing file says it cannot read it") {
  auto r = policy::load_file("/nonexistent/throwbox/policy.json");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == util::ErrorCode::kPolicy);
  CHECK(r.error().message.find("cannot read policy") == 0);
  CHECK(r.error().message.find("/nonexistent/throwbox/policy.json") != std::string::npos);
  CHECK(r.error().message.find("ENOENT") != std::string::npos);
}

TEST_CASE("load_file on invalid JSON names the file, the line and column, and the parser's reason") {
  TempDir dir;
  auto error_of_file = [&](const std::string& name, const std::string& text) {
    auto r = policy::load_file(dir.write(name, text));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == util::ErrorCode::kPolicy);
    return r.error().message;
  };
  CHECK(error_of_file("bad.json", "{\"version\": 1,") ==
        dir.path +
            "/bad.json: not valid JSON at line 1, column 15: syntax error while parsing object key - "
            "unexpected end of input; expected string literal");
  // The stray comma of line 3, column 28.
  const std::string text = "{\n  \"version\": 1,\n  \"limits\": {\"pids_max\": 5,}\n}\n";
  CHECK(error_of_file("comma.json", text) ==
        dir.path +
            "/comma.json: not valid JSON at line 3, column 28: syntax error while parsing object key - "
            "unexpected '}'; expected string literal");
  // The library's own count agrees where it has one.
  try {
    [[maybe_unused]] json parsed = json::parse(text);
    FAIL("parsed");
  } catch (const json::parse_error& e) {
    CHECK(std::string(e.what()).find("at line 3, column 28: ") != std::string::npos);
  }
  // Comments are not JSON either.
  CHECK(error_of_file("comment.json", "// hi\n{}") ==
        dir.path +
            "/comment.json: not valid JSON at line 1, column 1: syntax error while parsing value - "
            "invalid literal; last read: '/'");
  // A raw newline in a string: the last column of its line, not column 0 of the next.
  CHECK(error_of_file("newline.json", "{\"a\": \"x\n\"}")
            .find(": not valid JSON at line 1, column 9: syntax error while "
                  "parsing value - invalid string: control character U+000A "
                  "(LF) must be escaped") != std::string::npos);
  CHECK(error_of_file("empty.json", "") ==
        dir.path +
            "/empty.json: not valid JSON at line 1, column 1: syntax error while parsing value - "
            "unexpected end of input; expected '[', '{', or a literal");
}

TEST_CASE("load_file reports validation errors with the file path as source") {
  TempDir dir;
  json d = minimal_doc();
  d["limits"] = {{"bogus", 1}};
  std::string path = dir.write("p.json", d.dump());
  auto r = policy::load_file(path);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message == path + ": limits.bogus: unknown key");
}

TEST_CASE("task lifetimes: the default may not exceed the ceiling; the per-tenant cap is bounded") {
  json d = minimal_doc();
  d["retention"] = {{"tasks_ttl_s", 600u}, {"tasks_ttl_max_s", 1200u}};
  auto ok = policy::parse(d, kSource);
  REQUIRE_MESSAGE(ok.ok(), (ok.ok() ? "" : ok.error().message));
  CHECK(ok->retention.tasks_ttl_s == 600);
  CHECK(ok->retention.tasks_ttl_max_s == 1200);
  d["retention"] = {{"tasks_ttl_s", 1201u}, {"tasks_ttl_max_s", 1200u}};
  CHECK(error_of(d).find("retention.tasks_ttl_s") != std::string::npos);
  d["retention"] = {{"tasks_ttl_max_s", 600u}};  // below the built-in default of 3600
  CHECK(error_of(d).find("retention.tasks_ttl_s") != std::string::npos);
  d["retention"] = json::object();
  d["admission"] = {{"tasks_per_tenant_max", 0u}};
  CHECK(error_of(d).find("admission.tasks_per_tenant_max") != std::string::npos);
}

TEST_CASE("pool: off unless enabled; runtimes must exist; size and memory bounded") {
  json d = minimal_doc();
  auto off = policy::parse(d, kSource);
  REQUIRE(off.ok());
  CHECK_FALSE(off->pool.enabled);
  d["pool"] = {{"enabled", true}, {"runtimes", json::array({"sh"})}, {"size", 3u}, {"claim_wait_ms", 50u}};
  auto on = policy::parse(d, kSource);
  REQUIRE_MESSAGE(on.ok(), (on.ok() ? "" : on.error().message));
  CHECK(on->pool.enabled);
  CHECK(on->pool.runtimes == std::vector<std::string>{"sh"});
  CHECK(on->pool.size == 3);
  CHECK(on->pool.claim_wait_ms == 50);
  d["pool"] = {{"runtimes", json::array({"ruby"})}};
  CHECK(error_of(d) == "test.json: pool.runtimes: \"ruby\" is not a runtime of this policy");
  d["pool"] = {{"size", 17u}};
  CHECK(error_of(d).find("pool.size") != std::string::npos);
  d["pool"] = {{"size", 0u}};
  CHECK(error_of(d).find("pool.size") != std::string::npos);
  d["pool"] = {{"enabled", "yes"}};
  CHECK(error_of(d) == "test.json: pool.enabled: must be true or false");
  d["pool"] = {{"warm", true}};
  CHECK(error_of(d).find("pool") != std::string::npos);
}

TEST_CASE("runtime preload: module names, only with the python loader") {
  json d = minimal_doc();
  d["runtimes"]["sh"]["preload"] = {"numpy"};
  CHECK(error_of(d) == "test.json: runtimes.sh.preload: needs \"loader\": \"python\" (the loader imports them)");
  d["runtimes"]["sh"]["loader"] = "python";
  d["runtimes"]["sh"]["preload"] = {"numpy", "matplotlib.pyplot", "_x1.y_2"};
  auto p = policy::parse(d, kSource);
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
  CHECK(p->runtimes.at("sh").preload == std::vector<std::string>{"numpy", "matplotlib.pyplot", "_x1.y_2"});
  // Anything but dotted identifiers would be Python code in the loader.
  for (const char* bad :
       {"os; import x", "a..b", ".a", "a.", "1abc", "a.1b", "numpy\n", "", "a b", "a-b", "__import__('os')"}) {
    CAPTURE(bad);
    d["runtimes"]["sh"]["preload"] = {bad};
    CHECK(error_of(d).find("runtimes.sh.preload") != std::string::npos);
  }
  d["runtimes"]["sh"]["preload"] = "numpy";
  CHECK(error_of(d).find("runtimes.sh.preload") != std::string::npos);
  d["runtimes"]["sh"]["preload"] = json::array();
  for (int i = 0; i < 65; ++i) d["runtimes"]["sh"]["preload"].push_back("m" + std::to_string(i));
  CHECK(error_of(d) == "test.json: runtimes.sh.preload: at most 64 modules");
}

TEST_CASE("runtime warmup: Python statements, only with the python loader, bounded, no NUL; \"\" is none") {
  json d = minimal_doc();
  d["runtimes"]["sh"]["warmup"] = "import json";
  CHECK(error_of(d) == "test.json: runtimes.sh.warmup: needs \"loader\": \"python\" (the loader runs it)");
  d["runtimes"]["sh"]["loader"] = "python";
  d["runtimes"]["sh"]["warmup"] = "import json\njson.dumps({'a': \"b\\n\"})";
  auto p = policy::parse(d, kSource);
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
  CHECK(p->runtimes.at("sh").warmup == "import json\njson.dumps({'a': \"b\\n\"})");
  CHECK(policy::effective_json(*p)["runtimes"]["sh"]["warmup"] == "import json\njson.dumps({'a': \"b\\n\"})");
  const std::string bound =
      "test.json: runtimes.sh.warmup: must be a string of Python statements, at most 16384 bytes, with no NUL";
  d["runtimes"]["sh"]["warmup"] = std::string(16385, 'x');
  CHECK(error_of(d) == bound);
  d["runtimes"]["sh"]["warmup"] = std::string("pass\0x", 6);
  CHECK(error_of(d) == bound);
  d["runtimes"]["sh"]["warmup"] = json::array({"pass"});
  CHECK(error_of(d).find("runtimes.sh.warmup") != std::string::npos);
  d["runtimes"]["sh"]["warmup"] = std::string(16384, '#');
  CHECK(policy::parse(d, kSource).ok());
  // "" is none, whatever the loader.
  d["runtimes"]["sh"]["loader"] = "";
  d["runtimes"]["sh"]["warmup"] = "";
  auto none = policy::parse(d, kSource);
  REQUIRE(none.ok());
  CHECK(none->runtimes.at("sh").warmup.empty());
}

TEST_CASE("runtime cache: code and env, env a sandbox.env directory under /tmp") {
  json d = minimal_doc();
  d["runtimes"]["sh"]["cache"] = {{"code", "true"}, {"env", "XDG_CACHE_HOME"}};
  CHECK(error_of(d) == "test.json: runtimes.sh.cache.env: \"XDG_CACHE_HOME\" is not set in sandbox.env");
  for (const char* bad :
       {"/work/cache", "/tmp", "/tmp/", "/tmp/a/b", "/tmp/..", "/tmp/.hidden", "/var/tmp/x", "/tmp/a b"}) {
    CAPTURE(bad);
    d["sandbox"]["env"]["XDG_CACHE_HOME"] = bad;
    CHECK(error_of(d).find("a cache's directory must be /tmp/<plain name>") != std::string::npos);
  }
  d["sandbox"]["env"]["XDG_CACHE_HOME"] = "/tmp/cache";
  auto p = policy::parse(d, kSource);
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
  CHECK(p->runtimes.at("sh").cache_code == "true");
  CHECK(p->runtimes.at("sh").cache_env == "XDG_CACHE_HOME");
  d["runtimes"]["sh"]["cache"] = {{"code", ""}, {"env", "XDG_CACHE_HOME"}};
  CHECK(error_of(d).find("runtimes.sh.cache.code: is required") != std::string::npos);
  d["runtimes"]["sh"]["cache"] = {{"code", "true"}};
  CHECK(error_of(d).find("runtimes.sh.cache.env: is required") != std::string::npos);
  d["runtimes"]["sh"]["cache"] = {{"code", "true"}, {"env", "XDG_CACHE_HOME"}, {"dir", "/x"}};
  CHECK(error_of(d).find("runtimes.sh.cache") != std::string::npos);
}

TEST_CASE("readonly_paths may not cover the cache mount, above or below it") {
  json d = minimal_doc();
  for (const char* bad : {"/var", "/var/cache", "/var/cache/throwbox", "/var/cache/throwbox/x"}) {
    CAPTURE(bad);
    d["sandbox"]["readonly_paths"] = {"/usr", bad};
    CHECK(error_of(d).find("overlaps a path the sandbox owns") != std::string::npos);
  }
  d["sandbox"]["readonly_paths"] = {"/usr", "/var/lib/x", "/var/cache/fontconfig"};
  CHECK(policy::parse(d, kSource).ok());
}

TEST_CASE("pool.first_use: runtimes of pool.runtimes") {
  json d = minimal_doc();
  d["pool"] = {{"enabled", true}, {"runtimes", json::array({"sh"})}, {"first_use", json::array({"sh"})}};
  auto p = policy::parse(d, kSource);
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
  CHECK(p->pool.first_use == std::vector<std::string>{"sh"});
  d["pool"]["first_use"] = {"bash"};
  CHECK(error_of(d) == "test.json: pool.first_use: \"bash\" is not in pool.runtimes");
}

TEST_CASE("bundled default.json: python-data preloads the data stack and has the font cache; built on first use") {
  auto r = policy::load_file(kDefaultPolicy);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  const policy::Runtime* d = r->find_runtime("python-data");
  REQUIRE(d != nullptr);
  CHECK(d->loader == "python");
  const std::vector<std::string> stdlib{"csv",      "json",        "re",         "decimal",
                                        "datetime", "collections", "statistics", "pathlib"};
  std::vector<std::string> data = stdlib;
  for (const char* m : {"numpy", "pandas", "matplotlib", "matplotlib.pyplot"}) data.push_back(m);
  CHECK(d->preload == data);
  // python: the standard library modules agents' scripts import first.
  CHECK(r->find_runtime("python")->preload == stdlib);
  CHECK(d->cache_env == "MPLCONFIGDIR");
  CHECK(r->sandbox.env.at("MPLCONFIGDIR") == "/tmp/matplotlib");
  CHECK(r->pool.runtimes == std::vector<std::string>{"python", "python-data"});
  CHECK(r->pool.first_use == std::vector<std::string>{"python-data"});
  CHECK(r->find_runtime("python")->cache_code.empty());
}

TEST_CASE("runtime loader is \"python\" or empty") {
  json d = minimal_doc();
  d["runtimes"]["sh"]["loader"] = "perl";
  CHECK(error_of(d).find("runtimes.sh.loader") != std::string::npos);
  d["runtimes"]["sh"]["loader"] = "python";
  auto p = policy::parse(d, kSource);
  REQUIRE(p.ok());
  CHECK(p->runtimes.at("sh").loader == "python");
}

TEST_CASE("bundled strict.json: python only, tight limits, text/CSV/PNG artifacts, warm python") {
  auto r = policy::load_file(unit::source_path("/policies/strict.json"));
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  CHECK(r->available_runtimes() == std::vector<std::string>{"python"});
  CHECK(r->find_runtime("bash") == nullptr);
  CHECK(r->limits.timeout_s_default == 10);
  CHECK(r->limits.timeout_s_max == 20);
  CHECK(r->limits.memory_max_bytes == 128ull << 20);
  CHECK(r->limits.pids_max == 32);
  CHECK(r->limits.stdout_max_bytes <= 16384);
  CHECK(r->artifacts.allowed_media_types == std::vector<std::string>{"text/plain", "text/csv", "image/png"});
  CHECK(r->pool.enabled);
  CHECK(r->pool.runtimes == std::vector<std::string>{"python"});
}

TEST_CASE("bundled data.json: python with the Debian numpy/pandas/matplotlib stack") {
  auto r = policy::load_file(unit::source_path("/policies/data.json"));
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  CHECK(r->available_runtimes() == std::vector<std::string>{"python"});
  // numpy finds its BLAS through /etc/alternatives; matplotlib reads its rc file.
  for (const char* path : {"/usr", "/etc/alternatives", "/etc/matplotlibrc"})
    CHECK(std::find(r->sandbox.readonly_paths.begin(), r->sandbox.readonly_paths.end(), path) !=
          r->sandbox.readonly_paths.end());
  CHECK(r->sandbox.env.at("MPLBACKEND") == "Agg");
  // An upload at the input cap still fits in one message as base64.
  CHECK(r->server.message_max_bytes >= r->limits.input_max_bytes / 3 * 4);
}

TEST_CASE("effective_json round-trips: parsing it gives the same policy") {
  for (const char* name : {"default", "strict", "data"}) {
    CAPTURE(std::string(name));
    auto r = policy::load_file(unit::source_path("/policies/") + name + ".json");
    REQUIRE(r.ok());
    json once = policy::effective_json(*r);
    auto again = policy::parse(once, kSource);
    REQUIRE_MESSAGE(again.ok(), (again.ok() ? "" : again.error().message));
    CHECK(policy::effective_json(*again) == once);
  }
  // Defaults are filled in: a minimal file shows every section.
  auto m = policy::parse(minimal_doc(), kSource);
  REQUIRE(m.ok());
  json e = policy::effective_json(*m);
  CHECK(e["limits"]["timeout_s"]["max"] == 60);
  CHECK(e["artifacts"]["csv_formulas"] == "neutralise");
  CHECK(e["pool"]["enabled"] == false);
  CHECK(e["runtimes"]["sh"]["optional"] == false);
}

namespace {

// Leaf keys of an effective policy, "runtimes.<name>.command" style. Objects
// whose keys are the user's (runtime names, environment names) are not keys.
void flatten_keys(const json& v, const std::string& prefix, std::set<std::string>& out) {
  if (!v.is_object() || prefix == "sandbox.env" || prefix == "artifacts.allowed_extensions" ||
      prefix == "network.hosts") {
    out.insert(prefix);
    return;
  }
  for (auto& [k, child] : v.items()) {
    std::string key = prefix.empty() ? k : prefix + "." + k;
    if (prefix == "runtimes") key = "runtimes.<name>";
    if (prefix == "network.profiles") key = "network.profiles.<name>";
    if (prefix == "checks") key = "checks.<name>";
    flatten_keys(child, key, out);
  }
}

struct DocRow {
  std::string key, default_cell, range_cell;
};

// The rows of docs/policy.md's key tables: | `key` | type | default | range | meaning |
std::vector<DocRow> policy_doc_rows() {
  std::ifstream in(unit::source_path("/docs/policy.md"));
  REQUIRE(in.good());
  std::vector<DocRow> rows;
  std::string line;
  auto cells_of = [](const std::string& l) {
    std::vector<std::string> cells;
    size_t start = 1;
    for (size_t bar; (bar = l.find('|', start)) != std::string::npos; start = bar + 1) {
      std::string c = l.substr(start, bar - start);
      c.erase(0, c.find_first_not_of(' '));
      c.erase(c.find_last_not_of(' ') + 1);
      cells.push_back(c);
    }
    return cells;
  };
  bool in_key_table = false;
  while (std::getline(in, line)) {
    if (line.rfind("| key | type | default | range |", 0) == 0)
      in_key_table = true;
    else if (line.rfind("|", 0) != 0)
      in_key_table = false;
    else if (in_key_table && line.rfind("| `", 0) == 0) {
      auto cells = cells_of(line);
      REQUIRE(cells.size() == 5);
      rows.push_back({cells[0].substr(1, cells[0].find('`', 1) - 1), cells[2], cells[3]});
    }
  }
  return rows;
}

// "`65536` (64 KiB)" -> 65536 as JSON; "" when the cell does not start with a value.
std::string backticked(const std::string& cell) {
  if (cell.empty() || cell[0] != '`') return "";
  return cell.substr(1, cell.find('`', 1) - 1);
}

}  // namespace

TEST_CASE("docs/policy.md documents exactly the keys the loader accepts, with their defaults and ranges") {
  // The minimal policy and one network profile "p", so the profile's keys count too.
  json base = minimal_doc();
  base["network"]["profiles"]["p"]["allow"] = {"a.test:80"};
  // And a check "p" run as a command, required by the runtime.
  base["checks"]["p"] = {{"runtime", "sh"}, {"command", {"/bin/true"}}};
  base["runtimes"]["sh"]["required_checks"] = {"p"};
  auto m = policy::parse(base, kSource);
  REQUIRE(m.ok());
  json effective = policy::effective_json(*m);
  std::set<std::string> accepted;
  flatten_keys(effective, "", accepted);
  {
    // And a runtime cache, so its keys count too.
    json cached = base;
    cached["runtimes"]["sh"]["cache"] = {{"code", "true"}, {"env", "XDG_CACHE_HOME"}};
    cached["sandbox"]["env"]["XDG_CACHE_HOME"] = "/tmp/cache";
    auto c = policy::parse(cached, kSource);
    REQUIRE(c.ok());
    flatten_keys(policy::effective_json(*c), "", accepted);
  }
  {
    // And a check whose program is a file.
    TempDir d;
    json filed = base;
    filed["checks"]["p"] = {{"runtime", "sh"}, {"code_file", d.write("p.sh", "true\n")}};
    ::chmod((d.path + "/p.sh").c_str(), 0644);
    ::chmod(d.path.c_str(), 0755);
    auto f = policy::parse(filed, kSource);
    REQUIRE_MESSAGE(f.ok(), (f.ok() ? "" : f.error().message));
    flatten_keys(policy::effective_json(*f), "", accepted);
  }
  {
    // And a runtime from an image.
    json imaged = base;
    imaged["runtimes"]["sh"]["image"] = {{"layout", "/var/lib/images/sh"},
                                         {"digest", "sha256:" + std::string(64, 'a')}};
    auto i = policy::parse(imaged, kSource);
    REQUIRE_MESSAGE(i.ok(), (i.ok() ? "" : i.error().message));
    flatten_keys(policy::effective_json(*i), "", accepted);
  }
  accepted.insert("$comment");  // the one key that is not a setting: parse() accepts and ignores it

  auto rows = policy_doc_rows();
  std::set<std::string> documented;
  for (auto& row : rows) {
    CAPTURE(row.key);
    CHECK_MESSAGE(documented.insert(row.key).second, "documented twice");
  }
  for (auto& key : accepted) CHECK_MESSAGE(documented.count(key), "accepted but not in docs/policy.md: " << key);
  for (auto& key : documented) CHECK_MESSAGE(accepted.count(key), "in docs/policy.md but not accepted: " << key);

  for (auto& row : rows) {
    CAPTURE(row.key);
    if (row.key.rfind("runtimes.", 0) == 0 || row.key == "$comment") continue;
    std::string path = row.key;
    if (size_t at = path.find("<name>"); at != std::string::npos) path.replace(at, 6, "p");
    std::string pointer = "/" + path;
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    // The documented default is the loader's.
    if (std::string d = backticked(row.default_cell); !d.empty())
      CHECK(json::parse(d) == effective.at(json::json_pointer(pointer)));
    // An integer range "`MIN..MAX`": both ends load, one beyond either end is refused naming the key.
    std::string range = backticked(row.range_cell);
    size_t dots = range.find("..");
    if (dots == std::string::npos) continue;
    uint64_t lo = std::stoull(range.substr(0, dots)), hi = std::stoull(range.substr(dots + 2));
    auto with = [&](uint64_t v) {
      json d = base;
      d[json::json_pointer(pointer)] = v;
      return d;
    };
    CHECK(policy::parse(with(lo), kSource).ok());
    CHECK(policy::parse(with(hi), kSource).ok());
    CHECK(error_of(with(hi + 1)).find(path + ": must be between") != std::string::npos);
    if (lo > 0) CHECK(error_of(with(lo - 1)).find(path + ": must be between") != std::string::npos);
  }
}

TEST_CASE("sandbox.uid_range: checked, and the old single-uid keys name their replacement") {
  json d = minimal_doc();
  d["sandbox"]["uid_range"] = {{"first", 200000u}, {"count", 100u}};
  auto r = policy::parse(d, kSource);
  REQUIRE(r.ok());
  CHECK(r->sandbox.uid_first == 200000);
  CHECK(r->sandbox.uid_count == 100);
  d["sandbox"]["uid_range"] = {{"first", 0u}, {"count", 100u}};
  CHECK(error_of(d) == "test.json: sandbox.uid_range.first: must be between 65536 and 2147418112");
  d["sandbox"]["uid_range"] = {{"first", 2147418000u}, {"count", 100000u}};
  CHECK(error_of(d) == "test.json: sandbox.uid_range: first + count must stay below 2147483648 (2^31)");
  d["sandbox"]["uid_range"] = {{"first", 200000u}, {"count", 0u}};
  CHECK(error_of(d).find("sandbox.uid_range.count: must be between 1 and") != std::string::npos);
  d["sandbox"].erase("uid_range");
  d["sandbox"]["host_uid_when_root"] = 65534;
  CHECK(error_of(d).find("sandbox.host_uid_when_root: replaced by sandbox.uid_range") != std::string::npos);
}

TEST_CASE("artifacts.allowed_extensions: defaults per allowed type, refusals each named") {
  auto p = policy::parse(minimal_doc(), kSource);
  REQUIRE(p.ok());
  CHECK(p->artifacts.allowed_extensions.at("text/plain") == std::vector<std::string>{".txt"});
  CHECK(p->artifacts.allowed_extensions.at("image/jpeg") == std::vector<std::string>{".jpg", ".jpeg"});

  json d = minimal_doc();
  d["artifacts"] = {{"allowed_extensions", {{"text/plain", {".txt", ".log"}}}}};
  auto widened = policy::parse(d, kSource);
  REQUIRE_MESSAGE(widened.ok(), widened.error().message);
  CHECK(widened->artifacts.allowed_extensions.at("text/plain") == std::vector<std::string>{".txt", ".log"});
  CHECK(widened->artifacts.allowed_extensions.at("text/csv") == std::vector<std::string>{".csv"});

  d["artifacts"] = {{"allowed_extensions", {{"text/plain", {".txt", ".cmd"}}}}};
  CHECK(error_of(d) ==
        "test.json: artifacts.allowed_extensions.text/plain: \".cmd\" names a program or script a "
        "double-click runs; it is never allowed");
  d["artifacts"] = {{"allowed_extensions", {{"text/plain", {"txt"}}}}};
  CHECK(error_of(d).find("\"txt\" must be a dot and 1-16 lowercase letters") != std::string::npos);
  d["artifacts"] = {{"allowed_extensions", {{"text/html", {".html"}}}}};
  CHECK(error_of(d) == "test.json: artifacts.allowed_extensions.text/html: not in artifacts.allowed_media_types");
  d["artifacts"] = {{"allowed_media_types", {"text/plain", "application/x-parquet"}}};
  CHECK(error_of(d) ==
        "test.json: artifacts.allowed_media_types: application/x-parquet has no known file extensions; "
        "list them in artifacts.allowed_extensions");
  d["artifacts"] = {{"allowed_media_types", {"text/plain", "application/x-parquet"}},
                    {"allowed_extensions", {{"application/x-parquet", {".parquet"}}}}};
  CHECK(policy::parse(d, kSource).ok());
  d["artifacts"] = {{"allowed_media_types", {"text/plain", "application/vnd.oasis.opendocument.spreadsheet"}}};
  CHECK(error_of(d).find("(a workbook) cannot be allowed: the gate cannot check its formulas") != std::string::npos);
  d["artifacts"] = {{"pdf_active", "maybe"}};
  CHECK(error_of(d) == "test.json: artifacts.pdf_active: must be \"reject\" or \"strip\"");
  d["artifacts"] = {{"image_pixels_max", 0u}};
  CHECK(error_of(d) == "test.json: artifacts.image_pixels_max: must be between 1 and 17179869184");
}

TEST_CASE("runtimes.<name>.image: an absolute layout and a sha256 digest, nothing else") {
  const std::string digest = "sha256:" + std::string(64, 'b');
  json d = minimal_doc();
  d["runtimes"]["sh"]["command"] = {"/opt/not-on-this-host/sh"};  // the image's, not the host's
  d["runtimes"]["sh"]["image"] = {{"layout", "/var/lib/images/sh"}, {"digest", digest}};
  auto ok = policy::parse(d, kSource);
  REQUIRE_MESSAGE(ok.ok(), (ok.ok() ? "" : ok.error().message));
  CHECK(ok->find_runtime("sh")->image_digest == digest);
  CHECK(ok->find_runtime("sh")->available);
  json bad = d;
  bad["runtimes"]["sh"]["image"]["digest"] = "sha256:abc";
  CHECK(error_of(bad) ==
        "test.json: runtimes.sh.image.digest: digest \"sha256:abc\": want sha256:<64 lowercase hex digits>");
  bad = d;
  bad["runtimes"]["sh"]["image"]["layout"] = "images/sh";
  CHECK(error_of(bad) ==
        "test.json: runtimes.sh.image.layout: is required: the absolute path of an OCI image layout (a directory, or a "
        "tar archive of one)");
  bad = d;
  bad["runtimes"]["sh"]["image"]["tag"] = "latest";
  CHECK(error_of(bad) == "test.json: runtimes.sh.image.tag: unknown key");
  bad = d;
  bad["runtimes"]["sh"]["image"].erase("digest");
  CHECK(error_of(bad).find("runtimes.sh.image.digest: is required") != std::string::npos);
}
