// One throwbox-runner child of the server, started through Boost.Process with
// an empty environment and spoken to in JSON lines (spec or claim on its
// stdin; {"warm":...}, progress and outcome lines on its stdout).
#pragma once
#include <sys/types.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "server/broker/identities.h"
#include "server/broker/runner_protocol.h"
#include "server/util/result.h"

namespace broker {

// What a thread that does not own the runner may do to it: release its start
// gate (EOF on its stdin) or signal it. Shared with the RunnerProcess, so it
// outlives whichever side finishes first; a signal reaches the runner only
// while it is un-reaped (the reap takes the same lock), never a recycled pid.
class RunnerControl {
 public:
  struct Impl;  // defined beside RunnerProcess's (Boost.Process)
  explicit RunnerControl(std::unique_ptr<Impl> impl);
  ~RunnerControl();
  RunnerControl(const RunnerControl&) = delete;
  RunnerControl& operator=(const RunnerControl&) = delete;

  void close_stdin();
  bool signal(int sig);  // false once the runner has been reaped

 private:
  friend class RunnerProcess;
  std::unique_ptr<Impl> impl_;
};

class RunnerProcess {
 public:
  static util::Result<std::unique_ptr<RunnerProcess>> spawn(const std::string& exe);
  ~RunnerProcess();  // closes the pipes; the process must have been waited for (wait_or_kill)
  RunnerProcess(const RunnerProcess&) = delete;
  RunnerProcess& operator=(const RunnerProcess&) = delete;

  // A spare's sandbox id, given in its prepare line (RunnerFleet): its
  // cgroup exists and its zygote is in it. "" for a runner without one.
  void set_prepared_id(std::string id) { prepared_id_ = std::move(id); }
  const std::string& prepared_id() const { return prepared_id_; }
  // The sandbox's host identity: released with this object, after the reap.
  void hold(IdentityLease identity) { identity_ = std::move(identity); }
  bool write_line(const std::string& text);  // text and '\n'; false when the runner is gone
  void close_stdin();
  void close_stdout();
  int stdout_fd() const;
  pid_t pid() const;
  // kill(2) while the runner is un-reaped; false once it has been reaped.
  bool signal(int sig) { return control_->signal(sig); }
  const std::shared_ptr<RunnerControl>& control() const { return control_; }
  // Its stdout, line by line (runner_protocol.h): one reader from the warm
  // ready line through the outcome, so bytes read past a line are kept.
  LineReader& stdout_lines() { return lines_; }
  // Waits up to grace_ms for the runner to exit, then SIGKILLs and reaps it.
  // Returns false when it had to be killed.
  bool wait_or_kill(int grace_ms);

 private:
  struct Impl;
  RunnerProcess(std::unique_ptr<Impl> impl, std::shared_ptr<RunnerControl> control);
  std::unique_ptr<Impl> impl_;
  std::shared_ptr<RunnerControl> control_;  // the stdin pipe, the pid and whether it was reaped
  LineReader lines_;
  std::string prepared_id_;
  IdentityLease identity_;  // destroyed after ~RunnerProcess waited for the runner
};

}  // namespace broker
