// The sandbox's pid 1, in order (pid1_main). Runs on the zygote's memory
// between clone and the program's execve, and then until the runner lets it
// go: syscalls only, every failure reported with fail_in_child (the program
// never starts). Never throws, allocates, locks or logs.
#include "server/sandbox/pid1.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "server/sandbox/job_end.h"
#include "server/sandbox/child_report.h"
#include "server/sandbox/landlock.h"
#include "server/sandbox/namespaces.h"
#include "server/sandbox/program.h"
#include "server/sandbox/template_fork.h"
#include "server/sandbox/trace.h"
#include "server/util/fd_passing.h"

namespace sandbox::pid1 {
namespace {

// pid 1's state between its steps, on its own stack.
constexpr int kProxyBacklog = 64;  // connections a job may have waiting for the proxy's accept

struct State {
  explicit State(const Context& c)
      : ctx(c), sock(c.report_sock), network(c.spec->network), ca_env(c.spec->network && c.spec->ca_env) {}
  const Context& ctx;
  const int sock;  // the control socket to the runner
  Layers layers;   // what the steps (and the program child's) reported done
  int ruleset_fd = -1;
  int sfd = -1;              // signalfd for SIGCHLD
  int go[2] = {-1, -1};      // warm "preload": pid 1 -> loader
  int loaded[2] = {-1, -1};  // loader -> pid 1
  pid_t program = -1;
  int program_status = 0;
  bool network;  // the job has a network profile: proxy listener, proxy environment
  bool ca_env;   // and it intercepts a host: the CA bundle's variables
  // A warm loader's CPU at the claim: its start-up, not the job's.
  long long program_cpu_at_claim_us = 0;
};

// The program child runs on this stack, in pid 1's memory, pid 1 paused until
// its execve (CLONE_VFORK): no page tables are copied (a fork costs about
// 1 ms here, this 20 us). Its descriptors, credentials, rlimits and filters
// are its own; it writes nothing of pid 1's but errno and State::layers.
alignas(64) char program_stack[256 * 1024];

// The zygote's ends (the runner's side of the socket and pipes, the report pipe).
void pid1_close_runner_ends(State& s) {
  for (int fd : s.ctx.runner_fds) ::close(fd);
  trace::mark("pid 1: started");
  // Named for ps and the tests (it inherited the zygote's name).
  (void)::prctl(PR_SET_NAME, "throwbox-init", 0, 0, 0);
}

void pid1_unshare_network(State& s) {
  namespaces::unshare_network_in_child(s.sock);
  s.layers.add(Layer::net_ns);
  trace::mark("pid 1: network namespace");
}

// The runner's stdin/stdout/stderr are the broker's pipes: pid 1 must not
// hold them (the broker reads the runner's stdout to EOF). /dev/null keeps
// fds 0-2 occupied so later descriptors never land there.
void pid1_detach_stdio(State& s) {
  int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0) fail_in_child(s.sock, "open", "/dev/null", errno);
  for (int fd = 0; fd <= 2; ++fd)
    if (null_fd != fd && ::dup2(null_fd, fd) < 0) fail_in_child(s.sock, "dup2", "/dev/null", errno);
  if (null_fd > 2) ::close(null_fd);
}

// If the runner dies, so does the sandbox (and with pid 1 gone, everything in it).
void pid1_die_with_runner(State& s) {
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) fail_in_child(s.sock, "prctl", "PR_SET_PDEATHSIG", errno);
}

// The zygote wrote the id maps: nothing is created before they exist.
void pid1_await_go(State& s) {
  char msg = 0;
  if (::recv(s.sock, &msg, 1, 0) != 1 || msg != kMsgGo) ::_exit(1);  // the zygote failed the id maps or died
  placement::restore_in_child(*s.ctx.cpus);
  trace::mark("pid 1: go received");
}

// The user namespace's own ucount limits (user_namespaces(7)), while pid 1
// holds CAP_SYS_RESOURCE in it and sees the host's /proc/sys: no namespace of
// any kind may be made in it (the cgroup one pid 1 makes after start is the
// one allowed), and its inotify instances and watches are this job's share.
// The kernel checks each level up to the host's, so the share is what the
// job can take from its owner's count. A file this kernel lacks is skipped.
void pid1_limit_user_counts(State& s) {
  char path[64] = "/proc/sys/user/";
  constexpr size_t kDir = sizeof "/proc/sys/user/" - 1;
  for (int i = 0; i < kUserLimits; ++i) {
    const UserLimit& l = s.ctx.user_limits[i];
    if (!l.file) continue;
    size_t n = __builtin_strlen(l.file);
    if (kDir + n >= sizeof path) continue;
    __builtin_memcpy(path + kDir, l.file, n + 1);
    int fd = ::open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) continue;
      fail_in_child(s.sock, "open", path, errno);
    }
    const size_t len = __builtin_strlen(l.value);
    if (::write(fd, l.value, len) != static_cast<ssize_t>(len)) fail_in_child(s.sock, "write", path, errno);
    ::close(fd);
  }
  s.layers.add(Layer::user_limits);
}

// With the host identity still in place: opens every bind source, mounts the root tmpfs.
void pid1_open_sources(State& s) {
  mounts::mount_root_in_child(*s.ctx.plan, s.sock);
  trace::mark("pid 1: sources opened");
}

// Become the one mapped identity before creating anything: files made in the
// sandbox's tmpfs need a mapped owner, and as root this leaves host uid 0
// behind for good. Capabilities in the new user namespace stay (the old uid
// was not this namespace's root), so the mounts after still work.
void pid1_become_sandbox_user(State& s) {
  if (::setresgid(kSandboxGid, kSandboxGid, kSandboxGid) != 0) fail_in_child(s.sock, "setresgid", "sandbox", errno);
  if (::setresuid(kSandboxUid, kSandboxUid, kSandboxUid) != 0) fail_in_child(s.sock, "setresuid", "sandbox", errno);
  // The runner reads /outputs through /proc/<pid>/root after the job; an id
  // change cleared dumpable, which would deny that to a non-root runner.
  if (::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) fail_in_child(s.sock, "prctl", "PR_SET_DUMPABLE", errno);
}

// The skeleton, the runtime binds, /dev, /proc, the scratch tmpfs; then read-only.
void pid1_build_root(State& s) {
  mounts::build_root_in_child(*s.ctx.plan, *s.ctx.spec, s.sock);
  s.layers.add(Layer::readonly_root);
  trace::mark("pid 1: root built");
}

void pid1_pivot_root(State& s) {
  mounts::pivot_into_root_in_child(*s.ctx.plan, s.sock);
  s.layers.add(Layer::pivot_root);
  trace::mark("pid 1: pivoted");
}

// A cold workspace job: /work is the sandbox's now (pivoted), the runner may
// copy the workspace into it through /proc/<pid 1>/root; the program waits
// for start, which the runner sends once the copy is done.
void pid1_offer_work(State& s) {
  if (s.ctx.spec->workspace_in.empty()) return;
  char ready = kMsgWorkReady;
  if (::send(s.sock, &ready, 1, MSG_NOSIGNAL) != 1) fail_in_child(s.sock, "send", "work ready", errno);
}

void pid1_set_hostname(State& s) { namespaces::set_hostname_in_child(s.sock); }

void pid1_bring_up_loopback(State& s) {
  namespaces::bring_up_loopback_in_child(s.sock);
  trace::mark("pid 1: hostname, loopback");
}

// Built here, after pivot_root (the rules name the sandbox's paths); the
// program child enforces it on itself.
void pid1_build_landlock_ruleset(State& s) {
  if (s.ctx.landlock_abi > 0) {
    const char* step = "landlock";
    s.ruleset_fd = landlock::build_ruleset_in_child(s.ctx.landlock_abi, &step);
    if (s.ruleset_fd < 0) fail_in_child(s.sock, "landlock_add_rule", step, -s.ruleset_fd);
  }
  trace::mark("pid 1: landlock ruleset");
}

// The zygote made and attached the job's cgroup while the root was built,
// and the runner reaped it (no process outside shares this memory now)
// (and a cold job's ledger record exists): nothing of the program's may
// start before that.
void pid1_await_start(State& s) {
  char msg = 0;
  if (::recv(s.sock, &msg, 1, 0) != 1 || msg != kMsgStart) ::_exit(1);  // the runner failed the cgroup or died
  trace::mark("pid 1: start received");
}

// In the job's cgroup now: a cgroup namespace rooted there, so the program
// sees its own cgroup as "/" and nothing of the host's hierarchy above it.
void pid1_enter_cgroup_namespace(State& s) {
  namespaces::unshare_cgroup_in_child(s.sock);
  s.layers.add(Layer::cgroup_ns);
}

// Cold: the inputs copied in (charged to the job's cgroup), then read-only.
void pid1_fill_inputs(State& s) { mounts::fill_inputs_in_child(*s.ctx.plan, *s.ctx.spec, s.sock); }

// SIGCHLD through a signalfd (the program child clears the mask it inherits);
// warm "preload": the loader's go and ready pipes.
void pid1_watch_children(State& s) {
  sigset_t chld;
  ::sigemptyset(&chld);
  ::sigaddset(&chld, SIGCHLD);
  if (::sigprocmask(SIG_BLOCK, &chld, nullptr) != 0) fail_in_child(s.sock, "sigprocmask", "SIGCHLD", errno);
  s.sfd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (s.sfd < 0) fail_in_child(s.sock, "signalfd", "SIGCHLD", errno);
  if (s.ctx.spec->warm == Warm::preload && (::pipe2(s.go, O_CLOEXEC) != 0 || ::pipe2(s.loaded, O_CLOEXEC) != 0))
    fail_in_child(s.sock, "pipe2", "loader", errno);
}

char* const* envp_of(const State& s) {
  if (!s.network) return s.ctx.envp.data();
  return s.ca_env ? s.ctx.envp_network_ca.data() : s.ctx.envp_network.data();
}

// The program child (program.cpp) until its execve; EOF on the exec-error
// pipe means execve succeeded (nsjail's handshake), a record names the failed step.
void pid1_start_program(State& s) {
  int exec_err[2];
  if (::pipe2(exec_err, O_CLOEXEC) != 0) fail_in_child(s.sock, "pipe2", "exec-error", errno);
  trace::mark("pid 1: clone program");
  program::Start start{&s.ctx,      exec_err[0], exec_err[1], s.ruleset_fd, s.go[0],
                       s.loaded[1], s.go[1],     s.loaded[0], &s.layers,    envp_of(s)};
  s.program =
      ::clone(program::clone_entry, program_stack + sizeof program_stack, CLONE_VM | CLONE_VFORK | SIGCHLD, &start);
  if (s.program < 0) fail_in_child(s.sock, "clone(CLONE_VM|CLONE_VFORK)", s.ctx.argv[0], errno);
  ::close(exec_err[1]);
  for (int* fd : {&s.ruleset_fd, &s.go[0], &s.loaded[1]}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  ::close(s.ctx.stdout_write);
  ::close(s.ctx.stderr_write);
  program::ExecFailure failure{};
  ssize_t got;
  do got = ::read(exec_err[0], &failure, sizeof failure);
  while (got < 0 && errno == EINTR);
  trace::mark("pid 1: program exec'd");
  ::close(exec_err[0]);
  if (got == static_cast<ssize_t>(sizeof failure)) {
    int st;
    ::waitpid(s.program, &st, 0);
    failure.step[sizeof failure.step - 1] = '\0';
    fail_in_child(s.sock, failure.step, s.ctx.argv[0], failure.err);
  }
}

// Forked from a template: the program's descriptors go to the runner, which
// has the template fork the program into this sandbox's namespaces (it
// arrives here as an orphan, reparented); the report pipe brings its Started
// record, or the ExecFailure of the step that failed, or EOF when the
// template or the runner gave up before any step (the runner says why).
void pid1_fork_from_template(State& s) {
  using namespace template_fork;
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) fail_in_child(s.sock, "pipe2", "template report", errno);
  int fds[kFds - 1];
  fds[kStdout - 1] = s.ctx.stdout_write;
  fds[kStderr - 1] = s.ctx.stderr_write;
  fds[kReport - 1] = report[1];
  fds[kGo - 1] = s.go[0];
  fds[kReady - 1] = s.loaded[1];
  fds[kRuleset - 1] = s.ruleset_fd;
  const char tag = kMsgFork;
  trace::mark("pid 1: fork from the template");
  if (util::send_with_fds(s.sock, &tag, 1, fds, s.ruleset_fd >= 0 ? kFds - 1 : kFds - 2) != 1)
    fail_in_child(s.sock, "sendmsg", "the program's descriptors", errno);
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
  s.ruleset_fd = s.go[0] = s.loaded[1] = -1;
  union {
    Started started;
    program::ExecFailure failure;
  } got{};
  ssize_t n;
  do n = ::read(report[0], &got, sizeof got);
  while (n < 0 && errno == EINTR);
  ::close(report[0]);
  trace::mark("pid 1: forked program started");
  if (n == static_cast<ssize_t>(sizeof got.started) && got.started.zero == 0 && got.started.pid > 1) {
    s.program = got.started.pid;
    s.layers = s.layers | Layers(got.started.layers);
    return;
  }
  if (n == static_cast<ssize_t>(sizeof got.failure) && got.failure.err != 0) {
    got.failure.step[sizeof got.failure.step - 1] = '\0';
    fail_in_child(s.sock, got.failure.step, s.ctx.argv[0], got.failure.err);
  }
  fail_in_child(s.sock, "the template's fork sent no report", s.ctx.argv[0], n < 0 ? errno : EPIPE);
}

// Warm, a claim with a workspace: /work gets the workspace's size, not the
// warm spec's, before the runner copies the workspace in.
void pid1_size_work(State& s, uint64_t code_room_bytes) {
  mounts::size_work_for_workspace_in_child(*s.ctx.plan, code_room_bytes, s.sock);
  char ready = kMsgWorkReady;
  if (::send(s.sock, &ready, 1, MSG_NOSIGNAL) != 1) fail_in_child(s.sock, "send", "work ready", errno);
}

// Warm: "built" once the loader, if any, says its start-up is done (one
// byte), then idle until a job claims the sandbox (first resizing /work
// when the claim brings a workspace). A loader that dies
// meanwhile makes the sandbox unusable: reported, the pool discards it.
void pid1_await_claim(State& s) {
  const bool preload = s.ctx.spec->warm == Warm::preload;
  bool announced = false;
  auto announce = [&] {
    char built = kMsgWarm;
    ::send(s.sock, &built, 1, MSG_NOSIGNAL);
    announced = true;
  };
  if (!preload) announce();
  for (bool claimed = false; !claimed;) {
    struct pollfd fds[3] = {{s.sock, POLLIN, 0}, {s.sfd, POLLIN, 0}, {announced ? -1 : s.loaded[0], POLLIN, 0}};
    if (::poll(fds, 3, -1) < 0) {
      if (errno == EINTR) continue;
      fail_in_child(s.sock, "poll", "claim", errno);
    }
    if (fds[1].revents) {
      struct signalfd_siginfo si;
      while (::read(s.sfd, &si, sizeof si) > 0) {}
      int st = 0;
      if (s.program > 0 && ::waitpid(s.program, &st, WNOHANG) == s.program)
        fail_in_child(s.sock, "warm loader exited before a job claimed it", s.ctx.argv[0], ECHILD);
    }
    if (fds[0].revents) {
      // One command byte; kMsgWorkspace carries the claim's code room after it.
      char msg[1 + sizeof(uint64_t)] = {};
      ssize_t r = ::recv(s.sock, msg, sizeof msg, MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) ::_exit(1);  // the runner is gone
      const char cmd = msg[0];
      if (r >= 1 && cmd == kMsgKill) ::_exit(1);
      if (r == static_cast<ssize_t>(sizeof msg) && cmd == kMsgWorkspace) {
        uint64_t code_room_bytes = 0;
        __builtin_memcpy(&code_room_bytes, msg + 1, sizeof code_room_bytes);
        pid1_size_work(s, code_room_bytes);
      }
      if (r == 1 && cmd == kMsgWorkspace) fail_in_child(s.sock, "workspace claim", "code room", EINVAL);
      if (r == 1 && (cmd == kMsgClaim || cmd == kMsgClaimNetwork || cmd == kMsgClaimNetworkCa)) {
        claimed = true;
        s.network = cmd == kMsgClaimNetwork || cmd == kMsgClaimNetworkCa;
        s.ca_env = cmd == kMsgClaimNetworkCa;
      }
    }
    if (fds[2].revents) {
      char byte = 0;
      ssize_t r = ::read(s.loaded[0], &byte, 1);
      if (r < 0 && errno == EINTR) continue;
      if (r != 1) fail_in_child(s.sock, "warm loader closed its ready pipe", s.ctx.argv[0], r < 0 ? errno : EPIPE);
      ::close(s.loaded[0]);
      announce();
    }
  }
  if (!announced) fail_in_child(s.sock, "claimed before the loader was ready", s.ctx.argv[0], EAGAIN);
  trace::mark("pid 1: claim received");
}

// Warm: what the loader (an interpreter's start, its preload, a template
// fork's warm-up) has used so far, its threads' included, is left out of
// the job's CPU.
void pid1_note_cpu_at_claim(State& s) {
  clockid_t clock;
  struct timespec ts {};
  if (s.program > 0 && ::clock_getcpuclockid(s.program, &clock) == 0 && ::clock_gettime(clock, &ts) == 0)
    s.program_cpu_at_claim_us = static_cast<long long>(ts.tv_sec) * 1000000LL + ts.tv_nsec / 1000;
}

// Warm: the runner has copied the job's inputs in; frozen before any of the
// job's code can run.
void pid1_freeze_inputs(State& s) {
  if (::mount(nullptr, "/inputs", nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
    fail_in_child(s.sock, "mount(MS_REMOUNT|MS_RDONLY)", "/inputs", errno);
  trace::mark("pid 1: inputs frozen");
}

// A job with a network profile: its proxy's listener, made here in the job's
// network namespace (its loopback), handed to the runner and closed: only the
// broker's proxy accepts on it, and nothing but the job's processes can reach
// it. Before the program starts, so its first connect finds it listening.
void pid1_open_proxy_listener(State& s) {
  if (!s.network) return;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail_in_child(s.sock, "socket", "AF_INET proxy listener", errno);
  struct sockaddr_in addr {};
  addr.sin_family = AF_INET;
  addr.sin_port = __builtin_bswap16(kProxyPort);
  addr.sin_addr.s_addr = __builtin_bswap32(0x7f000001);  // 127.0.0.1
  if (::bind(fd, reinterpret_cast<const struct sockaddr*>(&addr), sizeof addr) != 0)
    fail_in_child(s.sock, "bind", "127.0.0.1 proxy port", errno);
  if (::listen(fd, kProxyBacklog) != 0) fail_in_child(s.sock, "listen", "proxy listener", errno);
  const char tag = kMsgListener;
  if (util::send_with_fd(s.sock, &tag, 1, fd) != 1) fail_in_child(s.sock, "sendmsg", "proxy listener", errno);
  ::close(fd);
  trace::mark("pid 1: proxy listener handed over");
}

// Warm "preload": the loader, blocked reading its go pipe, runs the job's code
// ('n': with the proxy environment, for a job with a network profile; 'c':
// and the CA bundle's variables).
void pid1_release_loader(State& s) {
  char one = s.ca_env ? 'c' : s.network ? 'n' : '1';
  if (::write(s.go[1], &one, 1) != 1) fail_in_child(s.sock, "write", "go", errno);
  ::close(s.go[1]);
  trace::mark("pid 1: loader released");
}

// The program runs: the runner's deadline starts now. The message carries
// every layer the steps reported done (the zygote's come in its own report).
void pid1_report_ready(State& s) {
  char msg[1 + sizeof(uint32_t)];
  msg[0] = kMsgReady;
  const uint32_t bits = s.layers.bits();
  __builtin_memcpy(msg + 1, &bits, sizeof bits);
  ::send(s.sock, msg, sizeof msg, MSG_NOSIGNAL);
}

// Reaps the program and every orphan reparented here until the program
// exits or the runner says kill (deadline, cancel).
void pid1_reap_until_done(State& s) {
  for (bool finished = false; !finished;) {
    struct pollfd fds[2] = {{s.sock, POLLIN, 0}, {s.sfd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents) {
      char cmd = 0;
      ssize_t r = ::recv(s.sock, &cmd, 1, MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) ::_exit(1);  // the runner is gone
      if (r == 1 && cmd == kMsgKill) finished = true;
    }
    if (fds[1].revents) {
      struct signalfd_siginfo si;
      while (::read(s.sfd, &si, sizeof si) > 0) {}
      int st = 0;
      pid_t pid;
      while ((pid = ::waitpid(-1, &st, WNOHANG | __WALL)) > 0) {
        if (pid == s.program) {
          trace::mark("pid 1: program reaped");
          s.program_status = st;
          finished = true;
        }
      }
    }
  }
}

// A job with a network profile: its proxy is told the program has ended, and
// its answer awaited, before anything else of the job dies: every tunnel
// still held (by a process the program left) is cut by the proxy first, so
// its record says the job's end cut it. From the privileged source port only
// pid 1 can bind (job_end.h). Best effort: a listener the job flooded
// shut costs at most twice kJobEndWaitMs, then pid 1 kills anyway.
void pid1_tell_proxy_the_job_ended(State& s) {
  if (!s.network) return;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return;
  struct sockaddr_in addr {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = __builtin_bswap32(0x7f000001);  // 127.0.0.1
  addr.sin_port = __builtin_bswap16(sandbox::kJobEndSourcePort);
  const int one = 1;
  (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  bool told = false;
  if (::bind(fd, reinterpret_cast<const struct sockaddr*>(&addr), sizeof addr) == 0) {
    addr.sin_port = __builtin_bswap16(kProxyPort);
    const int rc = ::connect(fd, reinterpret_cast<const struct sockaddr*>(&addr), sizeof addr);
    struct pollfd p {
      fd, POLLOUT, 0
    };
    int err = 0;
    socklen_t len = sizeof err;
    if ((rc == 0 || (errno == EINPROGRESS && ::poll(&p, 1, sandbox::kJobEndWaitMs) == 1)) &&
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0 &&
        ::send(fd, sandbox::kJobEndNotice, sizeof sandbox::kJobEndNotice - 1, MSG_NOSIGNAL) ==
            static_cast<ssize_t>(sizeof sandbox::kJobEndNotice - 1)) {
      // The answer, or the proxy's close: either comes once every tunnel is cut.
      p = {fd, POLLIN, 0};
      char answer;
      told = ::poll(&p, 1, sandbox::kJobEndWaitMs) == 1 && ::recv(fd, &answer, 1, 0) >= 0;
    }
  }
  ::close(fd);
  trace::mark(told ? "pid 1: proxy told the job ended" : "pid 1: proxy not told the job ended");
}

// The job ends with its program: a daemonized grandchild does not survive it.
// From pid 1 of the namespace, kill(-1) reaches every other process in it.
void pid1_kill_all_and_reap(State& s) {
  ::kill(-1, SIGKILL);
  for (;;) {
    int st = 0;
    pid_t pid = ::waitpid(-1, &st, __WALL);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;  // ECHILD: nothing left
    }
    if (pid == s.program) s.program_status = st;
  }
}

void pid1_report_exit(State& s) {
  struct rusage ru {};
  ::getrusage(RUSAGE_CHILDREN, &ru);
  char buf[1 + sizeof(ExitReport)];
  buf[0] = kMsgExit;
  const long long reaped_us = static_cast<long long>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000LL +
                              ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
  ExitReport report{s.program_status, std::max(0LL, reaped_us - s.program_cpu_at_claim_us), ru.ru_maxrss};
  __builtin_memcpy(buf + 1, &report, sizeof report);
  trace::mark("pid 1: exit reported");
  ::send(s.sock, buf, sizeof buf, MSG_NOSIGNAL);
}

// Stays alive (and so keeps /outputs mounted) until the runner has harvested.
[[noreturn]] void pid1_hold_until_released(State& s) {
  char done;
  while (::recv(s.sock, &done, 1, 0) > 0) {}
  ::_exit(0);
}

// pid 1's steps, in order; a failed step reports and exits (the program never starts):
// 1 close the runner's ends  2 network namespace  3 stdio to /dev/null
// 4 die with the runner  5 await go (id maps written)  6 the user
// namespace's limits  7 open the bind sources, mount the root tmpfs
// 8 become the sandbox user  9 build the root, read-only  10 pivot_root
// 11 cold with a workspace: /work ready for the runner's copy  12 hostname
// 13 loopback  14 Landlock ruleset  15 await start (in the cgroup, zygote
// reaped; a workspace copied in)  16 cgroup namespace  17 fill /inputs
// 18 watch children  19 cold with a network profile: the proxy listener
// 20 start the program (cold; warm "preload": its loader; forked from a
// template: the runner has the template fork it)  21 warm: await
// the claim (with a workspace: /work resized first)  22 warm: note the
// loader's CPU so far  23 warm: freeze /inputs  24 warm with a network
// profile: the proxy listener  25 warm "exec": start the program;
// "preload": release the loader  26 report ready, with the layers  27 reap
// until done  28 with a network profile: tell the proxy the job ended
// 29 kill all, reap  30 report the exit  31 hold until released (the
// runner copies /outputs and a workspace out meanwhile).
[[noreturn]] void pid1_main(State& s) {
  const Warm warm = s.ctx.spec->warm;
  const bool forked = s.ctx.spec->from_template_pid != 0;
  pid1_close_runner_ends(s);
  pid1_unshare_network(s);
  pid1_detach_stdio(s);
  pid1_die_with_runner(s);
  pid1_await_go(s);
  pid1_limit_user_counts(s);
  pid1_open_sources(s);
  pid1_become_sandbox_user(s);
  pid1_build_root(s);
  pid1_pivot_root(s);
  if (warm == Warm::cold) pid1_offer_work(s);
  pid1_set_hostname(s);
  pid1_bring_up_loopback(s);
  pid1_build_landlock_ruleset(s);
  pid1_await_start(s);
  pid1_enter_cgroup_namespace(s);
  pid1_fill_inputs(s);
  pid1_watch_children(s);
  if (warm == Warm::cold) pid1_open_proxy_listener(s);
  if (warm != Warm::exec && forked) pid1_fork_from_template(s);
  if (warm != Warm::exec && !forked) pid1_start_program(s);
  if (warm != Warm::cold) pid1_await_claim(s);
  if (warm != Warm::cold) pid1_note_cpu_at_claim(s);
  if (warm != Warm::cold) pid1_freeze_inputs(s);
  if (warm != Warm::cold) pid1_open_proxy_listener(s);
  if (warm == Warm::exec) pid1_start_program(s);
  if (warm == Warm::preload) pid1_release_loader(s);
  pid1_report_ready(s);
  pid1_reap_until_done(s);
  pid1_tell_proxy_the_job_ended(s);
  pid1_kill_all_and_reap(s);
  pid1_report_exit(s);
  pid1_hold_until_released(s);
}

}  // namespace

int clone_entry(void* context) {
  const auto& ctx = *static_cast<const Context*>(context);
  State s(ctx);
  pid1_main(s);
}

int rehearsal_entry(void*) { return 0; }

}  // namespace sandbox::pid1
