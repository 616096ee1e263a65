// The template's side of a fork (template_fork.h): the loop its interpreter
// calls, and the steps that make one of its forks a job sandbox's program.
// Built into the shared object the template's interpreter loads; between
// vfork and the program's fork the code shares the template's memory and
// stack: syscalls only, no allocation.
#include "server/sandbox/template_fork.h"

#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "server/sandbox/layers.h"
#include "server/sandbox/program.h"
#include "server/sandbox/spec.h"

namespace sandbox::template_fork {
namespace {

// One request at a time, here rather than on the stack the vfork children
// share; a program keeps the copy it was forked with.
struct Received {
  Request request;
  sock_filter filter[seccomp::kMaxInstructions];
};
Received g_in;
int g_fds[kFds];
int g_fd_count = 0;
rlimits::Table g_limits;
bool g_is_program = false;  // set in a program's own copy only

void close_received() {
  for (int i = 0; i < g_fd_count; ++i) ::close(g_fds[i]);
  g_fd_count = 0;
}

// Reads one request: its fixed part, its filter and exactly its descriptors.
// False for anything else (the connection is dropped; the runner reports it).
bool receive(int conn) {
  struct iovec iov {
    &g_in, sizeof g_in
  };
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * kFds)];
  struct msghdr msg {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do n = ::recvmsg(conn, &msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  g_fd_count = 0;
  bool extra = false;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      if (g_fd_count < kFds) {
        g_fds[g_fd_count++] = fd;
      } else {
        ::close(fd);  // more than a request has: refused, none of them kept
        extra = true;
      }
    }
  }
  const Request& r = g_in.request;
  if (n < static_cast<ssize_t>(sizeof r) || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 || r.magic != kMagic ||
      r.version != kVersion || r.filter_len == 0 || r.filter_len > seccomp::kMaxInstructions ||
      static_cast<size_t>(n) != sizeof r + r.filter_len * sizeof(sock_filter) || r.has_ruleset > 1 || r.ahead > 1 ||
      extra || g_fd_count != (r.has_ruleset ? kFds : kFds - 1)) {
    close_received();
    return false;
  }
  for (int i = 0; i < rlimits::kCount; ++i)
    g_limits.entries[i] = {r.limits[i].resource, static_cast<rlim_t>(r.limits[i].value), "setrlimit"};
  return true;
}

// pid 1 reads this as a failed step of the program child (program.h).
void report_failure(const char* step, int err) {
  program::ExecFailure f{err, {}};
  for (size_t i = 0; step[i] && i + 1 < sizeof f.step; ++i) f.step[i] = step[i];
  (void)::write(g_fds[kReport], &f, sizeof f);
}

// C: the runner learns its pid from the credentials (as the runner's pid
// namespace sees it) and answers once C is in the job's cgroup.
bool hello(int conn) {
  struct ucred cred {
    ::getpid(), ::getuid(), ::getgid()
  };
  char tag = kHello;
  struct iovec iov {
    &tag, 1
  };
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof cred)] = {};
  struct msghdr msg {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_CREDENTIALS;
  c->cmsg_len = CMSG_LEN(sizeof cred);
  std::memcpy(CMSG_DATA(c), &cred, sizeof cred);
  if (::sendmsg(conn, &msg, MSG_NOSIGNAL) != 1) {
    report_failure("sendmsg(hello)", errno);
    return false;
  }
  char answer = 0;
  ssize_t n;
  do n = ::recv(conn, &answer, 1, 0);
  while (n < 0 && errno == EINTR);
  if (n != 1 || answer != kJoined) {
    report_failure("join the job's cgroup", n < 0 ? errno : EPERM);
    return false;
  }
  return true;
}

// C, a fork of the template (glibc's fork: the imports' fork handlers run in
// the template, as they expect; OpenBLAS stops its threads, for one): after
// its hello, into pid 1's namespaces; C2, a vfork of C and so already in the
// job's pid namespace, forks the program and exits, and so does C. Returns
// in the program only. The program's parent was C2, whose namespace's reaper
// is the job's pid 1: that is where the program is reparented (a process
// whose parent is outside the namespace would go to the template's).
__attribute__((noinline)) void c_path(int conn) {
  // The template ignores SIGCHLD (its forks need no reaping); C2 must not:
  // a program that exits before C2 does would be reaped by the kernel at
  // once, and its pid 1 would wait for it until the deadline. With the
  // default, it stays a zombie until C2 exits and goes to pid 1 as one.
  if (::signal(SIGCHLD, SIG_DFL) == SIG_ERR) {
    report_failure("signal(SIGCHLD)", errno);
    ::_exit(1);
  }
  if (!hello(conn)) ::_exit(1);
  if (::setns(g_fds[kPidfd], kJoinFlags) != 0) {
    report_failure("setns(pid 1's namespaces)", errno);
    ::_exit(1);
  }
  const pid_t c2 = ::vfork();
  if (c2 == 0) {
    const pid_t program = ::fork();
    if (program == 0) {
      g_is_program = true;
      return;
    }
    if (program < 0) report_failure("fork(program)", errno);
    ::_exit(program < 0 ? 1 : 0);
  }
  if (c2 < 0) report_failure("vfork(C2)", errno);
  int st;
  while (c2 > 0 && ::waitpid(c2, &st, 0) < 0 && errno == EINTR) {}
  ::_exit(0);
}

// The template: one fork per request, reaped later (the template does not
// wait for the runner's answer to C). Returns in the program only.
void fork_program(int conn) {
  const pid_t c = ::fork();
  if (c == 0) {
    c_path(conn);
    return;  // the program
  }
  if (c < 0) report_failure("fork(C)", errno);
}

// The program, in the job's namespaces (pid 1's child once C2 exited): the
// sandbox's user, then the program child's steps; Started to pid 1.
void become_program(int conn) {
  ::close(conn);
  Layers layers;
  auto fail = [](const char* step) {
    report_failure(step, errno);
    ::_exit(127);
  };
  // Not the template's parent's death: the job's (pid 1 kills the namespace).
  if (::prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0) != 0) fail("prctl(PR_SET_PDEATHSIG)");

  if (::setresgid(kSandboxGid, kSandboxGid, kSandboxGid) != 0) fail("setresgid(sandbox)");
  if (::setresuid(kSandboxUid, kSandboxUid, kSandboxUid) != 0) fail("setresuid(sandbox)");
  if (::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) fail("prctl(PR_SET_DUMPABLE)");
  // The pidfd names pid 1: nothing of the template's reaches the program.
  ::close(g_fds[kPidfd]);
  const Request& r = g_in.request;
  program::Io io{g_fds[kStdout],
                 g_fds[kStderr],
                 g_fds[kReport],
                 r.has_ruleset ? g_fds[kRuleset] : -1,
                 g_fds[kGo],
                 g_fds[kReady],
                 -1,
                 &g_limits,
                 g_in.filter,
                 r.filter_len,
                 r.last_cap,
                 &layers};
  program::take_steps_in_child(io);
  // take_steps_in_child moved the report pipe above the others.
  Started s{0, ::getpid(), layers.bits()};
  (void)::write(io.report_fd, &s, sizeof s);
  ::close(io.report_fd);
}

}  // namespace
}  // namespace sandbox::template_fork

extern "C" int throwbox_template_serve(int listen_fd, int ready_fd) {
  using namespace sandbox::template_fork;
  const char ready = 'r';
  // Its forks (C, and a C2 orphaned before its C reaped it) are reaped by the
  // kernel as they exit: none lingers as a zombie between requests.
  if (::signal(SIGCHLD, SIG_IGN) == SIG_ERR) ::_exit(1);
  if (::write(ready_fd, &ready, 1) != 1) ::_exit(1);
  ::close(ready_fd);
  for (;;) {
    const int conn = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      ::_exit(errno == EINVAL ? 0 : 1);  // shut down, or broken
    }
    if (receive(conn)) {
      fork_program(conn);
      if (g_is_program) {
        become_program(conn);
        return g_in.request.ahead ? 2 : 1;
      }
      close_received();
    }
    ::close(conn);
  }
}
