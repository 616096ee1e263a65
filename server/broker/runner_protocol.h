// The runner's stdout, read on the server side: JSON lines. A warm runner
// says {"warm":"ready"} (or an error line) once its sandbox is built; every
// runner then writes progress lines ({"progress": ...}) and one outcome line.
// LineReader is the one reader of it, for the warm and the cold path alike.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "server/sandbox/spec.h"
#include "server/util/fd.h"
#include "server/util/result.h"

namespace broker {

class RunnerProcess;

enum class LineEnd { kLine, kEof, kTimeout, kTooLong, kWoken };
struct NextLine {
  LineEnd end = LineEnd::kEof;
  std::string line;  // kLine: without its '\n'
};

// Lines from a socket (or pipe) the caller owns, with the bytes read past the
// last line kept. Descriptors that came with them (SCM_RIGHTS) are kept in
// order; the line {"network":"listener"} has one (take_fd).
class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}
  // The next line by deadline_ms (CLOCK_MONOTONIC); kTooLong once more than
  // max_bytes are buffered; kWoken as soon as wake_fd (if >= 0) is readable.
  NextLine next(int64_t deadline_ms, size_t max_bytes, int wake_fd = -1);
  // What is left after the last line: at EOF, an unterminated last line.
  std::string take_rest() { return std::exchange(pending_, {}); }
  // The oldest descriptor received and not yet taken; invalid when none.
  util::UniqueFd take_fd();

 private:
  long read_some(char* buf, size_t size);
  int fd_;
  bool socket_ = true;  // until recvmsg says ENOTSOCK
  std::string pending_;
  std::deque<util::UniqueFd> fds_;
};

// The line a runner writes with a job's proxy listener attached.
inline constexpr const char* kListenerLine = R"({"network":"listener"})";

// A warm runner's first line within timeout_ms: ok when ready, else why not.
util::Status read_warm_ready(RunnerProcess& runner, int timeout_ms);
// A template's ready line (launcher.h): its pid 1 and that one's start time,
// what a sandbox forked from it names.
struct TemplateReady {
  int32_t pid = 0;
  uint64_t start_time = 0;
};
util::Result<TemplateReady> read_template_ready(RunnerProcess& runner, int timeout_ms);

// Progress (to on_progress) and then the outcome of a runner that has its
// spec or claim. cancel_fd readable: the runner is told to kill the tree
// (SIGTERM). Past timeout_ms and a grace, or past the output bound, it is
// killed and reaped, and this is an error. stdout is closed on return.
// on_listener (may be empty: the descriptor is closed) gets a job's proxy listener.
util::Result<sandbox::Outcome> read_outcome(RunnerProcess& runner, const std::string& job_id, uint64_t timeout_ms,
                                            int cancel_fd,
                                            const std::function<void(const nlohmann::json&)>& on_progress,
                                            const std::function<void(util::UniqueFd)>& on_listener = {});

}  // namespace broker
