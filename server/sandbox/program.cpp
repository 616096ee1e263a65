// The program child's steps before execve, in order (program_main). Runs on
// pid 1's memory, pid 1 paused until the execve: syscalls only, never
// allocates, locks or logs; every failure goes to pid 1 and the program never starts.
#include "server/sandbox/program.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "server/sandbox/capabilities.h"
#include "server/sandbox/landlock.h"
#include "server/sandbox/rlimits.h"
#include "server/sandbox/seccomp.h"
#include "server/sandbox/trace.h"

namespace sandbox::program {
namespace {

// Where the descriptors the program keeps are parked above stdio (before the
// others are closed), and where the warm loader finds its two pipes: the
// loader's contract (server/broker/python_loader.h reads fd 3, writes fd 4).
constexpr int kRulesetParkFd = 3;
constexpr int kLoaderGoParkFd = 4;
constexpr int kLoaderReadyParkFd = 5;
constexpr int kLoaderGoFd = 3;
constexpr int kLoaderReadyFd = 4;
static_assert(kTemplateListenFd == kLoaderReadyParkFd + 1, "the template's socket is placed after the parked pipes");

// The program's state between its steps: the descriptors as they move, and
// the step running now (named in a failure report).
struct Child {
  Io& io;
  int exec_err_fd, ruleset_fd, go_fd, ready_fd, listen_fd;
  const char* step = "setup";

  // Reports through the exec-error pipe; pid 1 relays it to the runner.
  [[noreturn]] void fail(int err) const {
    ExecFailure f{err, {}};
    for (size_t i = 0; step[i] && i + 1 < sizeof f.step; ++i) f.step[i] = step[i];
    (void)::write(exec_err_fd, &f, sizeof f);
    ::_exit(127);
  }
  void done(Layer layer) const { io.layers->add(layer); }
};

void program_close_pid1_ends(const Start& start) {
  ::close(start.exec_err_read);
  if (start.go_write >= 0) ::close(start.go_write);
  if (start.loaded_read >= 0) ::close(start.loaded_read);
  trace::mark("program: started");
}

// An empty mask: nothing the runner or pid 1 blocked (SIGTERM, SIGCHLD) is inherited.
void program_clear_signal_mask(Child& c) {
  c.step = "sigprocmask";
  sigset_t none;
  ::sigemptyset(&none);
  if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) c.fail(errno);
}

// A session of its own: no controlling terminal to push input into.
void program_start_session(Child& c) {
  c.step = "setsid";
  if (::setsid() < 0) c.fail(errno);
}

// The descriptors to keep, first moved out of the way (>= 20), then placed:
// 0 /dev/null, 1 and 2 the capture pipes, 3 the Landlock ruleset, 4 and 5
// the warm loader's go and ready pipes, 6 a template's listening socket
// (kept across execve); the exec-error pipe stays above.
void program_place_fds(Child& c) {
  c.step = "fcntl(F_DUPFD_CLOEXEC)";
  for (int* fd : {&c.exec_err_fd, &c.ruleset_fd, &c.go_fd, &c.ready_fd, &c.listen_fd}) {
    if (*fd < 0) continue;
    int moved = ::fcntl(*fd, F_DUPFD_CLOEXEC, 20);
    if (moved < 0) c.fail(errno);
    *fd = moved;
  }
  c.step = "open(/dev/null)";
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0 || ::dup2(null_fd, 0) < 0) c.fail(errno);
  c.step = "dup2(stdout/stderr)";
  if (::dup2(c.io.stdout_write, 1) < 0 || ::dup2(c.io.stderr_write, 2) < 0) c.fail(errno);
  c.step = "dup3(landlock ruleset, loader pipes)";
  if (c.ruleset_fd >= 0) {
    if (::dup3(c.ruleset_fd, kRulesetParkFd, O_CLOEXEC) < 0) c.fail(errno);
    c.ruleset_fd = kRulesetParkFd;
  }
  if (c.go_fd >= 0 && c.ready_fd >= 0) {
    if (::dup3(c.go_fd, kLoaderGoParkFd, O_CLOEXEC) < 0 || ::dup3(c.ready_fd, kLoaderReadyParkFd, O_CLOEXEC) < 0)
      c.fail(errno);
    c.go_fd = kLoaderGoParkFd;
    c.ready_fd = kLoaderReadyParkFd;
  }
  c.step = "dup2(template socket)";
  if (c.listen_fd >= 0) {
    if (::dup2(c.listen_fd, kTemplateListenFd) < 0) c.fail(errno);
    c.listen_fd = kTemplateListenFd;
  }
}

// Every other descriptor closed, except the exec-error pipe (close-on-exec):
// nothing of pid 1's, the zygote's or the runner's reaches the program.
void program_close_other_fds(Child& c) {
  c.step = "close_range";
  if (::close_range(kTemplateListenFd + 1, static_cast<unsigned>(c.exec_err_fd - 1), 0) != 0) c.fail(errno);
  if (c.listen_fd < 0) ::close(kTemplateListenFd);
  if (::close_range(static_cast<unsigned>(c.exec_err_fd + 1), ~0U, 0) != 0) c.fail(errno);
  if (c.ruleset_fd < 0) ::close(kRulesetParkFd);
  if (c.go_fd < 0) {
    ::close(kLoaderGoParkFd);
    ::close(kLoaderReadyParkFd);
  }
  c.done(Layer::fd_hygiene);
  trace::mark("program: fds placed");
}

void program_enter_work(Child& c) {
  c.step = "chdir(/work)";
  if (::chdir("/work") != 0) c.fail(errno);
  ::umask(022);
}

void program_apply_rlimits(Child& c) {
  if (int err = rlimits::apply_in_child(*c.io.rlimits, &c.step)) c.fail(err);
  c.done(Layer::rlimits);
  trace::mark("program: rlimits");
}

// No set-id or file-capability gain through execve (fail closed, unlike nsjail's warning).
void program_set_no_new_privs(Child& c) {
  c.step = "prctl(PR_SET_NO_NEW_PRIVS)";
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) c.fail(errno);
  c.done(Layer::no_new_privs);
}

// Writes only beneath the scratch areas; needs no_new_privs (landlock(7)).
void program_restrict_landlock(Child& c) {
  if (c.ruleset_fd < 0) return;
  c.step = "landlock_restrict_self";
  if (int err = landlock::restrict_self_in_child(c.ruleset_fd)) c.fail(err);
  ::close(c.ruleset_fd);
  c.done(Layer::landlock);
  trace::mark("program: landlock");
}

// The loader inherits two descriptors beyond 0-2 (dup2 clears close-on-exec):
// fd 3 to read its go byte from, fd 4 to say it is ready.
void program_place_loader_pipes(Child& c) {
  if (c.go_fd < 0) return;
  c.step = "dup2(loader pipes)";
  if (::dup2(c.go_fd, kLoaderGoFd) < 0 || ::dup2(c.ready_fd, kLoaderReadyFd) < 0) c.fail(errno);
  ::close(kLoaderReadyParkFd);
}

void program_drop_capabilities(Child& c) {
  if (int err = capabilities::drop_all_in_child(c.io.last_cap, &c.step)) c.fail(err);
  c.done(Layer::capabilities_dropped);
  trace::mark("program: caps dropped");
}

// Last: from here on every syscall, execve's included, passes the filter.
void program_install_seccomp(Child& c) {
  c.step = "seccomp(SECCOMP_SET_MODE_FILTER)";
  if (int err = seccomp::install_in_child(c.io.filter, c.io.filter_len)) c.fail(err);
  c.done(Layer::seccomp);
  trace::mark("program: seccomp, execve");
}

// The program child's steps, in order; each fails closed (the program never starts):
// 1 close pid 1's ends  2 empty signal mask  3 new session  4 place fds 0-6
// 5 close every other fd  6 cwd /work  7 rlimits  8 no_new_privs
// 9 Landlock  10 loader pipes  11 capabilities  12 seccomp (last)  13 execve.
// A program forked from a template takes 2-12 (take_steps_in_child) and
// returns into its interpreter instead of 13.
void program_steps(Child& c) {
  program_clear_signal_mask(c);
  program_start_session(c);
  program_place_fds(c);
  program_close_other_fds(c);
  program_enter_work(c);
  program_apply_rlimits(c);
  program_set_no_new_privs(c);
  program_restrict_landlock(c);
  program_place_loader_pipes(c);
  program_drop_capabilities(c);
  program_install_seccomp(c);
}

[[noreturn]] void program_execve(Child& c, const Start& start) {
  c.step = "execve";
  ::execve(start.ctx->argv[0], start.ctx->argv.data(), start.envp);
  c.fail(errno);
}

}  // namespace

void take_steps_in_child(Io& io) {
  Child c{io, io.report_fd, io.ruleset_fd, io.go_fd, io.ready_fd, io.listen_fd};
  program_steps(c);
  io.report_fd = c.exec_err_fd;  // moved above the program's descriptors
}

int clone_entry(void* start) {
  const auto& s = *static_cast<const Start*>(start);
  const pid1::Context& ctx = *s.ctx;
  Io io{ctx.stdout_write,
        ctx.stderr_write,
        s.exec_err_write,
        s.ruleset_fd,
        s.go_read,
        s.loaded_write,
        ctx.template_listen_fd,
        ctx.rlimits,
        ctx.seccomp->instructions.data(),
        ctx.seccomp->instructions.size(),
        ctx.last_cap,
        s.layers};
  program_close_pid1_ends(s);
  Child c{io, io.report_fd, io.ruleset_fd, io.go_fd, io.ready_fd, io.listen_fd};
  program_steps(c);
  program_execve(c, s);
}

}  // namespace sandbox::program
