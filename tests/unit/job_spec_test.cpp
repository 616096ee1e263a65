// The launch spec a request resolves to, without a runner: the policy's
// limits and identity are what the sandbox gets, a request cannot raise
// them, and every refusal names its field.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "server/broker/job_spec.h"
#include "server/policy/policy.h"

using nlohmann::json;

namespace {

policy::Policy test_policy() {
  json doc{{"version", 1},
           {"runtimes",
            {{"sh", {{"command", json::array({"/bin/sh", "-e"})}, {"code_file", "main.sh"}}},
             {"py", {{"command", json::array({"/bin/sh"})}, {"code_file", "main.py"}, {"loader", "python"}}}}},
           {"limits",
            {{"timeout_s", {{"default", 10}, {"max", 60}}},
             {"code_max_bytes", 2048u},
             {"inputs_per_job_max", 2u},
             {"input_max_bytes", 1000u},
             {"memory_max_bytes", 64u << 20},
             {"pids_max", 32u},
             {"stdout_max_bytes", 4096u}}},
           {"sandbox",
            {{"readonly_paths", json::array({"/usr"})},
             {"env", {{"LANG", "C.UTF-8"}}},
             {"uid_range", {{"first", 70000u}, {"count", 10u}}}}}};
  auto p = policy::parse(doc, "test.json");
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
  return *p;
}

broker::SpecHost test_host(const policy::Policy&) {
  return broker::spec_host("/state", json{{"mode", "none"}}, "BPF==", {96, 8000, 16, 1600});
}

broker::JobRequest request(std::string runtime = "sh") {
  broker::JobRequest r;
  r.tenant = "alice";
  r.runtime = std::move(runtime);
  r.code = "echo hi";
  return r;
}

store::InputRecord input(std::string id, std::string name) {
  store::InputRecord in;
  in.input_id = std::move(id);
  in.name = std::move(name);
  in.blob_path = "/state/blobs/" + in.input_id;
  return in;
}

using Lookups = std::vector<util::Result<store::InputRecord>>;

std::string error_of(const policy::Policy& p, const broker::JobRequest& r, const Lookups& inputs = {}) {
  auto spec = broker::build_job_spec(p, test_host(p), r, inputs, "job1");
  REQUIRE_FALSE(spec.ok());
  CHECK(spec.error().code == util::ErrorCode::kInvalidArgument);
  return spec.error().message;
}

}  // namespace

TEST_CASE("a job's spec carries the policy's limits, identity and layers") {
  const policy::Policy p = test_policy();
  broker::JobRequest r = request();
  r.timeout_s = 2.5;
  auto spec = broker::build_job_spec(p, test_host(p), r, {}, "job1");
  REQUIRE(spec.ok());
  CHECK(spec->job_id == "job1");
  CHECK(spec->argv == std::vector<std::string>{"/bin/sh", "-e", "/work/main.sh"});
  CHECK(spec->code_path == "/work/main.sh");
  CHECK(spec->code == "echo hi");
  CHECK(spec->env == std::vector<std::string>{"LANG=C.UTF-8"});
  CHECK(spec->readonly_paths == std::vector<std::string>{"/usr"});
  CHECK(spec->timeout_ms == 2500);
  CHECK(spec->memory_max_bytes == 64u << 20);
  CHECK(spec->pids_max == 32);
  CHECK(spec->stdout_max_bytes == 4096);
  CHECK(spec->scratch_dir == "/state/run/job1");
  CHECK(spec->harvest_dir == "/state/run/job1/outputs");
  CHECK(spec->sigpending_max == 96);
  CHECK(spec->msgqueue_max_bytes == 8000);
  CHECK(spec->inotify_instances_max == 16);
  CHECK(spec->inotify_watches_max == 1600);
  CHECK(spec->seccomp_bpf_base64 == "BPF==");
  CHECK(spec->cgroup_host == json{{"mode", "none"}});
  CHECK(spec->warm == sandbox::Warm::cold);
  CHECK(spec->inputs.empty());
}

TEST_CASE("no timeout_s: the policy's default") {
  const policy::Policy p = test_policy();
  auto spec = broker::build_job_spec(p, test_host(p), request(), {}, "job1");
  REQUIRE(spec.ok());
  CHECK(spec->timeout_ms == 10000);
}

TEST_CASE("a timeout_s under half a millisecond is 1 ms, a spec the runner takes") {
  const policy::Policy p = test_policy();
  broker::JobRequest r = request();
  r.timeout_s = 0.0004;
  auto spec = broker::build_job_spec(p, test_host(p), r, {}, "job1");
  REQUIRE(spec.ok());
  CHECK(spec->timeout_ms == 1);
  CHECK(sandbox::spec_from_json(sandbox::to_json(*spec)).ok());
}

TEST_CASE("a spec's identity is its lease's") {
  const policy::Policy p = test_policy();
  auto spec = broker::build_job_spec(p, test_host(p), request(), {}, "job1");
  REQUIRE(spec.ok());
  broker::set_identity(*spec, broker::Identity{70003, 70003, true, false});
  CHECK(spec->host_uid == 70003);
  CHECK(spec->host_gid == 70003);
  CHECK(spec->own_user_ns);
  auto back = sandbox::spec_from_json(to_json(*spec));
  REQUIRE(back.ok());
  CHECK(back->host_uid == 70003);
  CHECK(back->own_user_ns);
  CHECK(back->sigpending_max == 96);
  CHECK(back->inotify_watches_max == 1600);
}

TEST_CASE("each sandbox gets 1/(sandboxes + 1) of the per-user limits, never 0") {
  auto s = broker::user_shares({96363, 819200, 128, 192530}, 7);
  CHECK(s.sigpending == 12045);
  CHECK(s.msgqueue_bytes == 102400);
  CHECK(s.inotify_instances == 16);
  CHECK(s.inotify_watches == 24066);
  CHECK(7 * s.inotify_instances < 128);  // all at their limit: the server's user keeps some
  auto tiny = broker::user_shares({3, 3, 3, 3}, 7);
  CHECK(tiny.inotify_instances == 1);
}

TEST_CASE("sandboxes at once: running jobs, idle warm ones, one more") {
  policy::Policy p = test_policy();
  p.admission.jobs_running_max = 4;
  p.pool.enabled = false;
  CHECK(broker::sandboxes_max(p) == 5);
  p.pool.enabled = true;
  p.pool.size = 2;
  p.pool.runtimes = {"py", "sh"};
  CHECK(broker::sandboxes_max(p) == 9);
}

TEST_CASE("inputs are bound by name, in the request's order") {
  const policy::Policy p = test_policy();
  broker::JobRequest r = request();
  r.input_ids = {"i2", "i1"};
  auto spec = broker::build_job_spec(p, test_host(p), r, {input("i2", "b.csv"), input("i1", "a.csv")}, "job1");
  REQUIRE(spec.ok());
  REQUIRE(spec->inputs.size() == 2);
  CHECK(spec->inputs[0].name == "b.csv");
  CHECK(spec->inputs[0].host_path == "/state/blobs/i2");
  CHECK(spec->inputs[1].name == "a.csv");
}

TEST_CASE("a request cannot go past the policy") {
  const policy::Policy p = test_policy();
  broker::JobRequest r = request("ruby");
  CHECK(error_of(p, r) == "runtime: \"ruby\" is not offered here; available: py, sh");
  r = request();
  r.code = std::string(2049, 'x');
  CHECK(error_of(p, r) == "code: longer than the policy's 2048 bytes");
  for (double t : {0.0, -1.0, 60.5}) {
    r = request();
    r.timeout_s = t;
    CHECK(error_of(p, r) == "timeout_s: must be > 0 and at most 60 seconds (the policy's ceiling)");
  }
  r = request();
  r.input_ids = {"a", "b", "c"};
  CHECK(error_of(p, r, {input("a", "a"), input("b", "b"), input("c", "c")}) ==
        "input_ids: more than 2 inputs (input_ids and artifact_ids together)");
}

TEST_CASE("inputs: a failed lookup keeps its code; two of one name are refused") {
  const policy::Policy p = test_policy();
  broker::JobRequest r = request();
  r.input_ids = {"i1", "nope"};
  auto spec = broker::build_job_spec(
      p, test_host(p), r, {input("i1", "a.csv"), util::make_error(util::ErrorCode::kNotFound, "unknown input_id")},
      "j");
  REQUIRE_FALSE(spec.ok());
  CHECK(spec.error().code == util::ErrorCode::kNotFound);
  CHECK(spec.error().message == "input_ids: \"nope\": unknown input_id");
  r.input_ids = {"i1", "i2"};
  CHECK(error_of(p, r, {input("i1", "a.csv"), input("i2", "a.csv")}) ==
        "input_ids: two inputs are both named \"a.csv\"; /inputs/<name> must be unique per run");
}

TEST_CASE("a warm spec has no code and no inputs, and the longest deadline a job may ask for") {
  const policy::Policy p = test_policy();
  sandbox::LaunchSpec spec = broker::build_warm_spec(p, test_host(p), *p.find_runtime("py"), "w1");
  CHECK(spec.warm == sandbox::Warm::preload);
  REQUIRE(spec.argv.size() == 4);
  CHECK(spec.argv[1] == "-c");
  CHECK(spec.argv[3] == "/work/main.py");
  CHECK(spec.code.empty());
  CHECK(spec.inputs.empty());
  CHECK(spec.timeout_ms == 60000);
  CHECK(spec.inputs_max_files == 2);
  // An input may be an upload or an artifact: room for the larger of the two caps.
  CHECK(spec.inputs_max_bytes == 2 * (std::max<uint64_t>(1000, p.artifacts.file_max_bytes) + 4096));
  CHECK(spec.workspace_max_bytes == p.workspaces.size_max_bytes);
  CHECK(spec.scratch_dir == "/state/run/w1");
  sandbox::LaunchSpec exec = broker::build_warm_spec(p, test_host(p), *p.find_runtime("sh"), "w2");
  CHECK(exec.warm == sandbox::Warm::exec);
  CHECK(exec.argv == std::vector<std::string>{"/bin/sh", "-e", "/work/main.sh"});
}

// The warm-up is a JSON string literal in the loader, which Python reads as
// the same text (quotes, backslashes, newlines and all); run before the
// freeze, in the template and again in its forks before they say ready.
TEST_CASE("a runtime's warm-up runs after the preload: before the freeze, and again in a template's forks made ahead") {
  const std::string warmup = "import json\nx = json.dumps({'q': \"a\\\\b\"})  # \u00e9\n";
  json doc{{"version", 1},
           {"runtimes",
            {{"data",
              {{"command", json::array({"/bin/sh"})},
               {"code_file", "main.py"},
               {"loader", "python"},
               {"preload", json::array({"json"})},
               {"warmup", warmup}}}}},
           {"sandbox", {{"readonly_paths", json::array({"/usr"})}}}};
  auto p = policy::parse(doc, "test.json");
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
  const policy::Runtime& data = *p->find_runtime("data");
  const std::string literal = json(warmup).dump();
  const std::string run =
      "sys.stdout = None; exec(compile(" + literal + ", '<warmup>', 'exec'), {}); sys.stdout = sys.__stdout__";
  CHECK(broker::preload_statement(data) == "import json; import gc\n    " + run + "\n    gc.freeze()");
  const std::string t = broker::template_statement(data);
  const size_t first = t.find(run), freeze = t.find("gc.freeze()"), serve = t.find("throwbox_template_serve");
  const size_t reseed = t.find("m = None"), again = t.find(run, first + 1);
  REQUIRE(first != std::string::npos);
  REQUIRE(again != std::string::npos);
  CHECK(first < freeze);
  CHECK(freeze < serve);
  CHECK(serve < reseed);
  CHECK(reseed < again);
  CHECK(t.find(run, again + 1) == std::string::npos);
  // Only in a fork made ahead of any claim (the loop returned 2).
  const size_t gate = t.find("    if ahead == 2:\n");
  REQUIRE(gate != std::string::npos);
  CHECK(reseed < gate);
  CHECK(gate < again);
  CHECK(t.find("    if ahead not in (1, 2):\n        os._exit(125)") < reseed);
  // Without one, the fork still writes the loader's own pages before it says ready.
  doc["runtimes"]["data"].erase("warmup");
  auto q = policy::parse(doc, "test.json");
  REQUIRE(q.ok());
  CHECK(broker::preload_statement(*q->find_runtime("data")) == "import json; import gc; gc.freeze()");
  const std::string u = broker::template_statement(*q->find_runtime("data"));
  CHECK(u.find("<warmup>") == std::string::npos);
  CHECK(u.find("gc.collect(); gc.get_objects()") > u.find("m = None"));
}

TEST_CASE("a preloading runtime's loader imports its modules before it says ready; both freeze what is loaded") {
  json doc{{"version", 1},
           {"runtimes",
            {{"py", {{"command", json::array({"/bin/sh"})}, {"code_file", "main.py"}, {"loader", "python"}}},
             {"data",
              {{"command", json::array({"/bin/sh"})},
               {"code_file", "main.py"},
               {"loader", "python"},
               {"preload", json::array({"numpy", "matplotlib.pyplot"})},
               {"cache", {{"code", "import matplotlib.font_manager"}, {"env", "MPLCONFIGDIR"}}}}}}},
           {"sandbox",
            {{"readonly_paths", json::array({"/usr"})},
             {"env", {{"MPLCONFIGDIR", "/tmp/matplotlib"}, {"LANG", "C.UTF-8"}}}}}};
  auto p = policy::parse(doc, "test.json");
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
  const policy::Runtime& data = *p->find_runtime("data");
  CHECK(broker::preload_statement(data) == "import numpy, matplotlib.pyplot; import gc; gc.freeze()");
  CHECK(broker::preload_statement(*p->find_runtime("py")) == "import gc; gc.freeze()");
  sandbox::LaunchSpec warm = broker::build_warm_spec(*p, test_host(*p), data, "w1");
  REQUIRE(warm.argv.size() == 4);
  const std::string& loader = warm.argv[2];
  // The imports come before the ready byte, so they are done before any claim.
  const size_t imports = loader.find("import numpy, matplotlib.pyplot");
  const size_t ready = loader.find("os.write(4, b'r')");
  REQUIRE(imports != std::string::npos);
  REQUIRE(ready != std::string::npos);
  CHECK(imports < ready);
  CHECK(loader.find("__THROWBOX_") == std::string::npos);
  sandbox::LaunchSpec plain = broker::build_warm_spec(*p, test_host(*p), *p->find_runtime("py"), "w2");
  CHECK(plain.argv[2].find("    import gc; gc.freeze()\n    os.write(4, b'r')") != std::string::npos);

  SUBCASE("the cache: bound read-only, linked from the env's /tmp directory; none until built") {
    CHECK(warm.cache_dir.empty());
    broker::RuntimeCache cache{"/state/cache/c1", {"fontlist-v330.json"}};
    broker::apply_cache(*p, data, cache, warm);
    CHECK(warm.cache_dir == "/state/cache/c1");
    CHECK(warm.cache_link_dir == "/tmp/matplotlib");
    CHECK(warm.cache_files == std::vector<std::string>{"fontlist-v330.json"});
    // A runtime without a cache block never gets one.
    broker::apply_cache(*p, *p->find_runtime("py"), cache, plain);
    CHECK(plain.cache_dir.empty());
    // The spec survives the runner's validation.
    auto back = sandbox::spec_from_json(sandbox::to_json(warm));
    REQUIRE_MESSAGE(back.ok(), (back.ok() ? "" : back.error().message));
    CHECK(back->cache_files == warm.cache_files);
  }
  SUBCASE("the sandbox that builds it: cold, the cache's code, its env pointing at /outputs") {
    sandbox::LaunchSpec build = broker::build_cache_spec(*p, test_host(*p), data, "c1");
    CHECK(build.warm == sandbox::Warm::cold);
    CHECK(build.code == "import matplotlib.font_manager");
    CHECK(build.argv == std::vector<std::string>{"/bin/sh", "/work/main.py"});
    CHECK(build.inputs.empty());
    CHECK_FALSE(build.network);
    CHECK(std::find(build.env.begin(), build.env.end(), "MPLCONFIGDIR=/outputs") != build.env.end());
    CHECK(std::find(build.env.begin(), build.env.end(), "LANG=C.UTF-8") != build.env.end());
    CHECK(build.cache_dir.empty());
  }
}

TEST_CASE("the runner refuses a cache spec it could be misled by") {
  const policy::Policy p = test_policy();
  sandbox::LaunchSpec spec = broker::build_warm_spec(p, test_host(p), *p.find_runtime("py"), "w1");
  auto refused = [&](auto change) {
    sandbox::LaunchSpec s = spec;
    s.cache_dir = "/state/cache/c1";
    s.cache_link_dir = "/tmp/matplotlib";
    s.cache_files = {"fontlist.json"};
    change(s);
    auto r = sandbox::spec_from_json(sandbox::to_json(s));
    return !r.ok() && r.error().message.find("cache") != std::string::npos;
  };
  CHECK_FALSE(refused([](sandbox::LaunchSpec&) {}));
  CHECK(refused([](sandbox::LaunchSpec& s) { s.cache_dir = "relative/dir"; }));
  CHECK(refused([](sandbox::LaunchSpec& s) { s.cache_dir = ""; }));
  CHECK(refused([](sandbox::LaunchSpec& s) { s.cache_link_dir = "/work/x"; }));
  CHECK(refused([](sandbox::LaunchSpec& s) { s.cache_link_dir = "/tmp/a/b"; }));
  CHECK(refused([](sandbox::LaunchSpec& s) { s.cache_link_dir = "/tmp/.."; }));
  CHECK(refused([](sandbox::LaunchSpec& s) { s.cache_files = {"../../etc/passwd"}; }));
  CHECK(refused([](sandbox::LaunchSpec& s) { s.cache_files = {".."}; }));
  CHECK(refused([](sandbox::LaunchSpec& s) { s.cache_files.assign(sandbox::kCacheFilesMax + 1, "f"); }));
}
