// The names that decide whether a cgroup directory belongs to a live server
// (sandbox::cgroup_host::owner_of): only a server of this pid namespace that is
// gone, or whose pid was reused, may be reclaimed; anything unreadable is left
// alone. And a v1 job on co-mounted controllers (cpu,cpuacct) names each
// directory once (it was made twice, and the second mkdir failed every job).
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "server/sandbox/cgroup_host.h"
#include "server/sandbox/cgroups.h"

using sandbox::cgroup_host::Owner;
using sandbox::cgroup_host::owner_of;

namespace {

uint64_t pidns() {
  struct stat st {};
  REQUIRE(::stat("/proc/self/ns/pid", &st) == 0);
  return static_cast<uint64_t>(st.st_ino);
}

// pidns-pid-start of this process, split.
struct Name {
  std::string ns, pid, start;
};
Name split(const std::string& name) {
  size_t a = name.find('-'), b = name.find('-', a + 1);
  return {name.substr(0, a), name.substr(a + 1, b - a - 1), name.substr(b + 1)};
}

}  // namespace

TEST_CASE("this process's own name reads as alive") {
  CHECK(owner_of(sandbox::cgroup_host::own_dir_name(), pidns()) == Owner::alive);
}

TEST_CASE("a pid that was reused (another start time) reads as gone") {
  Name n = split(sandbox::cgroup_host::own_dir_name());
  std::string other = n.ns + "-" + n.pid + "-" + std::to_string(std::stoull(n.start) + 1);
  CHECK(owner_of(other, pidns()) == Owner::gone);
}

TEST_CASE("a pid that exited reads as gone") {
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  int st = 0;
  REQUIRE(::waitpid(child, &st, 0) == child);
  std::string name = std::to_string(pidns()) + "-" + std::to_string(child) + "-12345";
  CHECK(owner_of(name, pidns()) == Owner::gone);
}

TEST_CASE("another pid namespace's server is never judged from here") {
  Name n = split(sandbox::cgroup_host::own_dir_name());
  CHECK(owner_of(std::to_string(pidns() + 1) + "-" + n.pid + "-1", pidns()) == Owner::unknown);
  CHECK(owner_of(std::to_string(pidns() + 1) + "-999999999-1", pidns()) == Owner::unknown);
}

TEST_CASE("names that are not server-<pidns>-<pid>-<start> are left alone") {
  const uint64_t ns = pidns();
  const std::string p = std::to_string(ns);
  for (const char* bad :
       {"", "-", "--", "1-2", "1-2-3-4", "x-1-2", "1-x-2", "1-2-x", "1--2", "-1-2", "99999999999999999999999-1-2"})
    CHECK_MESSAGE(owner_of(bad, ns) == Owner::unknown, bad);
  CHECK(owner_of(p + "-0-1", ns) == Owner::unknown);
  CHECK(owner_of(p + "-1-2 ", ns) == Owner::unknown);
  CHECK(owner_of(p + "-1-2/..", ns) == Owner::unknown);
}

TEST_CASE("v1: co-mounted cpu and cpuacct are one directory of the job") {
  sandbox::cgroups::Host host;
  host.mode = sandbox::cgroups::Mode::v1;
  host.v1_base = {{"memory", "/sys/fs/cgroup/memory/throwbox/server-1-2-3"},
                  {"pids", "/sys/fs/cgroup/pids/throwbox/server-1-2-3"},
                  {"cpu", "/sys/fs/cgroup/cpu,cpuacct/throwbox/server-1-2-3"},
                  {"cpuacct", "/sys/fs/cgroup/cpu,cpuacct/throwbox/server-1-2-3"}};
  auto job = sandbox::cgroups::Job::named_in_parent(host, "abc");
  CHECK(job.dirs().size() == 3);
  CHECK(job.dirs() == std::vector<std::string>{"/sys/fs/cgroup/cpu,cpuacct/throwbox/server-1-2-3/job-abc",
                                               "/sys/fs/cgroup/memory/throwbox/server-1-2-3/job-abc",
                                               "/sys/fs/cgroup/pids/throwbox/server-1-2-3/job-abc"});
}
