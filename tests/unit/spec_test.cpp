// The runner's launch spec, a warm sandbox's claim and the runner's outcome
// as JSON: what is written is read back as it was, and a numeric field that
// is a float, negative or beyond its range is an error naming the field
// (nlohmann's get<uint64_t>() wrapped or truncated it, or was undefined
// behaviour: issue 16).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <string>

#include "server/sandbox/spec.h"

using nlohmann::json;

namespace {

sandbox::LaunchSpec sample_spec() {
  sandbox::LaunchSpec s;
  s.job_id = "j1";
  s.argv = {"/usr/bin/python3", "/work/main.py"};
  s.env = {"PATH=/usr/bin"};
  s.code = "print(1)";
  s.code_path = "/work/main.py";
  s.inputs = {{"a.csv", "/var/lib/throwbox/blobs/ab"}};
  s.scratch_dir = "/var/lib/throwbox/run/j1";
  s.harvest_dir = "/var/lib/throwbox/run/j1/outputs";
  s.work_max_bytes = 1 << 20;
  s.timeout_ms = 5000;
  s.host_uid = 65534;
  s.host_gid = 65534;
  s.memory_max_bytes = 256 << 20;
  s.pids_max = 64;
  s.nofile_max = 256;
  s.cpu_max_cores = 1.5;
  s.cgroup_host = json::object();
  return s;
}

// The error of reading `j` with field `key` set to the JSON text `value`.
template <class Read>
std::string error_with(json j, const char* key, const char* value, Read read) {
  j[key] = json::parse(value);
  auto r = read(j);
  REQUIRE_FALSE(r.ok());
  return r.error().message;
}

std::string spec_error(const char* key, const char* value) {
  return error_with(sandbox::to_json(sample_spec()), key, value, sandbox::spec_from_json);
}

}  // namespace

TEST_CASE("a launch spec reads back as written, through its wire text too") {
  const json j = sandbox::to_json(sample_spec());
  auto once = sandbox::spec_from_json(json::parse(j.dump()));
  REQUIRE(once.ok());
  CHECK(sandbox::to_json(*once) == j);
}

TEST_CASE("issue 16: a launch spec's integer fields refuse floats, negatives and huge numbers") {
  for (const char* bad : {"1.5", "-1", "123456789012345678901234567890", "1e30", "\"5\"", "0"}) {
    CAPTURE(bad);
    CHECK(spec_error("timeout_ms", bad) == "launch spec field timeout_ms: not an integer in 1..86400000");
  }
  CHECK(spec_error("memory_max_bytes", "-1") ==
        "launch spec field memory_max_bytes: not an integer in 0..9223372036854775807");
  CHECK(spec_error("pids_max", "64.5") == "launch spec field pids_max: not an integer in 0..9223372036854775807");
  CHECK(spec_error("inputs_max_files", "-3") ==
        "launch spec field inputs_max_files: not an integer in 0..9223372036854775807");
  CHECK(spec_error("artifact_max_bytes", "1e300") ==
        "launch spec field artifact_max_bytes: not an integer in 0..9223372036854775807");
  // 2^32 became host uid 0 (root) when cast to uint32_t.
  CHECK(spec_error("host_uid", "4294967296") == "launch spec field host_uid: not an integer in 0..4294967294");
  CHECK(spec_error("host_gid", "-1") == "launch spec field host_gid: not an integer in 0..4294967294");
  CHECK(spec_error("cpu_max_cores", "-2") == "launch spec field cpu_max_cores: not a number in 0..65536");
  CHECK(spec_error("cpu_max_cores", "1e300") == "launch spec field cpu_max_cores: not a number in 0..65536");
}

TEST_CASE("issue 16: a claim's timeout_ms is an integer in 1..a day") {
  sandbox::Claim c{"j1", "print(1)", {{"a", "/b"}}, 2000, true};
  auto back = sandbox::claim_from_json(json::parse(sandbox::to_json(c).dump()));
  REQUIRE(back.ok());
  CHECK(sandbox::to_json(*back) == sandbox::to_json(c));
  for (const char* bad : {"2.5", "-5", "0", "1e30", "99999999999999999999999"}) {
    CAPTURE(bad);
    CHECK(error_with(sandbox::to_json(c), "timeout_ms", bad, sandbox::claim_from_json) ==
          "claim field timeout_ms: not an integer in 1..86400000");
  }
}

TEST_CASE("issue 16: an outcome's numbers are read with their ranges") {
  sandbox::Outcome o;
  o.status = sandbox::Status::failed;
  o.exited = true;
  o.exit_code = 3;
  o.duration_ms = 12;
  o.files = {{"out.csv", 10, "/h/out.csv", ""}};
  o.layers = {"namespaces"};
  const json j = sandbox::to_json(o);
  auto back = sandbox::outcome_from_json(json::parse(j.dump()));
  REQUIRE(back.ok());
  CHECK(sandbox::to_json(*back) == j);

  CHECK(error_with(j, "exit_code", "256", sandbox::outcome_from_json) ==
        "runner outcome field exit_code: not an integer in 0..255");
  CHECK(error_with(j, "exit_code", "-1", sandbox::outcome_from_json) ==
        "runner outcome field exit_code: not an integer in 0..255");
  CHECK(error_with(j, "signal", "9.5", sandbox::outcome_from_json) ==
        "runner outcome field signal: not an integer in 0..64");
  CHECK(error_with(j, "cpu_ms", "1e25", sandbox::outcome_from_json) ==
        "runner outcome field cpu_ms: not an integer in 0..9223372036854775807");
  json bad_file = j;
  bad_file["files"][0]["size"] = -1;
  auto r = sandbox::outcome_from_json(bad_file);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message == "runner outcome file field size: not an integer in 0..9223372036854775807");
}
