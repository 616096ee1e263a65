// The parser helper's server side (client.h). The helper is spawned with an
// empty environment and only its control socket (fd 3) beside stdio; a
// child's socket goes to the helper by SCM_RIGHTS and its pidfd comes back.
#include "server/helper/client.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <spdlog/spdlog.h>
#include <vector>

#include "server/util/clock.h"
#include "server/util/text.h"
#include "server/util/fd_passing.h"

namespace helper {
namespace {

constexpr int kStartTimeoutMs = 10000;  // loading libmagic and confining: tens of ms here
constexpr int kForkTimeoutMs = 5000;    // a fork and a pidfd; well under 1 ms here

util::Error fail(const std::string& why) {
  return util::make_error(util::ErrorCode::kSandbox, "parser helper: " + why);
}

}  // namespace

util::Result<Message> Child::call(const Message& request, int timeout_ms, uint64_t answer_bytes_max) {
  if (!alive()) return fail("the child is gone");
  const int64_t deadline = util::now_ms() + timeout_ms;
  if (auto s = write_message(sock_.get(), request); !s) {
    kill();
    return fail("sending: " + s.error().message);
  }
  auto answer = read_message(sock_.get(), deadline, answer_bytes_max);
  if (!answer) {
    kill();
    return fail(answer.error().message == "no answer in time"
                    ? "no answer within " + std::to_string(timeout_ms) + " ms (killed)"
                    : "it failed on this input (" + answer.error().message + ")");
  }
  if (answer->kind == Kind::kFailure) {
    const std::string why = answer->meta.contains("error") && answer->meta["error"].is_string()
                                ? answer->meta["error"].get<std::string>()
                                : "no reason given";
    return fail(util::escape_for_log(util::utf8_prefix(why, 300)));
  }
  if (answer->kind != Kind::kAnswer) {
    kill();
    return fail("an answer of the wrong kind");
  }
  return answer;
}

void Child::kill() {
  if (pidfd_.valid()) (void)::syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
  pidfd_.reset();
  sock_.reset();
}

util::Status Parsers::start() {
  std::lock_guard lock(mu_);
  if (control_.valid()) return util::ok_status();
  return spawn_locked();
}

Parsers::~Parsers() {
  std::lock_guard lock(mu_);
  stop_locked();
}

void Parsers::stop_locked() {
  control_.reset();  // EOF: the helper exits; its children end with their sockets
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);  // one that stopped answering exits all the same
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {}
  }
  pid_ = -1;
}

util::Status Parsers::spawn_locked() {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
    return fail(util::call_error("socketpair", "control", errno));
  util::UniqueFd mine(pair[0]), theirs(pair[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, theirs.get(), 3);  // dup2 clears CLOEXEC on fd 3
  std::vector<std::string> args{exe_};
  if (id_.as_root) {
    args.insert(args.end(), {"--uid", std::to_string(id_.uid), "--gid", std::to_string(id_.gid)});
  } else {
    args.push_back("--user-namespace");
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  char* envp[] = {nullptr};  // nothing of the server's environment
  pid_t pid = -1;
  const int err = ::posix_spawn(&pid, exe_.c_str(), &actions, nullptr, argv.data(), envp);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) return fail(util::call_error("posix_spawn", exe_, err));
  theirs.reset();
  pid_ = pid;
  control_ = std::move(mine);
  auto ready = read_message(control_.get(), util::now_ms() + kStartTimeoutMs, 0);
  if (!ready || ready->kind != Kind::kAnswer || !ready->meta.value("ready", false)) {
    stop_locked();
    return fail("it did not start and confine itself (" +
                (ready ? std::string("an unexpected first message") : ready.error().message) +
                "; its error is in this log)");
  }
  landlock_abi_ = ready->meta.value("landlock_abi", 0);
  return util::ok_status();
}

util::Result<Child> Parsers::fork_locked() {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
    return fail(util::call_error("socketpair", "child", errno));
  util::UniqueFd mine(pair[0]), theirs(pair[1]);
  const char byte = 'f';
  if (util::send_with_fd(control_.get(), &byte, 1, theirs.get()) != 1)
    return fail(util::call_error("sendmsg", "fork", errno));
  theirs.reset();
  // The reply: 'k' with the child's pidfd, or 'e'.
  struct pollfd p {
    control_.get(), POLLIN, 0
  };
  if (::poll(&p, 1, kForkTimeoutMs) != 1) return fail("no answer to a fork request");
  char reply = 0;
  int pidfd = -1;
  ssize_t got;
  do got = util::receive_with_fd(control_.get(), &reply, 1, 0, &pidfd);
  while (got < 0 && errno == EINTR);
  if (got != 1) {
    if (pidfd >= 0) ::close(pidfd);
    return fail(util::call_error("recvmsg", "fork", got < 0 ? errno : EPIPE));
  }
  util::UniqueFd held(pidfd);
  if (reply != 'k' || !held.valid()) return fail("it could not fork a child");
  return Child(std::move(mine), std::move(held));
}

util::Result<Child> Parsers::child() {
  std::lock_guard lock(mu_);
  if (!control_.valid())
    if (auto s = spawn_locked(); !s) return s.error();
  auto c = fork_locked();
  if (c) return c;
  // The helper died (or stopped answering): started again, once.
  spdlog::warn("parser helper: {}; starting it again", c.error().message);
  stop_locked();
  ++restarts_;
  if (auto s = spawn_locked(); !s) return s.error();
  return fork_locked();
}

}  // namespace helper
