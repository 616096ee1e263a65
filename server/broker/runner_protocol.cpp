// Reading a runner. Runs on the worker thread that owns the runner (and the
// pool's filler for warm builds). Never blocks past its deadline; a line is
// bounded before it is parsed.
#include "server/broker/runner_protocol.h"

#include <poll.h>
#include <sys/socket.h>
#include <signal.h>
#include <time.h>

#include <cerrno>
#include <cstring>
#include <spdlog/spdlog.h>

#include "server/broker/runner_process.h"
#include "server/util/clock.h"
#include "server/util/fd.h"
#include "server/util/fd_passing.h"

namespace broker {
namespace {

constexpr int64_t kRunnerGraceMs = 15000;  // set-up, kill and harvest beyond the job's own deadline
constexpr size_t kOutcomeMaxBytes = 64 * 1024 * 1024;
constexpr size_t kWarmLineMaxBytes = 1 << 20;
constexpr const char* kWarmReady = R"({"warm":"ready"})";

}  // namespace

long LineReader::read_some(char* buf, size_t size) {
  if (socket_) {
    ssize_t n;
    do n = util::receive_with_fds(fd_, buf, size, 0, [this](int fd) { fds_.emplace_back(fd); });
    while (n < 0 && errno == EINTR);
    if (n >= 0) return n;
    if (errno != ENOTSOCK) return -1;
    socket_ = false;
  }
  return util::read_some(fd_, buf, size);
}

util::UniqueFd LineReader::take_fd() {
  if (fds_.empty()) return util::UniqueFd();
  util::UniqueFd fd = std::move(fds_.front());
  fds_.pop_front();
  return fd;
}

NextLine LineReader::next(int64_t deadline_ms, size_t max_bytes, int wake_fd) {
  char buf[65536];
  for (;;) {
    if (size_t nl = pending_.find('\n'); nl != std::string::npos) {
      NextLine out{LineEnd::kLine, pending_.substr(0, nl)};
      pending_.erase(0, nl + 1);
      return out;
    }
    if (pending_.size() > max_bytes) return {LineEnd::kTooLong, {}};
    const int64_t left = deadline_ms - util::now_ms();
    if (left <= 0) return {LineEnd::kTimeout, {}};
    struct pollfd p[2] = {{fd_, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    int r = ::poll(p, 2, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return {LineEnd::kEof, {}};  // nothing more can be read
    if (r == 0) continue;
    if (p[1].revents) return {LineEnd::kWoken, {}};
    if (!p[0].revents) continue;
    long n = read_some(buf, sizeof buf);
    if (n <= 0) return {LineEnd::kEof, {}};
    pending_.append(buf, static_cast<size_t>(n));
    // Bounded as read, not only per line: many lines in one read count too.
    if (pending_.size() > max_bytes) return {LineEnd::kTooLong, {}};
  }
}

util::Status read_warm_ready(RunnerProcess& runner, int timeout_ms) {
  NextLine got = runner.stdout_lines().next(util::now_ms() + timeout_ms, kWarmLineMaxBytes);
  if (got.end != LineEnd::kLine)
    return util::make_error(util::ErrorCode::kSandbox,
                            "the runner did not report a warm sandbox within " + std::to_string(timeout_ms) + " ms");
  if (got.line == kWarmReady) return util::ok_status();
  auto doc = nlohmann::json::parse(got.line, nullptr, false);
  return util::make_error(util::ErrorCode::kSandbox, doc.is_object() ? doc.value("error", got.line) : got.line);
}

util::Result<TemplateReady> read_template_ready(RunnerProcess& runner, int timeout_ms) {
  NextLine got = runner.stdout_lines().next(util::now_ms() + timeout_ms, kWarmLineMaxBytes);
  if (got.end != LineEnd::kLine)
    return util::make_error(util::ErrorCode::kSandbox,
                            "the runner did not report a template within " + std::to_string(timeout_ms) + " ms");
  auto doc = nlohmann::json::parse(got.line, nullptr, false);
  if (!doc.is_object()) return util::make_error(util::ErrorCode::kSandbox, "template runner: " + got.line);
  if (doc.value("warm", "") != "ready")
    return util::make_error(util::ErrorCode::kSandbox, doc.value("error", got.line));
  const auto& pid = doc["template_pid"];
  const auto& started = doc["template_start_time"];
  if (!pid.is_number_integer() || pid.get<int64_t>() <= 1 || pid.get<int64_t>() > INT32_MAX ||
      !started.is_number_unsigned() || started.get<uint64_t>() == 0)
    return util::make_error(util::ErrorCode::kSandbox, "template runner: no pid 1 and start time in " + got.line);
  return TemplateReady{static_cast<int32_t>(pid.get<int64_t>()), started.get<uint64_t>()};
}

util::Result<sandbox::Outcome> read_outcome(RunnerProcess& runner, const std::string& job_id, uint64_t timeout_ms,
                                            int cancel_fd,
                                            const std::function<void(const nlohmann::json&)>& on_progress,
                                            const std::function<void(util::UniqueFd)>& on_listener) {
  LineReader& lines = runner.stdout_lines();
  const int64_t deadline = util::now_ms() + static_cast<int64_t>(timeout_ms) + kRunnerGraceMs;
  std::string outcome_line;
  bool killed = false, cancel_sent = false, reading = true;
  while (reading) {
    NextLine got = lines.next(deadline, kOutcomeMaxBytes, cancel_sent ? -1 : cancel_fd);
    switch (got.end) {
      case LineEnd::kLine:
        if (got.line == kListenerLine) {
          util::UniqueFd listener = lines.take_fd();
          if (on_listener && listener.valid()) on_listener(std::move(listener));
        } else if (got.line.rfind("{\"progress\"", 0) == 0) {
          if (on_progress) {
            auto doc = nlohmann::json::parse(got.line, nullptr, false);
            if (!doc.is_discarded()) on_progress(doc["progress"]);
          }
        } else {
          // The outcome is the runner's last line: the answer goes back now,
          // while the runner tears the sandbox down (the fleet reaps it).
          outcome_line = std::move(got.line);
          reading = false;
        }
        break;
      case LineEnd::kWoken:
        // The runner kills the tree through pid 1 and reports "cancelled".
        runner.signal(SIGTERM);
        cancel_sent = true;
        break;
      case LineEnd::kTimeout:
        spdlog::error("job {}: runner did not finish {} ms after its deadline; killing it", job_id, kRunnerGraceMs);
        [[fallthrough]];
      case LineEnd::kTooLong:
        runner.signal(SIGKILL);  // PDEATHSIG then takes the sandbox down
        killed = true;
        reading = false;
        break;
      case LineEnd::kEof:
        reading = false;
        break;
    }
  }
  if (outcome_line.empty()) outcome_line = lines.take_rest();
  runner.close_stdout();
  if (killed) {
    runner.wait_or_kill(0);
    return util::make_error(util::ErrorCode::kInternal, "runner exceeded its deadline or output bound");
  }
  auto doc = nlohmann::json::parse(outcome_line, nullptr, false);
  if (doc.is_discarded())
    return util::make_error(util::ErrorCode::kInternal, "runner exited without a readable outcome");
  return sandbox::outcome_from_json(doc);
}

}  // namespace broker
