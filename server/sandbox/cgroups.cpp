// cgroup v2 and v1 handling. Trusted side only (server start-up, runner and zygote).
// Every limit write that fails makes the job a sandbox_error: a cgroup without
// its limit is not a boundary.
#include "server/sandbox/cgroups.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <fstream>
#include <sstream>

#include "server/util/fd.h"
#include "server/util/fs.h"
#include "server/util/text.h"

namespace sandbox::cgroups {
namespace {

constexpr const char* kV1Controllers[] = {"memory", "pids", "cpu", "cpuacct"};
constexpr uint64_t kCpuPeriodUs = 100000;

util::Status write_file(const std::string& path, const std::string& value) {
  util::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return util::make_error("sandbox", util::call_error("open", path, errno));
  if (::write(fd.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size()))
    return util::make_error("sandbox", util::call_error("write", path + " <- " + value, errno));
  return util::ok_status();
}

std::string read_small(const std::string& path) {
  auto r = util::read_file(path, 64 * 1024);
  return r ? *r : std::string();
}

// "key value" lines (memory.events, cpu.stat, memory.oom_control). Parsed by
// hand: it runs between the program's end and the outcome, and the first
// istringstream of a process pays for the locale (about 0.2 ms here).
uint64_t keyed_value(const std::string& text, const std::string& key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    size_t space = line.find(' ');
    if (space == std::string_view::npos || line.substr(0, space) != key) continue;
    return std::strtoull(std::string(line.substr(space + 1)).c_str(), nullptr, 10);
  }
  return 0;
}

struct Mount {
  std::string path;
  std::string fstype;
  std::string options;  // super options: controllers for v1
};

std::vector<Mount> cgroup_mounts() {
  std::vector<Mount> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream pre(line.substr(0, dash)), post(line.substr(dash + 3));
    std::string id, parent, devno, root, mountpoint, fstype, source, super;
    pre >> id >> parent >> devno >> root >> mountpoint;
    post >> fstype >> source >> super;
    if (fstype == "cgroup2" || fstype == "cgroup") out.push_back({mountpoint, fstype, super});
  }
  return out;
}

bool has_option(const std::string& options, const std::string& opt) {
  std::istringstream in(options);
  std::string o;
  while (std::getline(in, o, ','))
    if (o == opt) return true;
  return false;
}

// The server's own v2 cgroup path ("0::/path" in /proc/self/cgroup).
std::string own_v2_path() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return "";
}

bool controllers_available(const std::string& dir) {
  std::string c = read_small(dir + "/cgroup.controllers");
  return c.find("memory") != std::string::npos && c.find("pids") != std::string::npos &&
         c.find("cpu") != std::string::npos;
}

util::Status enable_subtree(const std::string& dir) {
  return write_file(dir + "/cgroup.subtree_control", "+memory +pids +cpu");
}

Host detect_v2(const std::string& mount, bool move_self) {
  Host h;
  if (!controllers_available(mount)) {
    h.why_not = "cgroup v2 at " + mount + " has no memory/pids/cpu controllers";
    return h;
  }
  if (::geteuid() == 0) {
    std::string base = mount + "/throwbox";
    if (auto s = enable_subtree(mount); !s) {
      h.why_not = s.error().message;
      return h;
    }
    if (auto s = util::make_dirs(base, 0755); !s) {
      h.why_not = s.error().message;
      return h;
    }
    if (auto s = enable_subtree(base); !s) {
      h.why_not = s.error().message;
      return h;
    }
    h.mode = "v2";
    h.v2_base = base;
    return h;
  }
  // A normal user: only a subtree delegated to us (systemd Delegate=yes) will do.
  std::string own = mount + own_v2_path();
  if (::access((own + "/cgroup.subtree_control").c_str(), W_OK) != 0 ||
      ::access((own + "/cgroup.procs").c_str(), W_OK) != 0) {
    h.why_not = "cgroup v2 subtree " + own + " is not delegated to uid " + std::to_string(::geteuid()) +
                " (run throwbox in a systemd unit or scope with Delegate=yes)";
    return h;
  }
  if (move_self) {
    // No internal processes: the server moves into a leaf before enabling controllers.
    std::string leaf = own + "/throwbox-server";
    if (::mkdir(leaf.c_str(), 0755) != 0 && errno != EEXIST) {
      h.why_not = util::call_error("mkdir", leaf, errno);
      return h;
    }
    if (auto s = write_file(leaf + "/cgroup.procs", std::to_string(::getpid())); !s) {
      h.why_not = s.error().message;
      return h;
    }
    if (auto s = enable_subtree(own); !s) {
      h.why_not = s.error().message + " (other processes share the server's cgroup?)";
      return h;
    }
  }
  h.mode = "v2";
  h.v2_base = own;
  return h;
}

Host detect_v1(const std::vector<Mount>& mounts) {
  Host h;
  if (::geteuid() != 0) {
    h.why_not = "only cgroup v1 controllers here, and v1 cannot be delegated to a normal user";
    return h;
  }
  for (const char* ctl : kV1Controllers) {
    for (auto& m : mounts)
      if (m.fstype == "cgroup" && has_option(m.options, ctl)) h.v1_base[ctl] = m.path + "/throwbox";
    if (!h.v1_base.count(ctl)) {
      h.v1_base.clear();
      h.why_not = std::string("no cgroup v1 hierarchy with the ") + ctl + " controller";
      return h;
    }
  }
  for (auto& [ctl, base] : h.v1_base) {
    if (::mkdir(base.c_str(), 0755) != 0 && errno != EEXIST) {
      h.why_not = util::call_error("mkdir", base, errno);
      h.v1_base.clear();
      return h;
    }
  }
  h.mode = "v1";
  return h;
}

int64_t now_ms() {
  struct timespec ts {};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace

Host detect(bool move_self_into_leaf) {
  auto mounts = cgroup_mounts();
  std::string why;
  for (auto& m : mounts) {
    if (m.fstype != "cgroup2") continue;
    Host h = detect_v2(m.path, move_self_into_leaf);
    if (h.mode == "v2") return h;
    why = h.why_not;
  }
  Host h = detect_v1(mounts);
  if (h.mode == "v1") return h;
  if (!why.empty()) h.why_not = why + "; " + h.why_not;
  if (mounts.empty()) h.why_not = "no cgroup filesystem is mounted";
  return h;
}

util::Result<Job> Job::create_in_parent(const Host& host, const std::string& job_id, const Limits& lim) {
  Job job;
  job.mode_ = host.mode;
  if (host.mode == "none") return job;
  auto fail = [&](util::Status s) -> util::Result<Job> {
    job.destroy();
    return s.error();
  };
  if (host.mode == "v2") {
    std::string dir = host.v2_base + "/job-" + job_id;
    if (::mkdir(dir.c_str(), 0755) != 0) return util::make_error("sandbox", util::call_error("mkdir", dir, errno));
    job.dirs_.push_back(dir);
    job.by_ctl_["v2"] = dir;
    // Memory: a hard cap, and no swap to spill into.
    if (auto s = write_file(dir + "/memory.max", std::to_string(lim.memory_max_bytes)); !s) return fail(s);
    if (::access((dir + "/memory.swap.max").c_str(), F_OK) == 0)
      if (auto s = write_file(dir + "/memory.swap.max", "0"); !s) return fail(s);
    // Fork bombs: a task count for the whole tree.
    if (auto s = write_file(dir + "/pids.max", std::to_string(lim.pids_max)); !s) return fail(s);
    // CPU: a bandwidth quota, so one job cannot starve the host.
    if (lim.cpu_max_cores > 0) {
      auto quota = static_cast<uint64_t>(std::llround(lim.cpu_max_cores * kCpuPeriodUs));
      if (auto s = write_file(dir + "/cpu.max", std::to_string(quota) + " " + std::to_string(kCpuPeriodUs)); !s)
        return fail(s);
    }
    return job;
  }
  for (auto& [ctl, base] : host.v1_base) {
    std::string dir = base + "/job-" + job_id;
    if (::mkdir(dir.c_str(), 0755) != 0) {
      int e = errno;
      job.destroy();
      return util::make_error("sandbox", util::call_error("mkdir", dir, e));
    }
    job.dirs_.push_back(dir);
    job.by_ctl_[ctl] = dir;
  }
  std::string mem = job.by_ctl_["memory"];
  if (auto s = write_file(mem + "/memory.limit_in_bytes", std::to_string(lim.memory_max_bytes)); !s) return fail(s);
  // memsw = mem: swap adds nothing (present only with swap accounting).
  if (::access((mem + "/memory.memsw.limit_in_bytes").c_str(), F_OK) == 0)
    if (auto s = write_file(mem + "/memory.memsw.limit_in_bytes", std::to_string(lim.memory_max_bytes)); !s)
      return fail(s);
  if (auto s = write_file(job.by_ctl_["pids"] + "/pids.max", std::to_string(lim.pids_max)); !s) return fail(s);
  if (lim.cpu_max_cores > 0) {
    std::string cpu = job.by_ctl_["cpu"];
    auto quota = static_cast<uint64_t>(std::llround(lim.cpu_max_cores * kCpuPeriodUs));
    if (auto s = write_file(cpu + "/cpu.cfs_period_us", std::to_string(kCpuPeriodUs)); !s) return fail(s);
    if (auto s = write_file(cpu + "/cpu.cfs_quota_us", std::to_string(quota)); !s) return fail(s);
  }
  return job;
}

util::Status Job::attach_in_parent(pid_t pid) const {
  for (auto& dir : dirs_)
    if (auto s = write_file(dir + "/cgroup.procs", std::to_string(pid)); !s) return s;
  return util::ok_status();
}

Stats Job::read_stats() const {
  Stats st;
  if (mode_ == "v2") {
    const std::string& dir = by_ctl_.at("v2");
    st.cpu_ms = keyed_value(read_small(dir + "/cpu.stat"), "usage_usec") / 1000;
    std::string peak = read_small(dir + "/memory.peak");  // kernel 5.19+
    st.peak_memory_bytes = peak.empty() ? 0 : std::strtoull(peak.c_str(), nullptr, 10);
    st.oom_killed = keyed_value(read_small(dir + "/memory.events"), "oom_kill") > 0;
    st.valid = true;
  } else if (mode_ == "v1") {
    st.cpu_ms = std::strtoull(read_small(by_ctl_.at("cpuacct") + "/cpuacct.usage").c_str(), nullptr, 10) / 1000000;
    st.peak_memory_bytes =
        std::strtoull(read_small(by_ctl_.at("memory") + "/memory.max_usage_in_bytes").c_str(), nullptr, 10);
    st.oom_killed = keyed_value(read_small(by_ctl_.at("memory") + "/memory.oom_control"), "oom_kill") > 0;
    st.valid = true;
  }
  return st;
}

void Job::kill_all() const {
  if (mode_ == "v2") (void)write_file(by_ctl_.at("v2") + "/cgroup.kill", "1");
}

Job Job::named_in_parent(const Host& host, const std::string& job_id) {
  Job job;
  job.mode_ = host.mode;
  if (host.mode == "v2") {
    job.dirs_.push_back(host.v2_base + "/job-" + job_id);
    job.by_ctl_["v2"] = job.dirs_.back();
  } else if (host.mode == "v1") {
    for (auto& [ctl, base] : host.v1_base) {
      job.dirs_.push_back(base + "/job-" + job_id);
      job.by_ctl_[ctl] = job.dirs_.back();
    }
  }
  return job;
}

void Job::destroy() const {
  const int64_t deadline = now_ms() + 2000;
  for (auto& dir : dirs_) {
    while (::rmdir(dir.c_str()) != 0 && errno == EBUSY && now_ms() < deadline) {
      struct timespec ts = {0, 5 * 1000 * 1000};
      ::nanosleep(&ts, nullptr);
    }
  }
}

nlohmann::json to_json(const Host& h) {
  return {{"mode", h.mode}, {"v2_base", h.v2_base}, {"v1_base", h.v1_base}, {"why_not", h.why_not}};
}

Host host_from_json(const nlohmann::json& j) {
  Host h;
  h.mode = j.value("mode", "none");
  h.v2_base = j.value("v2_base", "");
  if (j.contains("v1_base")) h.v1_base = j["v1_base"].get<std::map<std::string, std::string>>();
  h.why_not = j.value("why_not", "");
  return h;
}

}  // namespace sandbox::cgroups
