// Spare runner, reaper and reclaim. Runs on the reaper thread and the
// callers' worker threads; never waits for a runner on a job's path.
#include "server/broker/runner_fleet.h"

#include <poll.h>
#include <unistd.h>

#include <filesystem>
#include <spdlog/spdlog.h>
#include <vector>

#include "server/sandbox/cgroups.h"
#include "server/util/fs.h"
#include "server/util/random.h"

namespace broker {

FinishedRunner RunnerFleet::unused_spare(std::unique_ptr<RunnerProcess> spare) const {
  spare->close_stdin();
  std::string dir = scratch_dir_of(*spare);
  return FinishedRunner{std::move(spare), std::move(dir), "spare runner"};
}

std::string RunnerFleet::scratch_dir_of(const RunnerProcess& runner) const {
  return runner.prepared_id().empty() ? std::string() : run_dir_ + "/" + runner.prepared_id();
}

util::Result<std::unique_ptr<RunnerProcess>> RunnerFleet::spawn_prepared() {
  // Made first: a server that crashes from here on leaves it for the next
  // start's reclaim, which removes the cgroup named after it too.
  const std::string id = util::random_id();
  if (auto s = util::make_dirs(run_dir_ + "/" + id, 0700); !s) return s.error();
  auto runner = spawn();
  if (!runner) {
    (void)util::remove_tree(run_dir_ + "/" + id);
    return runner;
  }
  (*runner)->set_prepared_id(id);
  const nlohmann::json line = {{"prepare", {{"sandbox_id", id}, {"cgroup_host", cgroup_host_}}}};
  if (!(*runner)->write_line(line.dump())) {
    retire(unused_spare(std::move(*runner)));
    return util::make_error(util::ErrorCode::kInternal, "the spare runner exited before its prepare line");
  }
  return runner;
}

RunnerFleet::RunnerFleet(std::string runner_exe, std::string state_dir, nlohmann::json cgroup_host)
    : runner_exe_(std::move(runner_exe)), run_dir_(state_dir + "/run"), cgroup_host_(std::move(cgroup_host)) {
  reaper_ = std::jthread([this] { reap_loop(); });
}

RunnerFleet::~RunnerFleet() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    if (spare_) queue_.push_back(unused_spare(std::move(spare_)));
  }
  cv_.notify_all();
  reaper_ = std::jthread();  // joins after the queue is empty
}

void RunnerFleet::keep_spare() {
  {
    std::lock_guard lock(mu_);
    spare_wanted_ = true;
  }
  cv_.notify_one();
}

void RunnerFleet::retire(FinishedRunner finished) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(finished));
  }
  cv_.notify_one();
}

util::Result<std::unique_ptr<RunnerProcess>> RunnerFleet::take() {
  std::unique_ptr<RunnerProcess> runner;
  {
    std::lock_guard lock(mu_);
    runner = std::move(spare_);
  }
  // A spare that died while idle (killed from outside) has hung up its stdout.
  struct pollfd p {
    runner ? runner->stdout_fd() : -1, POLLIN, 0
  };
  if (runner && ::poll(&p, 1, 0) == 0) return runner;
  if (runner) {
    spdlog::warn("spare runner {} exited while idle; starting another", runner->pid());
    retire(unused_spare(std::move(runner)));
  }
  return spawn();
}

void RunnerFleet::reap_loop() {
  for (;;) {
    FinishedRunner f;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || spare_wanted_; });
      if (spare_wanted_ && !stopping_ && queue_.empty()) {
        // Only with nothing to reap: a job that took the spare is still
        // running, and a new runner's exec (about 2 ms of CPU) next to its
        // set-up would slow it down more than the spare saves.
        spare_wanted_ = false;
        lock.unlock();
        auto spare = spawn_prepared();
        if (!spare) spdlog::warn("spare runner: {}", spare.error().message);
        lock.lock();
        if (spare && !stopping_ && !spare_)
          spare_ = std::move(*spare);
        else if (spare)
          queue_.push_back(unused_spare(std::move(*spare)));
        continue;
      }
      if (queue_.empty()) {
        if (stopping_) return;
        continue;
      }
      f = std::move(queue_.front());
      queue_.pop_front();
    }
    // Teardown is a few milliseconds; a runner stuck longer is killed (its
    // pid 1 dies with it through PR_SET_PDEATHSIG).
    if (!f.runner->wait_or_kill(10000)) spdlog::warn("job {}: runner still tearing down after 10 s; killed it", f.id);
    if (!f.scratch_dir.empty()) {
      if (auto s = util::remove_tree(f.scratch_dir); !s) spdlog::warn("job {}: cleanup: {}", f.id, s.error().message);
      // A runner that was killed never removed its cgroup (named after the
      // scratch directory); one that finished did, and this is ENOENT.
      remove_cgroups(std::filesystem::path(f.scratch_dir).filename().string());
    }
    f.runner.reset();
    std::lock_guard lock(mu_);
    if (!spare_ && !stopping_) spare_wanted_ = true;
  }
}

size_t RunnerFleet::remove_cgroups(const std::string& sandbox_id) const {
  sandbox::cgroups::Host host = sandbox::cgroups::host_from_json(cgroup_host_);
  std::vector<std::string> bases;
  if (host.mode == sandbox::cgroups::Mode::v2) bases.push_back(host.v2_base);
  for (auto& [_, base] : host.v1_base) bases.push_back(base);
  size_t removed = 0;
  // rmdir only succeeds on an empty cgroup; ENOENT when the runner removed it.
  for (auto& base : bases)
    if (::rmdir((base + "/job-" + sandbox_id).c_str()) == 0) ++removed;
  return removed;
}

size_t RunnerFleet::reclaim_leftovers() {
  size_t removed = 0;
  std::error_code ec;
  // A crashed server's runners died with it (PR_SET_PDEATHSIG), and their
  // sandboxes with them; only their scratch directories and (empty) cgroups
  // remain, both named after the sandbox. Only this state directory's: the
  // cgroup base may be shared with other servers, whose runners create empty
  // cgroups a moment before they attach to them.
  for (auto& e : std::filesystem::directory_iterator(run_dir_, ec)) {
    const std::string id = e.path().filename().string();
    if (auto s = util::remove_tree(e.path().string()); s)
      ++removed;
    else
      spdlog::warn("reclaim: {}", s.error().message);
    removed += remove_cgroups(id);
  }
  if (removed) spdlog::info("reclaimed {} leftovers of an earlier run", removed);
  return removed;
}

}  // namespace broker
