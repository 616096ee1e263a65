// build/throwbox-parser: the parser helper. The server starts it once (its
// control socket on fd 3); it loads what parsing needs, confines itself
// (confine.h), says it is ready, then forks a child per socket the server
// sends. A child parses the hostile bytes of one job (its artifacts, or its
// proxy request heads) or of one upload, and exits at its socket's EOF: a
// parser bug takes one child, never the server or another job's files.
// The zygote itself never parses anything a job or a client made.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "server/artifacts/gate.h"
#include "server/artifacts/inspect.h"
#include "server/parser/answers.h"
#include "server/parser/confine.h"
#include "server/helper/wire.h"
#include "server/util/fd.h"
#include "server/util/text.h"
#include "server/util/fd_passing.h"

namespace {

using helper::Kind;
using helper::Message;
using parser::answer_for;
using parser::failure;

constexpr int kControlFd = 3;

[[noreturn]] void die(const std::string& step, const std::string& why) {
  std::fprintf(stderr, "throwbox-parser: %s: %s\n", step.c_str(), why.c_str());
  std::exit(1);
}

// A child: requests on its socket, one at a time, until EOF.
[[noreturn]] void serve_child(int sock, pid_t zygote, const artifacts::types::Sniffer& sniffer) {
  // Gone with the zygote (and so with the server).
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || ::getppid() != zygote) ::_exit(1);
  if (auto s = parser::confine::limit_child(helper::kChildAddressSpaceBytes, helper::kChildCpuSeconds); !s)
    die("limit child", s.error().message);
  if (auto s = parser::confine::install_child_filter(); !s) die("child filter", s.error().message);
  for (;;) {
    auto request = helper::read_message(sock, 0, helper::kRequestBytesMax);
    if (!request) ::_exit(0);  // the server closed it (or sent garbage): done
    Message answer;
    try {
      answer = answer_for(*request, sniffer);
    } catch (const std::exception& e) {
      answer = failure(std::string("the parser failed: ") + e.what());
    }
    if (!helper::write_message(sock, answer)) ::_exit(0);
  }
}

// The zygote's loop: a socket in (SCM_RIGHTS), a child forked to serve it,
// the child's pidfd out, so the server can kill it. EOF: the server is gone.
[[noreturn]] void serve_forks(const artifacts::types::Sniffer& sniffer) {
  // Children are reaped by the kernel: nothing here waits on them.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ignore.sa_flags = SA_NOCLDWAIT;
  ::sigaction(SIGCHLD, &ignore, nullptr);
  const pid_t self = ::getpid();
  for (;;) {
    int fd = -1;
    char byte = 0;
    const ssize_t n = util::receive_with_fd(kControlFd, &byte, 1, 0, &fd);
    util::UniqueFd child_sock(fd);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ::_exit(0);
    int pidfd = -1;
    if (child_sock.valid()) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::close(kControlFd);
        serve_child(child_sock.get(), self, sniffer);
      }
      if (pid > 0) pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    }
    util::UniqueFd held(pidfd);
    // The answer: 'k' with the pidfd, or 'e' (no socket came, the fork failed).
    const char reply = held.valid() ? 'k' : 'e';
    if (util::send_with_fd(kControlFd, &reply, 1, held.get()) < 0) ::_exit(0);
  }
}

}  // namespace

// The helper's steps, in order; a failed step ends it (the server refuses to
// go on without it): 1 libmagic's database, while files can still be read
// 2 namespaces 3 the empty root 4 its identity 5 no capability 6 no new
// privileges, no dumps 7 Landlock 8 the zygote's system calls 9 ready, with
// what it did 10 fork a child per socket the server sends.
int main(int argc, char** argv) {
  parser::confine::Identity id;
  if (argc == 5 && std::strcmp(argv[1], "--uid") == 0 && std::strcmp(argv[3], "--gid") == 0) {
    id.as_root = true;
    id.uid = static_cast<uid_t>(std::strtoul(argv[2], nullptr, 10));
    id.gid = static_cast<gid_t>(std::strtoul(argv[4], nullptr, 10));
    if (id.uid == 0 || id.gid == 0) die("arguments", "the helper's uid and gid are never 0");
  } else if (!(argc == 2 && std::strcmp(argv[1], "--user-namespace") == 0)) {
    std::fprintf(stderr,
                 "usage: throwbox-parser --uid N --gid N | --user-namespace   (started by throwbox serve, fd 3)\n");
    return 2;
  }
  auto sniffer = artifacts::types::Sniffer::create();
  if (!sniffer) die("libmagic", sniffer.error().message);
  if (auto s = parser::confine::unshare_namespaces(id); !s) die("namespaces", s.error().message);
  if (auto s = parser::confine::pivot_to_empty_root(); !s) die("empty root", s.error().message);
  if (auto s = parser::confine::become(id); !s) die("identity", s.error().message);
  if (auto s = parser::confine::drop_capabilities(id); !s) die("capabilities", s.error().message);
  if (auto s = parser::confine::harden_process(); !s) die("no_new_privs", s.error().message);
  auto landlock = parser::confine::deny_all_files();
  if (!landlock) die("landlock", landlock.error().message);
  const uid_t uid = ::getuid();
  if (auto s = parser::confine::install_zygote_filter(); !s) die("seccomp", s.error().message);
  Message ready;
  ready.kind = Kind::kAnswer;
  ready.meta = {{"ready", true}, {"uid", uid}, {"landlock_abi", *landlock}};
  if (!helper::write_message(kControlFd, ready)) return 1;
  serve_forks(*sniffer);
}
