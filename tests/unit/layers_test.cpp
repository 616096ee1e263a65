// The result's sandbox_layers as the steps report them, and the enums of the
// runner's JSON boundary (status, warm, cgroup mode) with their exact strings.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "server/sandbox/cgroups.h"
#include "server/sandbox/layers.h"
#include "server/sandbox/spec.h"

using sandbox::Layer;
using sandbox::Layers;

namespace {
Layers all_but(std::vector<Layer> missing) {
  Layers l;
  for (unsigned i = 0; i <= static_cast<unsigned>(Layer::cgroups); ++i) {
    auto layer = static_cast<Layer>(i);
    bool skip = false;
    for (Layer m : missing) skip = skip || m == layer;
    if (!skip) l.add(layer);
  }
  return l;
}
}  // namespace

TEST_CASE("every step reported: the same list clients have always seen") {
  CHECK(sandbox::layer_names(all_but({}), 4, sandbox::cgroups::Mode::v2) ==
        std::vector<std::string>{"namespaces:user,pid,mount,net,ipc,uts,cgroup", "pivot_root", "readonly_root",
                                 "fd_hygiene", "rlimits", "no_new_privs", "landlock:abi4", "capabilities_dropped",
                                 "seccomp", "cgroups:v2", "host_uid:shared"});
  Layers own = all_but({});
  own.add(Layer::own_uid);
  own.add(Layer::user_limits);
  CHECK(sandbox::layer_names(own, 4, sandbox::cgroups::Mode::v2).back() == "user_limits");
  CHECK(sandbox::layer_names(own, 4, sandbox::cgroups::Mode::v2).rbegin()[1] == "host_uid:own");
}

TEST_CASE("a template's fork: its own host uid in a namespace the template's uid owns, named last") {
  Layers forked = all_but({});
  forked.add(Layer::own_uid);
  forked.add(Layer::user_limits);
  forked.add(Layer::template_fork);
  const auto names = sandbox::layer_names(forked, 7, sandbox::cgroups::Mode::v1);
  CHECK(names.back() == "template_fork");
  CHECK(names.rbegin()[1] == "user_limits");
  CHECK(names.rbegin()[2] == "host_uid:template");
  Layers shared = all_but({});
  shared.add(Layer::template_fork);
  CHECK(sandbox::layer_names(shared, 7, sandbox::cgroups::Mode::v1).rbegin()[1] == "host_uid:shared");
}

TEST_CASE("a layer no step reported is not listed") {
  auto names =
      sandbox::layer_names(all_but({Layer::landlock, Layer::cgroups, Layer::net_ns}), 0, sandbox::cgroups::Mode::none);
  CHECK(names == std::vector<std::string>{"namespaces:user,pid,mount,ipc,uts,cgroup", "pivot_root", "readonly_root",
                                          "fd_hygiene", "rlimits", "no_new_privs", "capabilities_dropped", "seccomp",
                                          "host_uid:shared"});
  CHECK(sandbox::layer_names(Layers(), 0, sandbox::cgroups::Mode::v1).empty());
}

TEST_CASE("the zygote's and pid 1's reports combine") {
  Layers zygote, pid1;
  zygote.add(Layer::user_ns);
  zygote.add(Layer::cgroups);
  pid1.add(Layer::seccomp);
  CHECK(sandbox::layer_names(zygote | pid1, 0, sandbox::cgroups::Mode::v1) ==
        std::vector<std::string>{"namespaces:user", "seccomp", "cgroups:v1", "host_uid:shared"});
  CHECK(Layers((zygote | pid1).bits()).has(Layer::seccomp));
}

TEST_CASE("status strings round-trip and nothing else parses") {
  for (const char* s : {"completed", "failed", "timed_out", "memory_exceeded", "cancelled", "sandbox_error"}) {
    auto parsed = sandbox::status_from_string(s);
    REQUIRE(parsed);
    CHECK(std::string(sandbox::to_string(*parsed)) == s);
  }
  CHECK_FALSE(sandbox::status_from_string("running"));
  CHECK_FALSE(sandbox::status_from_string(""));
}

TEST_CASE("warm strings: \"\" is cold") {
  CHECK(sandbox::warm_from_string("") == sandbox::Warm::cold);
  CHECK(sandbox::warm_from_string("exec") == sandbox::Warm::exec);
  CHECK(sandbox::warm_from_string("preload") == sandbox::Warm::preload);
  CHECK_FALSE(sandbox::warm_from_string("cold"));
  CHECK(std::string(sandbox::to_string(sandbox::Warm::cold)).empty());
}

TEST_CASE("an outcome with an unknown status is malformed") {
  sandbox::Outcome o;
  o.status = sandbox::Status::timed_out;
  auto j = sandbox::to_json(o);
  CHECK(j["status"] == "timed_out");
  auto back = sandbox::outcome_from_json(j);
  REQUIRE(back);
  CHECK(back->status == sandbox::Status::timed_out);
  j["status"] = "busy";
  auto bad = sandbox::outcome_from_json(j);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "malformed runner outcome: unknown status");
}

TEST_CASE("a spec's warm field: the same strings, the same error") {
  sandbox::LaunchSpec s;
  s.argv = {"/usr/bin/python3"};
  s.scratch_dir = s.harvest_dir = "/tmp/x";
  s.timeout_ms = 1000;
  s.warm = sandbox::Warm::preload;
  auto j = sandbox::to_json(s);
  CHECK(j["warm"] == "preload");
  auto back = sandbox::spec_from_json(j);
  REQUIRE(back);
  CHECK(back->warm == sandbox::Warm::preload);
  j["warm"] = "later";
  auto bad = sandbox::spec_from_json(j);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "warm must be \"\", \"exec\" or \"preload\"");
}

TEST_CASE("cgroup mode: JSON strings unchanged, unknown is none") {
  sandbox::cgroups::Host h;
  h.mode = sandbox::cgroups::Mode::v1;
  auto j = sandbox::cgroups::to_json(h);
  CHECK(j["mode"] == "v1");
  CHECK(sandbox::cgroups::host_from_json(j).mode == sandbox::cgroups::Mode::v1);
  j["mode"] = "v3";
  CHECK(sandbox::cgroups::host_from_json(j).mode == sandbox::cgroups::Mode::none);
  CHECK(std::string(sandbox::cgroups::to_string(sandbox::cgroups::Mode::none)) == "none");
}
