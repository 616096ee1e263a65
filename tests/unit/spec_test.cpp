// The runner's launch spec, a warm sandbox's claim and the runner's outcome as
// JSON: what is written is read back as it was, and a numeric field that is a
// float, negative or beyond its range is an error naming the field (nlohmann's
// get<uint64_t>() wrapped or truncated it, or was undefined behaviour).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "server/sandbox/spec.h"
#include "server/sandbox/zygote.h"

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

// The runner and the zygote parse this spec while they wait: were it refused,
// every one of them would throw (and sort the unwinder's frame table) per job.
TEST_CASE("the rehearsal's spec is one the parser accepts") {
  auto parsed = sandbox::spec_from_json(json::parse(sandbox::to_json(sandbox::zygote::rehearsal_spec()).dump()));
  INFO((parsed.ok() ? std::string() : parsed.error().message));
  REQUIRE(parsed.ok());
  CHECK(sandbox::zygote::rehearse_parse());
}

TEST_CASE("a launch spec's integer fields refuse floats, negatives and huge numbers") {
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

TEST_CASE("a claim's timeout_ms is an integer in 1..a day") {
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

TEST_CASE("an outcome's numbers are read with their ranges") {
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

TEST_CASE("an outcome's cut counts read back, are required and read with their range") {
  sandbox::Outcome o;
  o.status = sandbox::Status::completed;
  o.stdout_truncated = true;
  o.stdout_cut_bytes = 1935000;
  o.stderr_cut_bytes = 7;
  const json j = sandbox::to_json(o);
  CHECK(j["stdout_cut_bytes"] == 1935000);
  CHECK(j["stderr_cut_bytes"] == 7);
  auto back = sandbox::outcome_from_json(json::parse(j.dump()));
  REQUIRE(back.ok());
  CHECK(back->stdout_cut_bytes == 1935000);
  CHECK(back->stderr_cut_bytes == 7);
  CHECK(sandbox::to_json(*back) == j);

  for (const char* key : {"stdout_cut_bytes", "stderr_cut_bytes"}) {
    CAPTURE(key);
    for (const char* bad : {"-1", "2.5", "1e30", "\"5\"", "true"})
      CHECK(error_with(j, key, bad, sandbox::outcome_from_json) ==
            std::string("runner outcome field ") + key + ": not an integer in 0..9223372036854775807");
    json missing = j;
    missing.erase(key);
    auto r = sandbox::outcome_from_json(missing);
    CHECK_FALSE(r.ok());
  }
}

TEST_CASE("a workspace job's fields read back as written, cold and warm") {
  sandbox::LaunchSpec cold = sample_spec();
  cold.workspace_in = "/var/lib/throwbox/workspaces/w1/tree";
  cold.workspace_out = "/var/lib/throwbox/workspaces/w1/next-j1";
  cold.workspace_max_bytes = cold.work_max_bytes;
  auto back = sandbox::spec_from_json(json::parse(sandbox::to_json(cold).dump()));
  REQUIRE(back.ok());
  CHECK(back->workspace_in == cold.workspace_in);
  CHECK(back->workspace_out == cold.workspace_out);
  CHECK(sandbox::to_json(*back) == sandbox::to_json(cold));

  sandbox::LaunchSpec warm = sample_spec();
  warm.code.clear();
  warm.inputs.clear();
  warm.warm = sandbox::Warm::exec;
  warm.workspace_max_bytes = 64 << 20;
  auto warm_back = sandbox::spec_from_json(json::parse(sandbox::to_json(warm).dump()));
  REQUIRE(warm_back.ok());
  CHECK(warm_back->workspace_max_bytes == uint64_t{64} << 20);

  // A spec from before workspaces: none.
  json old = sandbox::to_json(sample_spec());
  for (const char* key : {"workspace_in", "workspace_out", "workspace_max_bytes"}) old.erase(key);
  auto plain = sandbox::spec_from_json(old);
  REQUIRE(plain.ok());
  CHECK(plain->workspace_in.empty());
  CHECK(plain->workspace_max_bytes == 0);
}

TEST_CASE("a launch spec's workspace: both paths absolute or neither; a warm spec's comes with the claim") {
  const std::string both = "launch spec: workspace_in and workspace_out are both absolute paths, or both \"\"";
  CHECK(spec_error("workspace_in", "\"/w/tree\"") == both);
  CHECK(spec_error("workspace_out", "\"/w/next\"") == both);
  json j = sandbox::to_json(sample_spec());
  j["workspace_in"] = "w/tree";
  CHECK(error_with(j, "workspace_out", "\"/w/next\"", sandbox::spec_from_json) == both);
  j["workspace_in"] = std::string("/w/tree\0/etc", 12);
  CHECK(error_with(j, "workspace_out", "\"/w/next\"", sandbox::spec_from_json) == both);
  const std::string sized =
      "a cold spec has workspace_max_bytes (the workspace's size) exactly when it has a workspace";
  CHECK(spec_error("workspace_max_bytes", "1048576") == sized);
  sandbox::LaunchSpec cold = sample_spec();
  cold.workspace_in = "/w/tree";
  cold.workspace_out = "/w/next";
  auto unsized = sandbox::spec_from_json(sandbox::to_json(cold));
  REQUIRE_FALSE(unsized.ok());
  CHECK(unsized.error().message == sized);
  cold.workspace_max_bytes = cold.work_max_bytes + 1;
  auto larger = sandbox::spec_from_json(sandbox::to_json(cold));
  REQUIRE_FALSE(larger.ok());
  CHECK(larger.error().message == "a cold workspace job's work_max_bytes is below its workspace_max_bytes");
  CHECK(spec_error("workspace_max_bytes", "-1") ==
        "launch spec field workspace_max_bytes: not an integer in 0..9223372036854775807");

  sandbox::LaunchSpec warm = sample_spec();
  warm.code.clear();
  warm.inputs.clear();
  warm.warm = sandbox::Warm::preload;
  warm.workspace_in = "/w/tree";
  warm.workspace_out = "/w/next";
  auto r = sandbox::spec_from_json(sandbox::to_json(warm));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message == "a warm spec has no workspace (a job's claim brings it)");
}

TEST_CASE("a claim's workspace: read back, both paths or neither, and only for a warm spec that takes one") {
  sandbox::Claim c{"j1", "print(1)", {}, 2000, false, true, true, "/w/tree", "/w/next"};
  auto back = sandbox::claim_from_json(json::parse(sandbox::to_json(c).dump()));
  REQUIRE(back.ok());
  CHECK(back->workspace_in == "/w/tree");
  CHECK(back->workspace_out == "/w/next");
  CHECK(back->network);
  CHECK(back->ca_env);
  // The CA bundle's variables come only with a network profile.
  json no_network = sandbox::to_json(c);
  no_network["network"] = false;
  auto no_net = sandbox::claim_from_json(no_network);
  REQUIRE(no_net.ok());
  CHECK_FALSE(no_net->ca_env);
  CHECK(error_with(sandbox::to_json(c), "workspace_out", "\"\"", sandbox::claim_from_json) ==
        "claim: workspace_in and workspace_out are both absolute paths, or both \"\"");

  sandbox::LaunchSpec warm = sample_spec();
  warm.warm = sandbox::Warm::exec;
  auto refused = sandbox::check_claim(warm, c);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message ==
        "a claim with a workspace, but this warm sandbox takes none (workspace_max_bytes 0)");
  warm.workspace_max_bytes = 1 << 20;
  CHECK(sandbox::check_claim(warm, c).ok());
  warm.workspace_max_bytes = 0;
  CHECK(sandbox::check_claim(warm, sandbox::Claim{"j2", "x", {}, 1000}).ok());

  // A claim from before workspaces has none.
  json old = sandbox::to_json(c);
  old.erase("workspace_in");
  old.erase("workspace_out");
  auto plain = sandbox::claim_from_json(old);
  REQUIRE(plain.ok());
  CHECK(plain->workspace_in.empty());
}

TEST_CASE("an outcome's workspace report reads back; an outcome without one reads as not saved") {
  sandbox::Outcome o;
  o.status = sandbox::Status::timed_out;
  o.workspace_saved = true;
  o.workspace_bytes = 123;
  o.workspace_entries = 4;
  o.workspace_skipped = 1;
  o.workspace_skipped_names = {"/work/fifo (a FIFO)"};
  o.workspace_full = true;
  const json j = sandbox::to_json(o);
  auto back = sandbox::outcome_from_json(json::parse(j.dump()));
  REQUIRE(back.ok());
  CHECK(sandbox::to_json(*back) == j);
  CHECK(back->workspace_skipped_names == std::vector<std::string>{"/work/fifo (a FIFO)"});

  json old = j;
  for (const char* key : {"workspace_saved", "workspace_bytes", "workspace_entries", "workspace_skipped",
                          "workspace_skipped_names", "workspace_full", "workspace_error"})
    old.erase(key);
  auto plain = sandbox::outcome_from_json(old);
  REQUIRE(plain.ok());
  CHECK_FALSE(plain->workspace_saved);
  CHECK(plain->workspace_bytes == 0);
  CHECK(error_with(j, "workspace_bytes", "-4", sandbox::outcome_from_json) ==
        "runner outcome field workspace_bytes: not an integer in 0..9223372036854775807");
}

TEST_CASE("a template's and a forked sandbox's fields read back, and only in the combinations that work") {
  sandbox::LaunchSpec t = sample_spec();
  t.code.clear();
  t.inputs.clear();
  t.warm = sandbox::Warm::preload;
  t.own_user_ns = true;
  t.template_socket = "/var/lib/throwbox/templates/python-data.sock";
  t.template_ids_first = 1879048192;
  t.template_ids_count = 65536;
  t.template_library = "/usr/lib/throwbox/libthrowbox-template.so";
  auto back = sandbox::spec_from_json(json::parse(sandbox::to_json(t).dump()));
  REQUIRE(back.ok());
  CHECK(sandbox::to_json(*back) == sandbox::to_json(t));

  sandbox::LaunchSpec f = t;
  f.template_socket.clear();
  f.template_ids_first = f.template_ids_count = 0;
  f.template_library.clear();
  f.from_template_pid = 4242;
  f.from_template_start_time = 123456;
  f.from_template_socket = t.template_socket;
  f.from_template_ahead = true;
  auto forked = sandbox::spec_from_json(sandbox::to_json(f));
  REQUIRE(forked.ok());
  CHECK(sandbox::to_json(*forked) == sandbox::to_json(f));
  CHECK(forked->from_template_ahead);

  auto error_of = [](const sandbox::LaunchSpec& s) {
    auto r = sandbox::spec_from_json(sandbox::to_json(s));
    REQUIRE_FALSE(r.ok());
    return r.error().message;
  };
  sandbox::LaunchSpec ahead_alone = t;
  ahead_alone.template_socket.clear();
  ahead_alone.template_ids_first = ahead_alone.template_ids_count = 0;
  ahead_alone.template_library.clear();
  ahead_alone.from_template_ahead = true;
  CHECK(error_of(ahead_alone) == "launch spec: from_template_ahead belongs to a sandbox forked from a template");
  sandbox::LaunchSpec cold = t;
  cold.warm = sandbox::Warm::cold;
  cold.code = "print(1)";
  CHECK(error_of(cold) == "launch spec: a template, and a sandbox forked from one, is warm \"preload\"");
  sandbox::LaunchSpec both = t;
  both.from_template_pid = 1;
  CHECK(error_of(both) == "launch spec: a template is not itself forked from one");
  sandbox::LaunchSpec relative = t;
  relative.template_socket = "templates/x.sock";
  CHECK(error_of(relative) == "launch spec: a template's socket is an absolute path under 108 bytes");
  sandbox::LaunchSpec long_path = t;
  long_path.template_socket = "/" + std::string(120, 'x');
  CHECK(error_of(long_path) == "launch spec: a template's socket is an absolute path under 108 bytes");
  sandbox::LaunchSpec low = t;
  low.template_ids_first = 1000;
  CHECK(error_of(low) == "launch spec: template_ids lie above the sandbox user's id and within the id space");
  sandbox::LaunchSpec shared = t;
  shared.own_user_ns = false;
  CHECK(error_of(shared) ==
        "launch spec: a template maps template_ids exactly when it has its own user namespace's owner (own_user_ns)");
  sandbox::LaunchSpec stray = sample_spec();
  stray.template_ids_count = 4;
  CHECK(error_of(stray) ==
        "launch spec: template_ids_first, template_ids_count and template_library belong to a template "
        "(template_socket)");
  sandbox::LaunchSpec library = t;
  library.template_library = "lib.so";
  CHECK(error_of(library) == "launch spec: a template's template_library is an absolute path");
  sandbox::LaunchSpec unnamed = f;
  unnamed.from_template_start_time = 0;
  CHECK(error_of(unnamed) ==
        "launch spec: a sandbox forked from a template names its pid 1, its start time and its socket");
  sandbox::LaunchSpec subordinate = f;
  subordinate.subordinate_uid = subordinate.subordinate_gid = 100000;
  CHECK(error_of(subordinate) == "launch spec: templates do not run with subordinate ids");
  CHECK(spec_error("from_template_pid", "-1") == "launch spec field from_template_pid: not an integer in 0..4194304");
}
