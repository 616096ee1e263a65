// RunnerProcess: Boost.Process behind a small line-oriented interface.
// Waiting is a waitpid loop, not Boost's wait_for, which can block on SIGCHLD
// bookkeeping shared across threads.
#include "server/broker/runner_process.h"

#include <poll.h>
#include <signal.h>
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
#include <thread>

#include "server/util/fd.h"

namespace broker {

namespace bp = boost::process;

struct RunnerProcess::Impl {
  bp::pipe to, from;
  bp::child child;
  bool reaped = false;
};

namespace {
int64_t now_ms() {
  struct timespec ts {};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}
}  // namespace

RunnerProcess::RunnerProcess(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

util::Result<std::unique_ptr<RunnerProcess>> RunnerProcess::spawn(const std::string& exe) {
  auto impl = std::make_unique<Impl>();
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
  try {
    impl->child = bp::child(bp::exe = exe, bp::std_in < impl->to, bp::std_out > impl->from, empty_env,
                            bp::posix::use_vfork);
  } catch (const std::exception& e) {
    return util::make_error("internal", "starting runner " + exe + ": " + e.what());
  }
  impl->child.detach();  // reaped by wait_or_kill's waitpid, never by Boost
  return std::unique_ptr<RunnerProcess>(new RunnerProcess(std::move(impl)));
}

RunnerProcess::~RunnerProcess() {
  if (impl_ && !impl_->reaped) wait_or_kill(0);
}

bool RunnerProcess::write_line(const std::string& text) {
  std::string line = text + "\n";
  return impl_->to.is_open() && util::write_all(impl_->to.native_sink(), line.data(), line.size());
}

void RunnerProcess::close_stdin() {
  if (impl_->to.is_open()) impl_->to.close();
}

void RunnerProcess::close_stdout() {
  if (impl_->from.is_open()) impl_->from.close();
}

int RunnerProcess::stdout_fd() const { return impl_->from.native_source(); }

pid_t RunnerProcess::pid() const { return impl_->child.id(); }

std::optional<std::string> RunnerProcess::read_line(int timeout_ms, size_t max_bytes) {
  const int64_t deadline = now_ms() + timeout_ms;
  char buf[65536];
  for (;;) {
    if (size_t nl = pending_.find('\n'); nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return line;
    }
    if (pending_.size() > max_bytes) return std::nullopt;
    int64_t left = deadline - now_ms();
    if (left <= 0) return std::nullopt;
    struct pollfd p {stdout_fd(), POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return std::nullopt;
    long n = util::read_some(stdout_fd(), buf, sizeof buf);
    if (n <= 0) return std::nullopt;
    pending_.append(buf, static_cast<size_t>(n));
  }
}

bool RunnerProcess::wait_or_kill(int grace_ms) {
  if (impl_->reaped) return true;
  const pid_t pid = impl_->child.id();
  const int64_t deadline = now_ms() + grace_ms;
  int st = 0;
  bool killed = false;
  for (;;) {
    pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR && errno != EAGAIN)) break;
    if (now_ms() >= deadline) {
      // PR_SET_PDEATHSIG then takes the runner's sandbox down with it.
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
      killed = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  impl_->reaped = true;
  return !killed;
}

}  // namespace broker
