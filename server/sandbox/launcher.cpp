// The runner's side of one job, after the zygote built pid 1 (zygote.cpp,
// zygote_main; then pid1.cpp, pid1_main; program.cpp, program_main): the
// runner's steps, in order (launch):
// 1 adopt what the zygote made  2 start gate (cold: the broker's release)
// 3 warm: await the claim, deliver code, inputs and a workspace  4 supervise:
// capture, deadline  5 harvest /outputs, copy a workspace's /work out
// 6 account, build the outcome from what the steps reported; Teardown
// releases pid 1 and removes the cgroup after. A cold workspace is copied in
// before the start gate (2).
// Any failed step before the program starts is a sandbox_error; the code never runs.
#include "server/sandbox/launcher.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/sandbox/capabilities.h"
#include "server/sandbox/capture.h"
#include "server/sandbox/cgroups.h"
#include "server/sandbox/trace.h"
#include "server/sandbox/child_report.h"
#include "server/sandbox/deliver.h"
#include "server/sandbox/harvest.h"
#include "server/sandbox/layers.h"
#include "server/sandbox/mounts.h"
#include "server/sandbox/template_fork.h"
#include "server/sandbox/workspace.h"
#include "server/sandbox/zygote.h"
#include "server/util/clock.h"
#include "server/util/fd.h"
#include "server/util/text.h"
#include "server/util/fd_passing.h"

namespace sandbox::launcher {
namespace {

constexpr int kSetupTimeoutMs = 10000;       // building the sandbox; far above the measured cost
constexpr int kKillGraceMs = 2000;           // pid 1 reporting after a kill request
constexpr int kDrainTimeoutMs = 1000;        // pipes reaching EOF once everything is dead
constexpr size_t kClaimMaxBytes = 64 << 20;  // code and input names; far above the policy ceilings

using util::now_ms;

Outcome sandbox_error(std::string message) {
  Outcome o;
  o.status = Status::sandbox_error;
  o.error = std::move(message);
  return o;
}

struct Supervision {
  bool ready = false;
  bool cancelled = false;
  bool exited_report = false;
  bool timed_out = false;
  bool child_gone = false;
  bool network = false;       // the job has a network profile: pid 1 sends its proxy listener
  std::string network_error;  // handing the listener over failed: the job was killed
  Layers layers;              // what pid 1's and the program child's steps reported done
  std::string setup_error;
  ExitReport report{};
  int64_t started_ms = 0;
  int64_t ended_ms = 0;
};

// pid 1's proxy listener (kMsgListener) to the broker: a line on the
// runner's stdout (a unix socket, runner_process.cpp) carrying the descriptor.
util::Status hand_listener_to_broker(int out_fd, int listener) {
  static const char kLine[] = "{\"network\":\"listener\"}\n";
  const ssize_t n = util::send_with_fd(out_fd, kLine, sizeof kLine - 1, listener);
  if (n <= 0)
    return util::make_error(util::ErrorCode::kSandbox,
                            util::call_error("sendmsg", "proxy listener to the server", errno));
  if (n < static_cast<ssize_t>(sizeof kLine - 1) &&
      !util::write_all(out_fd, kLine + n, sizeof kLine - 1 - static_cast<size_t>(n)))
    return util::make_error(util::ErrorCode::kSandbox, util::call_error("write", "proxy listener line", errno));
  return util::ok_status();
}

// One message from pid 1, and the descriptor it carried (kMsgListener), if any.
ssize_t receive_from_pid1(int sock, char* buf, size_t size, util::UniqueFd& passed) {
  int fd = -1;
  const ssize_t n = util::receive_with_fd(sock, buf, size, MSG_DONTWAIT, &fd);
  // The first descriptor pid 1 hands over is the one kept.
  if (fd >= 0 && !passed.valid())
    passed.reset(fd);
  else if (fd >= 0)
    ::close(fd);
  return n;
}

// One poll loop over both output pipes and the control socket: output is read
// concurrently (no pipe can fill and stall the program), the deadline is ours.
// A progress line for the broker: one JSON object, newline-terminated.
void write_progress(int fd, const Supervision& sv, const capture::Stream& out_cap, const capture::Stream& err_cap) {
  nlohmann::json p{{"progress",
                    {{"elapsed_ms", now_ms() - sv.started_ms},
                     {"stdout_bytes", out_cap.total_bytes()},
                     {"stderr_bytes", err_cap.total_bytes()},
                     {"last_line", out_cap.last_line()}}}};
  std::string line = p.dump() + "\n";
  util::write_all(fd, line.data(), line.size());
}

void supervise(const LaunchSpec& spec, int sock, util::UniqueFd& out, util::UniqueFd& err, capture::Stream& out_cap,
               capture::Stream& err_cap, Supervision& sv, int cancel_fd, int progress_fd, int broker_fd) {
  const int64_t setup_deadline = now_ms() + kSetupTimeoutMs;
  int64_t run_deadline = 0, kill_deadline = 0, drain_deadline = 0;
  int64_t next_progress = 0;
  bool cancel_pending = false;
  char buf[65536];
  auto kill_tree = [&] {
    char k = kMsgKill;
    ::send(sock, &k, 1, MSG_NOSIGNAL);
    kill_deadline = now_ms() + kKillGraceMs;
  };
  for (;;) {
    bool pipes_open = out.valid() || err.valid();
    if (sv.exited_report && !pipes_open) return;
    if ((sv.child_gone || !sv.setup_error.empty()) && !pipes_open) return;
    int64_t now = now_ms();
    int64_t deadline = !sv.ready ? setup_deadline : run_deadline;
    if (kill_deadline) deadline = kill_deadline;
    if (drain_deadline) deadline = drain_deadline;
    if (now >= deadline) {
      if (drain_deadline || kill_deadline || !sv.ready) return;  // give up waiting
      sv.timed_out = true;
      kill_tree();
      continue;
    }
    int64_t wake = deadline;
    if (progress_fd >= 0 && sv.ready && !sv.exited_report) {
      if (now >= next_progress) {
        if (next_progress) write_progress(progress_fd, sv, out_cap, err_cap);
        next_progress = now + 1000;
      }
      wake = std::min(wake, next_progress);
    }
    struct pollfd fds[4] = {{out.get(), POLLIN, 0},
                            {err.get(), POLLIN, 0},
                            {sv.child_gone ? -1 : sock, POLLIN, 0},
                            {sv.cancelled ? -1 : cancel_fd, POLLIN, 0}};
    int r = ::poll(fds, 4, static_cast<int>(std::max<int64_t>(0, wake - now)));
    if (r < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[3].revents) {
      // Cancelled: kill the whole tree now (or as soon as it exists).
      sv.cancelled = true;
      if (sv.ready && !sv.exited_report && !kill_deadline)
        kill_tree();
      else if (!sv.ready)
        cancel_pending = true;
    }
    for (int i = 0; i < 2; ++i) {
      if (!fds[i].revents) continue;
      util::UniqueFd& fd = i == 0 ? out : err;
      long n = util::read_some(fd.get(), buf, sizeof buf);
      if (n <= 0)
        fd.reset();
      else
        (i == 0 ? out_cap : err_cap).feed(buf, static_cast<size_t>(n));
    }
    if (fds[2].revents) {
      char msg[1 + sizeof(ExitReport) + 1024];
      util::UniqueFd passed;
      ssize_t n = receive_from_pid1(sock, msg, sizeof msg - 1, passed);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n == 1 && msg[0] == kMsgListener) {
        // Only a job that asked for it gets a listener; without the broker
        // serving it the program would wait on a proxy that never answers.
        util::Status handed =
            !passed.valid() ? util::make_error(util::ErrorCode::kSandbox, "pid 1 sent no proxy listener")
            : !sv.network
                ? util::make_error(util::ErrorCode::kSandbox, "a proxy listener for a job without a network profile")
                : hand_listener_to_broker(broker_fd, passed.get());
        if (!handed && sv.network_error.empty()) {
          sv.network_error = handed.error().message;
          kill_tree();
        }
        continue;
      }
      if (n <= 0) {
        sv.child_gone = true;  // pid 1 died without reporting
        if (!sv.exited_report && sv.setup_error.empty() && sv.ready) sv.ended_ms = now_ms();
        if (!drain_deadline) drain_deadline = now_ms() + kDrainTimeoutMs;
        continue;
      }
      if (msg[0] == kMsgReady && n == 1 + static_cast<ssize_t>(sizeof(uint32_t))) {
        uint32_t bits;
        std::memcpy(&bits, msg + 1, sizeof bits);
        sv.layers = Layers(bits);
        sv.ready = true;
        sv.started_ms = now_ms();
        run_deadline = sv.started_ms + static_cast<int64_t>(spec.timeout_ms);
        if (cancel_pending) kill_tree();
      } else if (msg[0] == kMsgError) {
        msg[n] = '\0';
        sv.setup_error = msg + 1;
        drain_deadline = now_ms() + kDrainTimeoutMs;
      } else if (msg[0] == kMsgExit && n == 1 + static_cast<ssize_t>(sizeof(ExitReport))) {
        std::memcpy(&sv.report, msg + 1, sizeof sv.report);
        sv.exited_report = true;
        sv.ended_ms = now_ms();
        kill_deadline = 0;
        drain_deadline = now_ms() + kDrainTimeoutMs;
      }
    }
  }
}

// Forked from a template: pid 1 sent the program's descriptors (kMsgFork).
// The template is asked for a fork with them, pid 1's pidfd, the job's
// limits and filter; the fork's hello names it (its credentials: a process
// of the template's pid namespace, or the request is refused), and it is
// moved into the job's cgroup before it may join pid 1's namespaces. pid 1
// learns the rest from its report pipe.
util::Status fork_from_template(const LaunchSpec& spec, pid_t pid1, std::vector<util::UniqueFd>& passed,
                                int64_t deadline) {
  auto failed = [](std::string what) {
    return util::make_error(util::ErrorCode::kSandbox, "forking the program from the template: " + std::move(what));
  };
  using namespace template_fork;
  if (spec.from_template_pid == 0) return failed("this sandbox is not forked from a template");
  if (passed.size() != kFds - 2 && passed.size() != kFds - 1)
    return failed("pid 1 sent " + std::to_string(passed.size()) + " descriptors");
  const cgroups::Host host = cgroups::host_from_json(spec.cgroup_host);
  auto filter = zygote::filter_for(spec, host);
  if (!filter) return failed(filter.error().message);
  if (filter->instructions.empty() || filter->instructions.size() > seccomp::kMaxInstructions)
    return failed("the seccomp program has " + std::to_string(filter->instructions.size()) + " instructions");
  const rlimits::Table limits = zygote::limits_for(spec, host);
  Request r{};
  r.magic = kMagic;
  r.version = kVersion;
  r.last_cap = capabilities::read_last_cap_in_parent();
  r.has_ruleset = passed.size() == kFds - 1 ? 1 : 0;
  r.ahead = spec.from_template_ahead ? 1 : 0;
  for (int i = 0; i < rlimits::kCount; ++i)
    r.limits[i] = {limits.entries[i].resource, static_cast<uint64_t>(limits.entries[i].value)};
  r.filter_len = static_cast<uint32_t>(filter->instructions.size());
  std::string request(reinterpret_cast<const char*>(&r), sizeof r);
  request.append(reinterpret_cast<const char*>(filter->instructions.data()),
                 filter->instructions.size() * sizeof(sock_filter));

  util::UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid1, 0)));
  if (!pidfd.valid()) return failed(util::call_error("pidfd_open", "pid 1", errno));
  util::UniqueFd conn(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!conn.valid()) return failed(util::call_error("socket", "AF_UNIX", errno));
  const int one = 1;
  if (::setsockopt(conn.get(), SOL_SOCKET, SO_PASSCRED, &one, sizeof one) != 0)
    return failed(util::call_error("setsockopt", "SO_PASSCRED", errno));
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, spec.from_template_socket.c_str(), spec.from_template_socket.size() + 1);
  // A full backlog (EAGAIN) is waited out until the deadline.
  while (::connect(conn.get(), reinterpret_cast<const struct sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EAGAIN || now_ms() >= deadline)
      return failed(util::call_error("connect", spec.from_template_socket, errno));
    struct timespec pause {
      0, 1000 * 1000
    };
    ::nanosleep(&pause, nullptr);
  }
  int fds[kFds];
  fds[kPidfd] = pidfd.get();
  for (size_t i = 0; i < passed.size(); ++i) fds[i + 1] = passed[i].get();
  const int count = static_cast<int>(passed.size()) + 1;
  const ssize_t sent = util::send_with_fds(conn.get(), request.data(), request.size(), fds, count);
  if (sent != static_cast<ssize_t>(request.size())) return failed(util::call_error("sendmsg", "request", errno));
  passed.clear();  // the template has them now; pid 1 hears from the fork
  pidfd.reset();

  // The hello, with the fork's credentials.
  struct ucred cred {};
  char tag = 0;
  for (;;) {
    struct pollfd p {
      conn.get(), POLLIN, 0
    };
    const int64_t left = deadline - now_ms();
    if (left <= 0) return failed("the template's fork did not say hello in time");
    const int pr = ::poll(&p, 1, static_cast<int>(left));
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) return failed(util::call_error("poll", "hello", errno));
    if (pr == 0) continue;
    struct iovec iov {
      &tag, 1
    };
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(struct ucred))] = {};
    struct msghdr msg {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(conn.get(), &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n != 1 || tag != kHello) return failed("the template answered no hello (it refused the request or died)");
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len == CMSG_LEN(sizeof cred))
        std::memcpy(&cred, CMSG_DATA(c), sizeof cred);
    break;
  }
  if (cred.pid <= 0) return failed("the hello carried no credentials");
  struct stat fork_ns {
  }, template_ns{};
  const std::string fork_path = "/proc/" + std::to_string(cred.pid) + "/ns/pid";
  const std::string template_path = "/proc/" + std::to_string(spec.from_template_pid) + "/ns/pid";
  if (::stat(fork_path.c_str(), &fork_ns) != 0 || ::stat(template_path.c_str(), &template_ns) != 0 ||
      fork_ns.st_ino != template_ns.st_ino || fork_ns.st_dev != template_ns.st_dev)
    return failed("the hello's process " + std::to_string(cred.pid) + " is not in the template's pid namespace");
  const cgroups::Job cgroup = cgroups::Job::named_in_parent(host, spec.job_id);
  if (auto a = cgroup.attach_in_parent(cred.pid); !a) return failed(a.error().message);
  const char joined = kJoined;
  if (::send(conn.get(), &joined, 1, MSG_NOSIGNAL) != 1) return failed(util::call_error("send", "joined", errno));
  trace::mark("template fork in the job's cgroup");
  return util::ok_status();
}

// Warm: waits for pid 1's "built" message, announces the sandbox to the pool
// and reads the claim line. An error, pid 1's death, a cancel (SIGTERM: the
// pool discarding an idle sandbox) or EOF on claim_fd end the wait unclaimed.
util::Result<Claim> await_claim(const LaunchSpec& spec, pid_t pid1, int sock, int cancel_fd, int ready_fd,
                                int claim_fd) {
  const int64_t setup_deadline = now_ms() + kSetupTimeoutMs;
  bool forked = false;
  bool built = false;
  std::string line;
  char buf[65536];
  for (;;) {
    int64_t left = built ? -1 : setup_deadline - now_ms();
    if (!built && left <= 0)
      return util::make_error(util::ErrorCode::kSandbox, "warm sandbox set-up did not finish in time");
    struct pollfd fds[3] = {{sock, POLLIN, 0}, {cancel_fd, POLLIN, 0}, {built ? claim_fd : -1, POLLIN, 0}};
    int r = ::poll(fds, 3, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return util::make_error(util::ErrorCode::kSandbox, util::call_error("poll", "claim", errno));
    // SIGTERM: the pool discarding an idle sandbox, or a job's cancel during its claim.
    if (fds[1].revents) return util::make_error(util::ErrorCode::kCancelled, "cancelled before the program started");
    if (fds[0].revents) {
      char msg[1024];
      std::vector<util::UniqueFd> passed;
      ssize_t n = util::receive_with_fds(sock, msg, sizeof msg - 1, MSG_DONTWAIT,
                                         [&passed](int fd) { passed.emplace_back(fd); });
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) return util::make_error(util::ErrorCode::kSandbox, "sandbox init exited before a claim");
      if (msg[0] == kMsgError) {
        msg[n] = '\0';
        return util::make_error(util::ErrorCode::kSandbox, msg + 1);
      }
      if (n == 1 && msg[0] == kMsgFork && !forked) {
        forked = true;
        if (auto f = fork_from_template(spec, pid1, passed, setup_deadline); !f) return f.error();
      }
      if (msg[0] == kMsgWarm && !built) {
        built = true;
        std::string ready = "{\"warm\":\"ready\"}\n";
        if (!spec.template_socket.empty())
          ready =
              nlohmann::json{
                  {"warm", "ready"}, {"template_pid", pid1}, {"template_start_time", zygote::process_start_time(pid1)}}
                  .dump() +
              "\n";
        if (!util::write_all(ready_fd, ready.data(), ready.size()))
          return util::make_error(util::ErrorCode::kSandbox, util::call_error("write", "warm ready", errno));
      }
    }
    if (fds[2].revents) {
      long n = util::read_some(claim_fd, buf, sizeof buf);
      if (n < 0) return util::make_error(util::ErrorCode::kSandbox, util::call_error("read", "claim", errno));
      if (n == 0) return util::make_error(util::ErrorCode::kSandbox, "warm sandbox released unclaimed");
      line.append(buf, static_cast<size_t>(n));
      if (line.size() > kClaimMaxBytes) return util::make_error(util::ErrorCode::kSandbox, "claim too large");
      size_t nl = line.find('\n');
      if (nl == std::string::npos) continue;
      auto doc = nlohmann::json::parse(line.substr(0, nl), nullptr, false);
      if (doc.is_discarded()) return util::make_error(util::ErrorCode::kSandbox, "claim is not JSON");
      return claim_from_json(doc);
    }
  }
}

// Cold: the broker closes the runner's stdin once the job is in its ledger,
// which it records while this runner builds the sandbox. Until that EOF the
// program must not start. Input instead of EOF, a cancel or pid 1's death
// (or an error from it) ends the wait with an error.
util::Status await_start(int sock, int cancel_fd, int start_fd) {
  if (start_fd < 0) return util::ok_status();
  const int64_t deadline = now_ms() + kSetupTimeoutMs;
  for (;;) {
    int64_t left = deadline - now_ms();
    if (left <= 0) return util::make_error(util::ErrorCode::kSandbox, "the broker did not release the job in time");
    struct pollfd fds[3] = {{start_fd, POLLIN, 0}, {cancel_fd, POLLIN, 0}, {sock, POLLIN, 0}};
    int r = ::poll(fds, 3, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return util::make_error(util::ErrorCode::kSandbox, util::call_error("poll", "start", errno));
    if (fds[1].revents) return util::make_error(util::ErrorCode::kCancelled, "cancelled before the program started");
    if (fds[2].revents) {
      char msg[1024];
      ssize_t n = ::recv(sock, msg, sizeof msg - 1, MSG_DONTWAIT | MSG_PEEK);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) return util::make_error(util::ErrorCode::kSandbox, "sandbox init exited before the start");
      // pid 1's error report: left for supervise() to read and report.
      if (msg[0] == kMsgError) return util::ok_status();
    }
    if (fds[0].revents) {
      char c;
      long n = util::read_some(start_fd, &c, 1);
      if (n == 0) return util::ok_status();
      if (n < 0) return util::make_error(util::ErrorCode::kSandbox, util::call_error("read", "start", errno));
      return util::make_error(util::ErrorCode::kSandbox, "unexpected input after the launch spec");
    }
  }
}

// A workspace job: pid 1's word that /work is ready for the copy
// (kMsgWorkReady; cold: pivoted, warm: resized). Its error, its death, a
// cancel or the set-up deadline end the wait.
util::Status await_work_ready(int sock, int cancel_fd) {
  const int64_t deadline = now_ms() + kSetupTimeoutMs;
  for (;;) {
    int64_t left = deadline - now_ms();
    if (left <= 0)
      return util::make_error(util::ErrorCode::kSandbox, "the sandbox's /work was not ready for the workspace in time");
    struct pollfd fds[2] = {{sock, POLLIN, 0}, {cancel_fd, POLLIN, 0}};
    int r = ::poll(fds, 2, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return util::make_error(util::ErrorCode::kSandbox, util::call_error("poll", "work ready", errno));
    if (fds[1].revents) return util::make_error(util::ErrorCode::kCancelled, "cancelled before the program started");
    if (!fds[0].revents) continue;
    char msg[1024];
    ssize_t n = ::recv(sock, msg, sizeof msg - 1, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return util::make_error(util::ErrorCode::kSandbox, "sandbox init exited before /work was ready");
    if (msg[0] == kMsgError) {
      msg[n] = '\0';
      return util::make_error(util::ErrorCode::kSandbox, msg + 1);
    }
    if (n == 1 && msg[0] == kMsgWorkReady) return util::ok_status();
    return util::make_error(util::ErrorCode::kSandbox,
                            "sandbox init sent an unexpected message while /work was made ready");
  }
}

// A cold workspace job: the workspace into /work once pid 1 pivoted, before
// the start gate (the copy overlaps the broker's recording of the job).
util::Status copy_workspace_in_cold(pid_t pid, const LaunchSpec& spec, int sock, int cancel_fd) {
  if (spec.warm != Warm::cold || spec.workspace_in.empty()) return util::ok_status();
  if (auto r = await_work_ready(sock, cancel_fd); !r) return r;
  const pid_t server = ::getppid();
  if (auto c = workspace::copy_in(pid, spec, spec.workspace_in); !c) return c;
  if (!deliver::parent_alive(server))
    return util::make_error(util::ErrorCode::kSandbox, "the server exited while the workspace was copied in");
  trace::mark("workspace copied in");
  return util::ok_status();
}

// Warm, a claim with a workspace: pid 1 gives /work the workspace's size and
// room for the claim's code file (kMsgWorkspace) before claim_files copies
// the workspace in.
util::Status size_work_for_claim(const LaunchSpec& spec, const Claim& claim, int sock, int cancel_fd) {
  if (auto c = check_claim(spec, claim); !c) return c;
  if (claim.workspace_in.empty()) return util::ok_status();
  char msg[1 + sizeof(uint64_t)];
  msg[0] = kMsgWorkspace;
  const uint64_t room = workspace::code_room_bytes(claim.code.size());
  std::memcpy(msg + 1, &room, sizeof room);
  if (::send(sock, msg, sizeof msg, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof msg))
    return util::make_error(util::ErrorCode::kSandbox, util::call_error("send", "workspace", errno));
  return await_work_ready(sock, cancel_fd);
}

// The last line a warm sandbox's interpreter wrote to stderr before it died
// unclaimed (a preload or warm-up that raised: its traceback's last line),
// at most kTailMaxBytes of it; "" if it wrote none. No job's code has run in
// it: only the runtime's start-up. The log's sink escapes it.
std::string stderr_tail(int err_read) {
  constexpr size_t kTailMaxBytes = 512;
  std::string text;
  char buf[4096];
  for (int reads = 0; reads < 64; ++reads) {  // at most 256 KiB: the pipe's own bound
    struct pollfd p {
      err_read, POLLIN, 0
    };
    if (::poll(&p, 1, 0) <= 0) break;
    long n = util::read_some(err_read, buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > 4 * kTailMaxBytes) text.erase(0, text.size() - 4 * kTailMaxBytes);
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  const size_t nl = text.rfind('\n');
  if (nl != std::string::npos) text.erase(0, nl + 1);
  if (text.size() > kTailMaxBytes) text.erase(0, text.size() - kTailMaxBytes);
  return text;
}

}  // namespace

void Teardown::finish() {
  if (pid_ > 0) {
    if (kill_) ::kill(pid_, SIGKILL);
    sock_.reset();
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {}
    pid_ = -1;
  }
  if (!root_.empty()) {
    ::rmdir(root_.c_str());
    root_.clear();
  }
  if (!socket_.empty()) {
    ::unlink(socket_.c_str());
    socket_.clear();
  }
  cgroup_.destroy();
  cgroup_ = cgroups::Job();
}

void Teardown::adopt(const zygote::Report& built, const LaunchSpec* spec) {
  if (built.pid > 0) {
    pid_ = built.pid;
    kill_ = true;  // until pid 1 reports, releasing it means killing it
  }
  if (spec) {
    root_ = mounts::root_path(*spec);
    socket_ = spec->template_socket;
    cgroup_ = cgroups::Job::named_in_parent(cgroups::host_from_json(spec->cgroup_host), spec->job_id);
  }
}

Outcome abandon(const zygote::Report& built, const LaunchSpec* spec, std::string message) {
  Teardown teardown;
  teardown.adopt(built, spec);
  teardown.finish();
  return sandbox_error(std::move(message));
}

Outcome launch(const LaunchSpec& warm_or_cold, zygote::Channels& ch, const zygote::Report& built, Teardown& teardown,
               int cancel_fd, int progress_fd, int claim_fd) {
  // A warm spec becomes the job's once claimed (timeout, progress).
  LaunchSpec spec = warm_or_cold;
  // 1. What the zygote made (zygote_main) is torn down whatever it reported.
  teardown.adopt(built, &spec);
  const cgroups::Job& cgroup = teardown.cgroup_;
  const pid_t pid = built.pid;
  const int landlock_abi = built.landlock_abi;
  Outcome o;
  Supervision sv;
  capture::Stream out_cap(spec.stdout_max_bytes, "stdout"), err_cap(spec.stderr_max_bytes, "stderr");
  auto send_byte = [&](char byte) { (void)::send(ch.sock.get(), &byte, 1, MSG_NOSIGNAL); };
  // 2. Cold: a workspace copied into /work once pid 1 has pivoted, then the
  // start gate: nothing of the program runs before the broker's release.
  if (!built.error.empty()) {
    sv.setup_error = built.error;
  } else if (auto w = copy_workspace_in_cold(pid, spec, ch.sock.get(), cancel_fd); !w) {
    sv.setup_error = w.error().message;
    sv.cancelled = w.error().code == util::ErrorCode::kCancelled;
  } else if (auto g = await_start(ch.sock.get(), cancel_fd, spec.warm == Warm::cold ? claim_fd : -1); !g) {
    sv.setup_error = g.error().message;
    sv.cancelled = g.error().code == util::ErrorCode::kCancelled;
  } else {
    send_byte(kMsgStart);
  }
  trace::mark("zygote reaped, start");
  // 3. Warm: idle until a job claims the sandbox, then put its code, inputs
  // and workspace in and release the program.
  uint64_t cpu_at_claim_us = 0;
  if (sv.setup_error.empty() && spec.warm != Warm::cold) {
    auto claim = await_claim(spec, pid, ch.sock.get(), cancel_fd, progress_fd, claim_fd);
    if (!claim) {
      sv.setup_error = claim.error().message;
      sv.cancelled = claim.error().code == util::ErrorCode::kCancelled;
      if (!sv.cancelled)
        if (std::string tail = stderr_tail(ch.err_read.get()); !tail.empty())
          sv.setup_error += "; its stderr ended: " + tail;
    } else {
      spec.timeout_ms = claim->timeout_ms;
      spec.progress = claim->progress;
      spec.network = claim->network;
      spec.ca_env = claim->network && claim->ca_env;
      spec.workspace_in = claim->workspace_in;
      spec.workspace_out = claim->workspace_out;
      const pid_t server = ::getppid();
      if (auto w = size_work_for_claim(spec, *claim, ch.sock.get(), cancel_fd); !w) {
        sv.setup_error = w.error().message;
        sv.cancelled = w.error().code == util::ErrorCode::kCancelled;
      } else if (auto d = deliver::claim_files(pid, spec, *claim); !d) {
        sv.setup_error = d.error().message;
      } else if (!deliver::parent_alive(server)) {
        sv.setup_error = "the server exited while the job was being claimed";
      } else {
        // What the sandbox used before (its interpreter's start, the preload,
        // a fork's warm-up) is the pool's, not the job's.
        cpu_at_claim_us = cgroup.cpu_us();
        char go = spec.ca_env ? kMsgClaimNetworkCa : spec.network ? kMsgClaimNetwork : kMsgClaim;
        if (::send(ch.sock.get(), &go, 1, MSG_NOSIGNAL) != 1) sv.setup_error = util::call_error("send", "claim", errno);
      }
    }
    trace::mark("claimed");
  }
  // 4. Run, capture, enforce the deadline.
  sv.network = spec.network;
  if (sv.setup_error.empty())
    supervise(spec, ch.sock.get(), ch.out_read, ch.err_read, out_cap, err_cap, sv, cancel_fd,
              spec.progress ? progress_fd : -1, progress_fd);
  trace::mark("program done, drained");

  // 5. Harvest while pid 1 still holds the sandbox's mounts. A pid 1 that
  // reported has killed and reaped everything else in its namespace, and
  // stays until its socket closes, so nothing runs meanwhile. Only then may
  // the cgroup be killed: cgroup.kill would take pid 1 with it, and with it
  // /proc/<pid>/root (v2 hosts saw "open(/proc/N/root): ENOENT").
  std::string harvest_error;
  if (sv.exited_report) o.files = harvest::copy_outputs(pid, spec, harvest_error);
  trace::mark("harvested");
  // A workspace job: /work to workspace_out whatever ended the program (an
  // exit, the deadline, a cancel, a memory kill); not when it never started.
  workspace::Report kept;
  if (!spec.workspace_out.empty()) {
    if (sv.exited_report)
      kept = workspace::copy_out(pid, spec);
    else
      kept.error = sv.ready ? "sandbox init exited without a report: /work went with it" : "the program never started";
    trace::mark("workspace copied out");
  }
  auto with_workspace = [&](Outcome r) {
    if (!spec.workspace_out.empty()) workspace::add_to_outcome(kept, r);
    return r;
  };
  if (sv.timed_out || sv.cancelled) cgroup.kill_all();

  // 6. Releasing pid 1 ends the namespaces (Teardown::finish, after the
  // outcome is reported); SIGKILL covers a pid 1 that never reported.
  teardown.kill_ = !sv.exited_report;
  teardown.sock_ = std::move(ch.sock);

  o.stdout_text = out_cap.text();
  o.stderr_text = err_cap.text();
  o.stdout_cut_bytes = out_cap.cut_bytes();
  o.stderr_cut_bytes = err_cap.cut_bytes();
  o.stdout_truncated = o.stdout_cut_bytes > 0;
  o.stderr_truncated = o.stderr_cut_bytes > 0;
  if (!sv.setup_error.empty() || !sv.ready) {
    Outcome e = sandbox_error(!sv.setup_error.empty() ? sv.setup_error : "sandbox set-up did not finish in time");
    if (sv.cancelled && !sv.ready) e.status = Status::cancelled;  // the program never started
    return with_workspace(std::move(e));
  }
  if (!sv.exited_report) {
    o.status = Status::sandbox_error;
    o.error = "sandbox init exited without a report";
    return with_workspace(std::move(o));
  }
  if (!sv.network_error.empty()) {
    o.status = Status::sandbox_error;
    o.error = "the job's proxy listener: " + sv.network_error;
    return with_workspace(std::move(o));
  }
  if (!harvest_error.empty()) {
    o.status = Status::sandbox_error;
    o.error = "collecting /outputs: " + harvest_error;
    return with_workspace(std::move(o));
  }
  o.duration_ms = static_cast<uint64_t>(sv.ended_ms - sv.started_ms);
  // cgroup accounting covers every process of the job. pid 1's rusage covers
  // every process it reaped, which is all of them; some v1 hosts leave
  // cpuacct at 0, so the larger of the two is reported. Both count from the
  // claim: pid 1 subtracts what the loader had used by then.
  cgroups::Stats stats = cgroup.read_stats();
  trace::mark("cgroup stats read");
  const uint64_t cgroup_cpu_us = stats.valid && stats.cpu_us > cpu_at_claim_us ? stats.cpu_us - cpu_at_claim_us : 0;
  const uint64_t reaped_cpu_us = sv.report.cpu_us > 0 ? static_cast<uint64_t>(sv.report.cpu_us) : 0;
  o.cpu_ms = std::max(cgroup_cpu_us, reaped_cpu_us) / 1000;
  o.peak_memory_bytes = stats.valid && stats.peak_memory_bytes ? stats.peak_memory_bytes
                                                               : static_cast<uint64_t>(sv.report.max_rss_kb) * 1024;
  o.timed_out = sv.timed_out;
  o.start = spec.warm == Warm::cold ? "cold" : "warm";
  // What the steps reported: the zygote's (namespaces, cgroup), pid 1's and
  // the program child's (every layer up to seccomp).
  o.layers = layer_names(built.layers | sv.layers, landlock_abi, cgroup.mode());
  int ws = sv.report.wait_status;
  if (WIFEXITED(ws)) {
    o.exited = true;
    o.exit_code = WEXITSTATUS(ws);
  } else if (WIFSIGNALED(ws)) {
    o.signal = WTERMSIG(ws);
  }
  if (sv.cancelled)
    o.status = Status::cancelled;
  else if (sv.timed_out)
    o.status = Status::timed_out;
  else if (stats.oom_killed)
    o.status = Status::memory_exceeded;
  else if (o.exited && o.exit_code == 0)
    o.status = Status::completed;
  else
    o.status = Status::failed;
  return with_workspace(std::move(o));
}

}  // namespace sandbox::launcher
