// The server's own cgroup directory: found and made once at start-up (serve and
// doctor alike), before any thread exists, and removed with every job cgroup in
// it when the server exits. Also removes what servers that are gone left behind.
// Server side only: never linked into the runner.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/sandbox/cgroups.h"

namespace sandbox::cgroup_host {

// Who made a per-server directory, read from its name
// (server-<pid namespace inode>-<pid>-<start time in ticks>).
enum class Owner { alive, gone, unknown };
Owner owner_of(std::string_view dir_name, uint64_t own_pidns);
// This process's directory name, as owner_of reads it.
std::string own_dir_name();

// What a job gets without cgroups, for the log, doctor and the README.
inline constexpr const char* kWithoutCgroups =
    "memory is capped by RLIMIT_DATA per process only (not memory_exceeded, shared memory refused), "
    "processes by RLIMIT_NPROC (counted per host uid, so shared by jobs of one server), "
    "CPU only by the deadline and RLIMIT_CPU";

class ServerTree {
 public:
  // Probes the host and makes this server's directory:
  //  - root: <cgroup2>/throwbox/server-X, or server-X under each v1
  //    controller's <mount>/throwbox (co-mounted controllers share one);
  //  - a delegated v2 cgroup (any uid, root in a container too): when this
  //    process is alone in its cgroup it moves into <own>/throwbox-server-X/server
  //    and jobs go beside it; when others share its cgroup (a terminal, a
  //    desktop app) the jobs go in <parent>/throwbox-server-X, if the parent is
  //    delegated too;
  //  - none: host().why_not says why and what to do.
  // Before that, removes the directories of servers that are gone wherever it
  // looks (their names carry pid and start time, checked against /proc).
  static std::unique_ptr<ServerTree> set_up();
  ~ServerTree();
  ServerTree(const ServerTree&) = delete;
  ServerTree& operator=(const ServerTree&) = delete;

  const cgroups::Host& host() const { return host_; }
  // What set_up removed of servers that are gone, and what it saw (for the log).
  size_t orphans_removed() const { return orphans_removed_; }
  const std::vector<std::string>& notes() const { return notes_; }
  // Kills and removes every job cgroup left in this server's directories, then
  // the directories, and puts this process back where it started. Idempotent.
  void remove_all();

 private:
  ServerTree() = default;
  cgroups::Host host_;
  std::vector<std::string> dirs_;   // this server's directories (one, or one per v1 hierarchy)
  std::vector<std::string> bases_;  // root: the shared throwbox directories, removed when empty
  std::string self_leaf_;           // where this process moved (own-cgroup case), else empty
  std::string original_;            // and where it came from
  bool enabled_original_ = false;   // whether set_up enabled controllers in original_
  size_t orphans_removed_ = 0;
  std::vector<std::string> notes_;
  friend struct Builder;
};

}  // namespace sandbox::cgroup_host
