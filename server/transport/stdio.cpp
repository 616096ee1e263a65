// stdio framing. Reader: the calling thread. Writer: any thread, serialised.
#include "server/transport/stdio.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <spdlog/spdlog.h>
#include <string>

#include "server/util/fd.h"

namespace transport::stdio {

int guard_stdout() {
  int saved = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
  if (saved < 0 || ::dup2(2, 1) < 0) {
    spdlog::critical("cannot guard stdout: errno {}", errno);
    std::exit(2);
  }
  return saved;
}

void Writer::send(const nlohmann::json& message) {
  // replace: a stray invalid byte must not throw on the way out.
  std::string line = message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  std::lock_guard lock(mu_);
  if (!util::write_all(fd_, line.data(), line.size()))
    spdlog::warn("stdout write failed (errno {}); client gone?", errno);
}

namespace {
// One complete line: strip a CR, refuse it when over the cap, skip it when blank.
void dispatch_line(protocol::mcp::Session& session, std::string& line, size_t max_message_bytes) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.size() > max_message_bytes) session.handle_oversized(line.size());
  else if (line.find_first_not_of(" \t\r") != std::string::npos) session.handle_line(line);
  line.clear();
}
}  // namespace

void serve(protocol::mcp::Session& session, size_t max_message_bytes, int in_fd, int stop_fd) {
  // One byte of room beyond the cap for a CR that a read may end on.
  const size_t max_pending = max_message_bytes + 1;
  std::string line;
  bool discarding = false;
  size_t discarded = 0;
  char buf[65536];
  for (;;) {
    if (stop_fd >= 0) {
      struct pollfd fds[2] = {{in_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        spdlog::error("poll(stdin): errno {}", errno);
        break;
      }
      if (fds[1].revents) {
        spdlog::info("stop requested (signal): no further requests are read, running jobs are cancelled");
        session.cancel_all();
        break;
      }
      if (!fds[0].revents) continue;
    }
    long n = util::read_some(in_fd, buf, sizeof buf);
    if (n < 0) {
      spdlog::error("read(stdin): errno {}", errno);
      break;
    }
    if (n == 0) break;
    size_t start = 0;
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      if (buf[i] != '\n') continue;
      size_t len = i - start;
      if (discarding) {
        session.handle_oversized(discarded + len);
        discarding = false;
        discarded = 0;
      } else {
        line.append(buf + start, len);
        dispatch_line(session, line, max_message_bytes);
      }
      start = i + 1;
    }
    size_t rest = static_cast<size_t>(n) - start;
    if (discarding) {
      discarded += rest;
    } else if (line.size() + rest > max_pending) {
      // Never buffer an oversized message: drop it up to its newline.
      discarding = true;
      discarded = line.size() + rest;
      line.clear();
    } else {
      line.append(buf + start, rest);
    }
  }
  if (discarding) session.handle_oversized(discarded);
  else if (!line.empty()) dispatch_line(session, line, max_message_bytes);
  session.drain();
}

}  // namespace transport::stdio
