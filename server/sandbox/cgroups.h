// cgroups for one job: memory (no swap), pids and CPU limits, accounting, OOM
// detection and whole-tree kill, under the server's own directory (v2, or one
// per v1 hierarchy). The server finds and makes that directory at start-up
// (cgroup_host.h); the per-job cgroup is made by the runner's zygote.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/util/result.h"

namespace sandbox::cgroups {

// Which cgroup hierarchy jobs get; JSON (and the result's "cgroups:<mode>") "v2", "v1", "none".
enum class Mode { none, v1, v2 };
const char* to_string(Mode mode);

struct Host {
  Mode mode = Mode::none;
  std::string v2_base;  // v2: this server's directory; job cgroups are made in it
  // v1: controller (memory, pids, cpu, cpuacct) -> this server's directory in
  // that controller's hierarchy; co-mounted controllers (cpu,cpuacct) share one.
  std::map<std::string, std::string> v1_base;
  std::string why_not;    // Mode::none: the reason, and the fix
  std::string placement;  // how the directory was found (cgroup_host.cpp)
};

struct Limits {
  uint64_t memory_max_bytes = 0;
  uint64_t pids_max = 0;
  double cpu_max_cores = 0;  // 0: no CPU quota
};

struct Stats {
  uint64_t cpu_us = 0;  // every process the cgroup has held, since it was made
  uint64_t peak_memory_bytes = 0;
  bool oom_killed = false;
  bool valid = false;
};

class Job {
 public:
  // Creates the job's cgroup(s) and writes the limits (the runner's zygote).
  static util::Result<Job> create_in_parent(const Host& host, const std::string& job_id, const Limits& limits);
  // The two halves of create_in_parent: the directories, then the limits. A
  // spare runner's zygote makes its cgroup and joins it while it waits
  // (zygote.h); the limits are written once the spec came, before pid 1.
  static util::Result<Job> make_in_parent(const Host& host, const std::string& job_id);
  util::Status limit_in_parent(const Limits& limits) const;
  // The job's cgroup as create_in_parent names it, made elsewhere (the zygote)
  // or not at all: for statistics, kill and destroy.
  static Job named_in_parent(const Host& host, const std::string& job_id);
  Job() = default;
  util::Status attach_in_parent(pid_t pid) const;
  Stats read_stats() const;
  // The CPU the cgroup has used so far (0 where the host keeps no count): a
  // warm sandbox's at its claim, so the job is not charged its start-up.
  uint64_t cpu_us() const;
  // v2: cgroup.kill; v1 relies on the pid namespace dying with its pid 1.
  void kill_all() const;
  // rmdir of every directory, retried briefly while the last processes exit.
  void destroy() const;
  const std::vector<std::string>& dirs() const { return dirs_; }
  Mode mode() const { return mode_; }

 private:
  std::string dir_of(const std::string& ctl) const;  // "" when the host lacks it

  Mode mode_ = Mode::none;
  std::vector<std::string> dirs_;              // every directory made
  std::map<std::string, std::string> by_ctl_;  // controller (or "v2") -> directory
};

// One write of `value` to a cgroup file (open, write, close), naming the file
// and errno on failure; and a small cgroup file's text ("" when unreadable).
util::Status write_file(const std::string& path, const std::string& value);
std::string read_small(const std::string& path);

// Kills every process in the cgroup directory `dir` (v2: cgroup.kill; v1 or a
// kernel before 5.14: SIGKILL to each pid listed), waits up to timeout_ms for
// it to empty and removes it. Trusted side only. False if it is still there.
bool kill_and_remove(const std::string& dir, int timeout_ms);

nlohmann::json to_json(const Host& host);
Host host_from_json(const nlohmann::json& j);

}  // namespace sandbox::cgroups
