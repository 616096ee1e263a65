// cgroups for one job: memory (no swap), pids and CPU limits, accounting, OOM
// detection and whole-tree kill. v2 where a delegated subtree is writable, v1
// where that is what the host has. Detection runs in the server at start-up
// (and in `throwbox doctor`); the per-job cgroup is made by the runner's zygote.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/util/result.h"

namespace sandbox::cgroups {

struct Host {
  std::string mode = "none";                  // "v2", "v1" or "none"
  std::string v2_base;                         // v2: directory job cgroups are made in
  std::map<std::string, std::string> v1_base;  // v1: controller -> directory (memory, pids, cpu, cpuacct)
  std::string why_not;                         // mode "none": the reason, and the fix
};

// Probes the host. As root: v2 under <cgroup2>/throwbox, or v1 under each
// controller's mount/throwbox. As a normal user: v2 only, in a delegated
// subtree (the server's own cgroup, after moving itself into a leaf).
Host detect(bool move_self_into_leaf);

struct Limits {
  uint64_t memory_max_bytes = 0;
  uint64_t pids_max = 0;
  double cpu_max_cores = 0;  // 0: no CPU quota
};

struct Stats {
  uint64_t cpu_ms = 0;
  uint64_t peak_memory_bytes = 0;
  bool oom_killed = false;
  bool valid = false;
};

class Job {
 public:
  // Creates the job's cgroup(s) and writes the limits (the runner's zygote).
  static util::Result<Job> create_in_parent(const Host& host, const std::string& job_id, const Limits& limits);
  // The job's cgroup as create_in_parent names it, made elsewhere (the zygote)
  // or not at all: for statistics, kill and destroy.
  static Job named_in_parent(const Host& host, const std::string& job_id);
  Job() = default;
  util::Status attach_in_parent(pid_t pid) const;
  Stats read_stats() const;
  // v2: cgroup.kill; v1 relies on the pid namespace dying with its pid 1.
  void kill_all() const;
  // rmdir of every directory, retried briefly while the last processes exit.
  void destroy() const;
  const std::string& mode() const { return mode_; }

 private:
  std::string mode_ = "none";
  std::vector<std::string> dirs_;              // every directory made
  std::map<std::string, std::string> by_ctl_;  // controller (or "v2") -> directory
};

nlohmann::json to_json(const Host& host);
Host host_from_json(const nlohmann::json& j);

}  // namespace sandbox::cgroups
