// RunnerProcess: Boost.Process behind a small line-oriented interface.
// Waiting is a waitpid loop, not Boost's wait_for, which can block on SIGCHLD
// bookkeeping shared across threads.
#include <spdlog/spdlog.h>

#include "server/broker/runner_process.h"

#include <signal.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>

// Boost 1.74 compiles its vfork launcher only under an old _XOPEN_SOURCE test
// that glibc's current feature macros fail; the launcher itself is sound here
// (the child only dup2s the pipes and execs). Must precede every Boost include.
#define BOOST_POSIX_HAS_VFORK 1
#include <boost/process.hpp>
#include <boost/process/posix.hpp>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <thread>

#include "server/util/clock.h"
#include "server/util/fd.h"

namespace broker {

namespace bp = boost::process;

// The stdin pipe and the reap state, behind one lock: another thread may
// close stdin or signal while the owner reads and reaps.
struct RunnerControl::Impl {
  std::mutex mu;
  bp::pipe to;
  pid_t pid = 0;
  bool reaped = false;
};

// The runner's stdout is a unix socket, not a pipe: a job's proxy listener
// comes over it as SCM_RIGHTS (runner_protocol.h).
struct RunnerProcess::Impl {
  util::UniqueFd from;
  bp::child child;
};

RunnerControl::RunnerControl(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RunnerControl::~RunnerControl() = default;

void RunnerControl::close_stdin() {
  std::lock_guard lock(impl_->mu);
  if (impl_->to.is_open()) impl_->to.close();
}

bool RunnerControl::signal(int sig) {
  std::lock_guard lock(impl_->mu);
  return !impl_->reaped && ::kill(impl_->pid, sig) == 0;
}

namespace {
using util::now_ms;
}  // namespace

RunnerProcess::RunnerProcess(std::unique_ptr<Impl> impl, std::shared_ptr<RunnerControl> control)
    : impl_(std::move(impl)), control_(std::move(control)), lines_(impl_->from.get()) {}

util::Result<std::unique_ptr<RunnerProcess>> RunnerProcess::spawn(const std::string& exe) {
  auto impl = std::make_unique<Impl>();
  auto control = std::make_unique<RunnerControl::Impl>();
  // An empty environment: nothing of the server's (tokens, paths) reaches the runner.
  bp::environment empty_env;
  empty_env.clear();
  // The one exception: the runner's step trace (THROWBOX_RUNNER_TRACE, a
  // debugging aid for bench/), passed on when the server itself has it.
  static const bool trace = ::getenv("THROWBOX_RUNNER_TRACE") != nullptr;
  if (trace) empty_env["THROWBOX_RUNNER_TRACE"] = "1";
  // vfork: the child borrows the server's address space until it execs, so
  // starting a runner costs no copy of the server's page tables (several ms
  // per job with fork). Boost reports vfork launch errors as exceptions.
  // Boost closes the runner's ends of both pipes in this process after the spawn.
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    spdlog::error("starting runner {}: socketpair: errno {}", exe, errno);
    return util::make_error(util::ErrorCode::kInternal, "the sandbox runner could not be started (see the server log)");
  }
  impl->from.reset(pair[0]);
  util::UniqueFd runner_end(pair[1]);  // dup2'ed onto the runner's fd 1 (no CLOEXEC there), closed here after
  try {
    impl->child = bp::child(bp::exe = exe, bp::std_in < control->to, bp::posix::fd.bind(1, runner_end.get()), empty_env,
                            bp::posix::use_vfork);
  } catch (const std::exception& e) {
    // The install path and Boost's text are for the operator, not the client.
    spdlog::error("starting runner {}: {}", exe, e.what());
    return util::make_error(util::ErrorCode::kInternal, "the sandbox runner could not be started (see the server log)");
  }
  impl->child.detach();  // reaped by wait_or_kill's waitpid, never by Boost
  control->pid = impl->child.id();
  return std::unique_ptr<RunnerProcess>(
      new RunnerProcess(std::move(impl), std::make_shared<RunnerControl>(std::move(control))));
}

RunnerProcess::~RunnerProcess() { wait_or_kill(0); }

bool RunnerProcess::write_line(const std::string& text) {
  std::string line = text + "\n";
  RunnerControl::Impl& c = *control_->impl_;
  std::lock_guard lock(c.mu);
  return c.to.is_open() && util::write_all(c.to.native_sink(), line.data(), line.size());
}

void RunnerProcess::close_stdin() { control_->close_stdin(); }

void RunnerProcess::close_stdout() { impl_->from.reset(); }

int RunnerProcess::stdout_fd() const { return impl_->from.get(); }

pid_t RunnerProcess::pid() const { return control_->impl_->pid; }

bool RunnerProcess::wait_or_kill(int grace_ms) {
  RunnerControl::Impl& c = *control_->impl_;
  const int64_t deadline = now_ms() + grace_ms;
  int st = 0;
  for (;;) {
    {
      // Reaped under the lock that RunnerControl::signal takes: a signal
      // either reaches the (live or zombie) runner or is not sent at all.
      std::lock_guard lock(c.mu);
      if (c.reaped) return true;
      pid_t r = ::waitpid(c.pid, &st, WNOHANG);
      if (r == c.pid || (r < 0 && errno != EINTR && errno != EAGAIN)) {
        c.reaped = true;
        return true;
      }
      if (now_ms() >= deadline) {
        // PR_SET_PDEATHSIG then takes the runner's sandbox down with it.
        ::kill(c.pid, SIGKILL);
        while (::waitpid(c.pid, &st, 0) < 0 && errno == EINTR) {}
        c.reaped = true;
        return false;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace broker
