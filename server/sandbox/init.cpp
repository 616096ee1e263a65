// Sandbox pid 1 and the program's last steps before execve. Runs between clone
// and execve: syscalls only, every failure reported with fail_in_child and the
// program never started. Never throws, never allocates.
#include "server/sandbox/init.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "server/sandbox/capabilities.h"
#include "server/sandbox/child_report.h"
#include "server/sandbox/landlock.h"
#include "server/sandbox/namespaces.h"
#include "server/sandbox/trace.h"

namespace sandbox::init {
namespace {

// What the program child sends pid 1 when a step before execve fails.
struct ExecFailure {
  int err;
  char step[60];
};

// In the program child after clone, in this order: descriptors, working
// directory, rlimits, no_new_privs, Landlock, capabilities, seccomp (last),
// execve. Each step fails closed: the program never starts.
[[noreturn]] void exec_program_in_child(const ChildContext& ctx, int exec_err_fd, int ruleset_fd, int go_fd,
                                        int ready_fd, const sigset_t& old_mask) {
  trace::mark("program: started");
  const char* step = "setup";
  // Report through the exec-error pipe; pid 1 relays it to the runner.
  auto die = [&](int err) {
    ExecFailure f{err, {}};
    for (size_t i = 0; step[i] && i + 1 < sizeof f.step; ++i) f.step[i] = step[i];
    (void)::write(exec_err_fd, &f, sizeof f);
    ::_exit(127);
  };
  // An empty mask: nothing the runner or pid 1 blocked (SIGTERM, SIGCHLD) is inherited.
  step = "sigprocmask";
  sigset_t none;
  ::sigemptyset(&none);
  (void)old_mask;
  if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) die(errno);
  // A session of its own: no controlling terminal to push input into.
  step = "setsid";
  if (::setsid() < 0) die(errno);
  // The descriptors to keep, first moved out of the way (>= 20), then placed:
  // 3 the Landlock ruleset, 4 and 5 the warm loader's go and ready pipes, the
  // error pipe above.
  step = "fcntl(F_DUPFD_CLOEXEC)";
  auto lift = [&](int& fd) {
    if (fd < 0) return;
    int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 20);
    if (moved < 0) die(errno);
    fd = moved;
  };
  lift(exec_err_fd);
  lift(ruleset_fd);
  lift(go_fd);
  lift(ready_fd);
  // stdin is /dev/null; stdout/stderr are the capture pipes and nothing else.
  step = "open(/dev/null)";
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0 || ::dup2(null_fd, 0) < 0) die(errno);
  step = "dup2(stdout/stderr)";
  if (::dup2(ctx.stdout_write, 1) < 0 || ::dup2(ctx.stderr_write, 2) < 0) die(errno);
  step = "dup3(landlock ruleset, loader pipes)";
  if (ruleset_fd >= 0) {
    if (::dup3(ruleset_fd, 3, O_CLOEXEC) < 0) die(errno);
    ruleset_fd = 3;
  }
  if (go_fd >= 0 && ready_fd >= 0) {
    if (::dup3(go_fd, 4, O_CLOEXEC) < 0 || ::dup3(ready_fd, 5, O_CLOEXEC) < 0) die(errno);
    go_fd = 4;
    ready_fd = 5;
  }
  // Every other descriptor closed, except the exec-error pipe (close-on-exec).
  step = "close_range";
  if (::close_range(6, static_cast<unsigned>(exec_err_fd - 1), 0) != 0) die(errno);
  if (::close_range(static_cast<unsigned>(exec_err_fd + 1), ~0U, 0) != 0) die(errno);
  if (ruleset_fd < 0) ::close(3);
  if (go_fd < 0) {
    ::close(4);
    ::close(5);
  }
  trace::mark("program: fds placed");
  step = "chdir(/work)";
  if (::chdir("/work") != 0) die(errno);
  ::umask(022);
  int err = rlimits::apply_in_child(*ctx.rlimits, &step);
  if (err) die(err);
  // No set-id or file-capability gain through execve (fail closed, unlike nsjail's warning).
  trace::mark("program: rlimits");
  step = "prctl(PR_SET_NO_NEW_PRIVS)";
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die(errno);
  if (ruleset_fd >= 0) {
    step = "landlock_restrict_self";
    if ((err = landlock::restrict_self_in_child(ruleset_fd)) != 0) die(err);
    ::close(ruleset_fd);
  }
  if (go_fd >= 0) {
    // The loader inherits two descriptors beyond 0-2 (dup2 clears
    // close-on-exec): fd 3 to read its go byte from, fd 4 to say it is ready.
    step = "dup2(loader pipes)";
    if (::dup2(go_fd, 3) < 0 || ::dup2(ready_fd, 4) < 0) die(errno);
    ::close(5);
  }
  trace::mark("program: landlock");
  if ((err = capabilities::drop_all_in_child(ctx.last_cap, &step)) != 0) die(err);
  // Last: from here on every syscall, execve's included, passes the filter.
  trace::mark("program: caps dropped");
  step = "seccomp(SECCOMP_SET_MODE_FILTER)";
  if ((err = seccomp::install_in_child(*ctx.seccomp)) != 0) die(err);
  trace::mark("program: seccomp, execve");
  step = "execve";
  ::execve(ctx.argv[0], ctx.argv.data(), ctx.envp.data());
  die(errno);
  ::_exit(127);
}

// The program child starts with CLONE_VM | CLONE_VFORK: it runs on its own
// stack in pid 1's memory, pid 1 paused until its execve (or _exit), so no
// page tables are copied (a fork costs about 1 ms here, this 20 us). Its
// descriptor table, credentials, rlimits and filters are its own, and it
// writes nothing of pid 1's but errno, which pid 1 does not read across it.
struct ProgramArgs {
  const ChildContext* ctx;
  int* exec_err;
  int ruleset_fd, go_read, loaded_write, go_write, loaded_read;
  const sigset_t* old_mask;
};

alignas(64) char program_stack[256 * 1024];

int program_entry(void* raw) {
  auto* a = static_cast<ProgramArgs*>(raw);
  ::close(a->exec_err[0]);
  if (a->go_write >= 0) ::close(a->go_write);
  if (a->loaded_read >= 0) ::close(a->loaded_read);
  exec_program_in_child(*a->ctx, a->exec_err[1], a->ruleset_fd, a->go_read, a->loaded_write, *a->old_mask);
}

void kill_all_and_reap(pid_t program, int& program_status, bool& program_reaped) {
  // From pid 1 of the namespace, kill(-1) reaches every other process in it.
  ::kill(-1, SIGKILL);
  for (;;) {
    int st = 0;
    pid_t pid = ::waitpid(-1, &st, __WALL);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;  // ECHILD: nothing left
    }
    if (pid == program) {
      program_status = st;
      program_reaped = true;
    }
  }
}

}  // namespace

void run_in_child(const ChildContext& ctx) {
  const int sock = ctx.report_sock;
  trace::mark("pid 1: started");
  // Named for ps and the tests (it inherited the zygote's name).
  (void)::prctl(PR_SET_NAME, "throwbox-init", 0, 0, 0);
  namespaces::unshare_network_in_child(sock);
  trace::mark("pid 1: network namespace");
  // The runner's stdin/stdout/stderr are the broker's pipes: pid 1 must not
  // hold them (the broker reads the runner's stdout to EOF). /dev/null keeps
  // fds 0-2 occupied so later descriptors never land there.
  int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0) fail_in_child(sock, "open", "/dev/null", errno);
  for (int fd = 0; fd <= 2; ++fd)
    if (null_fd != fd && ::dup2(null_fd, fd) < 0) fail_in_child(sock, "dup2", "/dev/null", errno);
  if (null_fd > 2) ::close(null_fd);
  // If the runner dies, so does the sandbox (and with pid 1 gone, everything in it).
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) fail_in_child(sock, "prctl", "PR_SET_PDEATHSIG", errno);

  char msg = 0;
  ssize_t n = ::recv(sock, &msg, 1, 0);
  if (n != 1 || msg != kMsgGo) ::_exit(1);  // parent failed the id maps or died

  placement::restore_in_child(*ctx.cpus);
  trace::mark("pid 1: go received");
  mounts::mount_root_in_child(*ctx.plan, sock);
  trace::mark("pid 1: sources opened");
  // Become the one mapped identity before creating anything: files made in the
  // sandbox's tmpfs need a mapped owner, and as root this leaves host uid 0
  // behind for good. Capabilities in the new user namespace stay (the old uid
  // was not this namespace's root), so the mounts below still work.
  if (::setresgid(kSandboxGid, kSandboxGid, kSandboxGid) != 0)
    fail_in_child(sock, "setresgid", "sandbox", errno);
  if (::setresuid(kSandboxUid, kSandboxUid, kSandboxUid) != 0)
    fail_in_child(sock, "setresuid", "sandbox", errno);
  // The runner reads /outputs through /proc/<pid>/root after the job; an id
  // change cleared dumpable, which would deny that to a non-root runner.
  if (::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) fail_in_child(sock, "prctl", "PR_SET_DUMPABLE", errno);

  mounts::build_root_in_child(*ctx.plan, *ctx.spec, sock);
  trace::mark("pid 1: root built");
  mounts::pivot_into_root_in_child(*ctx.plan, sock);
  trace::mark("pid 1: pivoted");
  namespaces::set_hostname_in_child(sock);
  namespaces::bring_up_loopback_in_child(sock);

  trace::mark("pid 1: hostname, loopback");
  int ruleset_fd = -1;
  if (ctx.landlock_abi > 0) {
    const char* step = "landlock";
    ruleset_fd = landlock::build_ruleset_in_child(ctx.landlock_abi, &step);
    if (ruleset_fd < 0) fail_in_child(sock, "landlock_add_rule", step, -ruleset_fd);
  }

  trace::mark("pid 1: landlock ruleset");
  // The zygote made and attached the job's cgroup while the root was built,
  // and the runner reaped it (no process outside shares this memory now)
  // (and a cold job's ledger record exists): nothing of the program's may
  // start before that.
  if (::recv(sock, &msg, 1, 0) != 1 || msg != kMsgStart) ::_exit(1);  // parent failed the cgroup or died
  trace::mark("pid 1: start received");
  mounts::fill_inputs_in_child(*ctx.plan, *ctx.spec, sock);
  sigset_t chld, old_mask;
  ::sigemptyset(&chld);
  ::sigaddset(&chld, SIGCHLD);
  if (::sigprocmask(SIG_BLOCK, &chld, &old_mask) != 0) fail_in_child(sock, "sigprocmask", "SIGCHLD", errno);
  int sfd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) fail_in_child(sock, "signalfd", "SIGCHLD", errno);

  // The program: started now (cold, and a warm "preload" loader), or once a
  // job claims this sandbox (warm "exec").
  const bool warm = !ctx.spec->warm.empty();
  const bool preload = ctx.spec->warm == "preload";
  int go[2] = {-1, -1}, loaded[2] = {-1, -1};
  if (preload && (::pipe2(go, O_CLOEXEC) != 0 || ::pipe2(loaded, O_CLOEXEC) != 0))
    fail_in_child(sock, "pipe2", "loader", errno);
  pid_t program = -1;
  auto start_program = [&](int go_read, int loaded_write) {
    int exec_err[2];
    if (::pipe2(exec_err, O_CLOEXEC) != 0) fail_in_child(sock, "pipe2", "exec-error", errno);
    trace::mark("pid 1: clone program");
    ProgramArgs args{&ctx, exec_err, ruleset_fd, go_read, loaded_write, go[1], loaded[0], &old_mask};
    program = ::clone(program_entry, program_stack + sizeof program_stack, CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
    if (program < 0) fail_in_child(sock, "clone(CLONE_VM|CLONE_VFORK)", ctx.argv[0], errno);
    ::close(exec_err[1]);
    if (ruleset_fd >= 0) ::close(ruleset_fd);
    ruleset_fd = -1;
    if (go_read >= 0) ::close(go_read);
    if (loaded_write >= 0) ::close(loaded_write);
    ::close(ctx.stdout_write);
    ::close(ctx.stderr_write);
    // EOF on the exec-error pipe means execve succeeded (nsjail's handshake).
    ExecFailure failure{};
    ssize_t got;
    do got = ::read(exec_err[0], &failure, sizeof failure);
    while (got < 0 && errno == EINTR);
    trace::mark("pid 1: program exec'd");
    ::close(exec_err[0]);
    if (got == static_cast<ssize_t>(sizeof failure)) {
      int st;
      ::waitpid(program, &st, 0);
      failure.step[sizeof failure.step - 1] = '\0';
      fail_in_child(sock, failure.step, ctx.argv[0], failure.err);
    }
  };
  if (!warm || preload) start_program(go[0], loaded[1]);

  if (warm) {
    // "Built" once the loader, if any, says its start-up is done (one byte).
    bool announced = false;
    auto announce = [&] {
      char built = kMsgWarm;
      ::send(sock, &built, 1, MSG_NOSIGNAL);
      announced = true;
    };
    if (!preload) announce();
    // Idle until a job claims the sandbox. A loader that dies meanwhile makes
    // the sandbox unusable: report it, the pool discards it.
    for (bool claimed = false; !claimed;) {
      struct pollfd fds[3] = {{sock, POLLIN, 0}, {sfd, POLLIN, 0}, {announced ? -1 : loaded[0], POLLIN, 0}};
      if (::poll(fds, 3, -1) < 0) {
        if (errno == EINTR) continue;
        fail_in_child(sock, "poll", "claim", errno);
      }
      if (fds[1].revents) {
        struct signalfd_siginfo si;
        while (::read(sfd, &si, sizeof si) > 0) {
        }
        int st = 0;
        if (program > 0 && ::waitpid(program, &st, WNOHANG) == program)
          fail_in_child(sock, "warm loader exited before a job claimed it", ctx.argv[0], ECHILD);
      }
      if (fds[0].revents) {
        char cmd = 0;
        ssize_t r = ::recv(sock, &cmd, 1, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) ::_exit(1);  // parent gone
        if (r == 1 && cmd == kMsgKill) ::_exit(1);
        if (r == 1 && cmd == kMsgClaim) claimed = true;
      }
      if (fds[2].revents) {
        char byte = 0;
        ssize_t r = ::read(loaded[0], &byte, 1);
        if (r < 0 && errno == EINTR) continue;
        if (r != 1) fail_in_child(sock, "warm loader closed its ready pipe", ctx.argv[0], r < 0 ? errno : EPIPE);
        ::close(loaded[0]);
        announce();
      }
    }
    if (!announced) fail_in_child(sock, "claimed before the loader was ready", ctx.argv[0], EAGAIN);
    // The runner has copied the job's inputs in: freeze them before any of
    // the job's code can run.
    if (::mount(nullptr, "/inputs", nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                nullptr) != 0)
      fail_in_child(sock, "mount(MS_REMOUNT|MS_RDONLY)", "/inputs", errno);
    if (preload) {
      char one = '1';
      if (::write(go[1], &one, 1) != 1) fail_in_child(sock, "write", "go", errno);
      ::close(go[1]);
    } else {
      start_program(-1, -1);
    }
  }
  char ready = kMsgReady;
  ::send(sock, &ready, 1, MSG_NOSIGNAL);

  int program_status = 0;
  bool program_reaped = false;
  bool finished = false;
  while (!finished) {
    struct pollfd fds[2] = {{sock, POLLIN, 0}, {sfd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents) {
      char cmd = 0;
      ssize_t r = ::recv(sock, &cmd, 1, MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) ::_exit(1);  // parent gone
      if (r == 1 && cmd == kMsgKill) finished = true;
    }
    if (fds[1].revents) {
      struct signalfd_siginfo si;
      while (::read(sfd, &si, sizeof si) > 0) {
      }
      int st = 0;
      pid_t pid;
      // Reap the program and any orphan reparented to us.
      while ((pid = ::waitpid(-1, &st, WNOHANG | __WALL)) > 0) {
        if (pid == program) {
          trace::mark("pid 1: program reaped");
          program_status = st;
          program_reaped = true;
          finished = true;
        }
      }
    }
  }
  // The job ends with its program: a daemonized grandchild does not survive it.
  kill_all_and_reap(program, program_status, program_reaped);

  struct rusage ru {};
  ::getrusage(RUSAGE_CHILDREN, &ru);
  char buf[1 + sizeof(ExitReport)];
  buf[0] = kMsgExit;
  ExitReport report{program_status,
                    static_cast<long long>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000LL +
                        ru.ru_utime.tv_usec + ru.ru_stime.tv_usec,
                    ru.ru_maxrss};
  __builtin_memcpy(buf + 1, &report, sizeof report);
  trace::mark("pid 1: exit reported");
  ::send(sock, buf, sizeof buf, MSG_NOSIGNAL);

  // Stay alive (and so keep /outputs mounted) until the parent has harvested.
  char done;
  while (::recv(sock, &done, 1, 0) > 0) {
  }
  ::_exit(0);
}

}  // namespace sandbox::init
