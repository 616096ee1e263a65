// The server's runner processes outside a job: the spare started ahead of the
// next cold job, the reaper that waits for finished runners to tear down and
// removes their scratch directories and cgroups, and the start-up reclaim of
// what a crashed server left. One reaper thread; thread-safe.
#pragma once
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "server/broker/runner_process.h"
#include "server/util/result.h"

namespace broker {

// A runner that has reported (or was never used), with the scratch directory
// to remove once it has exited; id names it in log lines.
struct FinishedRunner {
  std::unique_ptr<RunnerProcess> runner;
  std::string scratch_dir;  // "" when it has none
  std::string id;
};

class RunnerFleet {
 public:
  // cgroup_host: sandbox::cgroups::Host as JSON (where job cgroups live).
  RunnerFleet(std::string runner_exe, std::string state_dir, nlohmann::json cgroup_host);
  ~RunnerFleet();  // retires the spare; joins the reaper once its queue is empty
  RunnerFleet(const RunnerFleet&) = delete;
  RunnerFleet& operator=(const RunnerFleet&) = delete;

  const std::string& runner_exe() const { return runner_exe_; }
  // From now on a spare runner is kept (start_pool).
  void keep_spare();
  // The spare runner if there is one (another is then started), else a new
  // one. A spare is prepared (prepared_id()): its sandbox's scratch directory
  // and cgroup exist, and its spec must name that sandbox (rebase_on_runner).
  util::Result<std::unique_ptr<RunnerProcess>> take();
  util::Result<std::unique_ptr<RunnerProcess>> spawn() { return RunnerProcess::spawn(runner_exe_); }
  // The scratch directory a prepared runner's sandbox has ("" for others).
  std::string scratch_dir_of(const RunnerProcess& runner) const;
  // To the reaper: waited for off the caller's path, then its directory removed.
  void retire(FinishedRunner finished);
  // Scratch directories under <state>/run and their empty job cgroups; how many were removed.
  size_t reclaim_leftovers();

 private:
  void reap_loop();
  // A runner prepared for a sandbox of its own: scratch directory made, then
  // the prepare line written (its zygote makes and joins the cgroup).
  util::Result<std::unique_ptr<RunnerProcess>> spawn_prepared();
  // A spare that gets no spec: EOF instead, it reports a sandbox_error and exits.
  FinishedRunner unused_spare(std::unique_ptr<RunnerProcess> spare) const;
  // rmdir of the sandbox's (empty) job cgroups; how many were removed.
  size_t remove_cgroups(const std::string& sandbox_id) const;

  const std::string runner_exe_;
  const std::string run_dir_;  // <state>/run
  const nlohmann::json cgroup_host_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<FinishedRunner> queue_;
  bool stopping_ = false;
  // exec'd, blocked reading its spec, no sandbox yet (that is built per job).
  // The reaper starts a new one each time a job takes it.
  std::unique_ptr<RunnerProcess> spare_;
  bool spare_wanted_ = false;
  std::jthread reaper_;
};

}  // namespace broker
