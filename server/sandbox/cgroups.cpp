// cgroup v2 and v1 handling. Trusted side only (server start-up, runner and zygote).
// Every limit write that fails makes the job a sandbox_error: a cgroup without
// its limit is not a boundary.
#include "server/sandbox/cgroups.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cmath>

#include "server/util/clock.h"
#include "server/util/fd.h"
#include "server/util/fs.h"
#include "server/util/text.h"

namespace sandbox::cgroups {
namespace {

constexpr uint64_t kCpuPeriodUs = 100000;

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

using util::now_ms;

}  // namespace

util::Status write_file(const std::string& path, const std::string& value) {
  util::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return util::make_error(util::ErrorCode::kSandbox, util::call_error("open", path, errno));
  if (::write(fd.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size()))
    return util::make_error(util::ErrorCode::kSandbox, util::call_error("write", path + " <- " + value, errno));
  return util::ok_status();
}

std::string read_small(const std::string& path) {
  auto r = util::read_file(path, 64 * 1024);
  return r ? *r : std::string();
}

util::Result<Job> Job::create_in_parent(const Host& host, const std::string& job_id, const Limits& lim) {
  auto job = make_in_parent(host, job_id);
  if (!job) return job;
  if (auto s = job->limit_in_parent(lim); !s) {
    job->destroy();
    return s.error();
  }
  return job;
}

util::Result<Job> Job::make_in_parent(const Host& host, const std::string& job_id) {
  Job job = named_in_parent(host, job_id);
  for (auto& dir : job.dirs_) {
    if (::mkdir(dir.c_str(), 0755) != 0) {
      const int e = errno;
      Job made = job;  // only those before this one
      made.dirs_.resize(static_cast<size_t>(&dir - job.dirs_.data()));
      made.destroy();
      return util::make_error(util::ErrorCode::kSandbox, util::call_error("mkdir", dir, e));
    }
  }
  return job;
}

util::Status Job::limit_in_parent(const Limits& lim) const {
  if (mode_ == Mode::none) return util::ok_status();
  if (mode_ == Mode::v2) {
    const std::string dir = dir_of("v2");
    // Memory: a hard cap, and no swap to spill into.
    if (auto s = write_file(dir + "/memory.max", std::to_string(lim.memory_max_bytes)); !s) return s;
    if (::access((dir + "/memory.swap.max").c_str(), F_OK) == 0)
      if (auto s = write_file(dir + "/memory.swap.max", "0"); !s) return s;
    // Fork bombs: a task count for the whole tree.
    if (auto s = write_file(dir + "/pids.max", std::to_string(lim.pids_max)); !s) return s;
    // CPU: a bandwidth quota, so one job cannot starve the host.
    if (lim.cpu_max_cores > 0) {
      auto quota = static_cast<uint64_t>(std::llround(lim.cpu_max_cores * kCpuPeriodUs));
      if (auto s = write_file(dir + "/cpu.max", std::to_string(quota) + " " + std::to_string(kCpuPeriodUs)); !s)
        return s;
    }
    return util::ok_status();
  }
  const std::string mem = dir_of("memory");
  if (auto s = write_file(mem + "/memory.limit_in_bytes", std::to_string(lim.memory_max_bytes)); !s) return s;
  // memsw = mem: swap adds nothing (present only with swap accounting).
  if (::access((mem + "/memory.memsw.limit_in_bytes").c_str(), F_OK) == 0)
    if (auto s = write_file(mem + "/memory.memsw.limit_in_bytes", std::to_string(lim.memory_max_bytes)); !s) return s;
  if (auto s = write_file(dir_of("pids") + "/pids.max", std::to_string(lim.pids_max)); !s) return s;
  if (lim.cpu_max_cores > 0) {
    const std::string cpu = dir_of("cpu");
    auto quota = static_cast<uint64_t>(std::llround(lim.cpu_max_cores * kCpuPeriodUs));
    if (auto s = write_file(cpu + "/cpu.cfs_period_us", std::to_string(kCpuPeriodUs)); !s) return s;
    if (auto s = write_file(cpu + "/cpu.cfs_quota_us", std::to_string(quota)); !s) return s;
  }
  return util::ok_status();
}

std::string Job::dir_of(const std::string& ctl) const {
  auto it = by_ctl_.find(ctl);
  return it == by_ctl_.end() ? std::string() : it->second;  // a write under "" fails, naming the file
}

util::Status Job::attach_in_parent(pid_t pid) const {
  for (auto& dir : dirs_)
    if (auto s = write_file(dir + "/cgroup.procs", std::to_string(pid)); !s) return s;
  return util::ok_status();
}

uint64_t Job::cpu_us() const {
  if (mode_ == Mode::v2) return keyed_value(read_small(by_ctl_.at("v2") + "/cpu.stat"), "usage_usec");
  if (mode_ == Mode::v1)
    return std::strtoull(read_small(by_ctl_.at("cpuacct") + "/cpuacct.usage").c_str(), nullptr, 10) / 1000;
  return 0;
}

Stats Job::read_stats() const {
  Stats st;
  if (mode_ == Mode::v2) {
    const std::string& dir = by_ctl_.at("v2");
    st.cpu_us = cpu_us();
    std::string peak = read_small(dir + "/memory.peak");  // kernel 5.19+
    st.peak_memory_bytes = peak.empty() ? 0 : std::strtoull(peak.c_str(), nullptr, 10);
    st.oom_killed = keyed_value(read_small(dir + "/memory.events"), "oom_kill") > 0;
    st.valid = true;
  } else if (mode_ == Mode::v1) {
    st.cpu_us = cpu_us();
    st.peak_memory_bytes =
        std::strtoull(read_small(by_ctl_.at("memory") + "/memory.max_usage_in_bytes").c_str(), nullptr, 10);
    st.oom_killed = keyed_value(read_small(by_ctl_.at("memory") + "/memory.oom_control"), "oom_kill") > 0;
    st.valid = true;
  }
  return st;
}

void Job::kill_all() const {
  if (mode_ == Mode::v2) (void)write_file(by_ctl_.at("v2") + "/cgroup.kill", "1");
}

Job Job::named_in_parent(const Host& host, const std::string& job_id) {
  Job job;
  job.mode_ = host.mode;
  if (host.mode == Mode::v2) {
    job.dirs_.push_back(host.v2_base + "/job-" + job_id);
    job.by_ctl_["v2"] = job.dirs_.back();
  } else if (host.mode == Mode::v1) {
    for (auto& [ctl, base] : host.v1_base) {
      std::string dir = base + "/job-" + job_id;
      job.by_ctl_[ctl] = dir;
      if (std::find(job.dirs_.begin(), job.dirs_.end(), dir) == job.dirs_.end()) job.dirs_.push_back(dir);
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

bool kill_and_remove(const std::string& dir, int timeout_ms) {
  const int64_t deadline = now_ms() + timeout_ms;
  // cgroup.kill (Linux 5.14+) takes the whole tree at once, forks included.
  const bool has_kill = ::access((dir + "/cgroup.kill").c_str(), F_OK) == 0;
  if (has_kill) (void)write_file(dir + "/cgroup.kill", "1");
  for (;;) {
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return true;
    if (errno != EBUSY || now_ms() >= deadline) return false;
    if (!has_kill) {
      // v1: each pid listed, again on every pass (a fork may race the first).
      std::string procs = read_small(dir + "/cgroup.procs");
      for (size_t pos = 0; pos < procs.size();) {
        size_t eol = procs.find('\n', pos);
        if (eol == std::string::npos) eol = procs.size();
        long pid = std::strtol(procs.c_str() + pos, nullptr, 10);
        if (pid > 1) ::kill(static_cast<pid_t>(pid), SIGKILL);
        pos = eol + 1;
      }
    }
    struct timespec ts = {0, 5 * 1000 * 1000};
    ::nanosleep(&ts, nullptr);
  }
}

const char* to_string(Mode mode) {
  switch (mode) {
    case Mode::v2:
      return "v2";
    case Mode::v1:
      return "v1";
    case Mode::none:
      break;
  }
  return "none";
}

nlohmann::json to_json(const Host& h) {
  return {{"mode", to_string(h.mode)},
          {"v2_base", h.v2_base},
          {"v1_base", h.v1_base},
          {"why_not", h.why_not},
          {"placement", h.placement}};
}

Host host_from_json(const nlohmann::json& j) {
  Host h;
  const std::string mode = j.value("mode", "none");
  h.mode = mode == "v2" ? Mode::v2 : mode == "v1" ? Mode::v1 : Mode::none;
  h.v2_base = j.value("v2_base", "");
  if (j.contains("v1_base")) h.v1_base = j["v1_base"].get<std::map<std::string, std::string>>();
  h.why_not = j.value("why_not", "");
  h.placement = j.value("placement", "");
  return h;
}

}  // namespace sandbox::cgroups
