// stdio framing. Reader: the calling thread. Writer: any thread, serialised.
#include "server/transport/stdio.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <spdlog/spdlog.h>
#include <string>

#include "server/transport/stdio_framing.h"
#include "server/util/call_trace.h"
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
  if (util::call_trace_on() && message.is_object() && message.contains("id"))
    util::call_mark_id("reply written", message["id"]);
}

void serve(protocol::mcp::Session& session, size_t max_message_bytes, int in_fd, int stop_fd) {
  LineFramer framer(max_message_bytes);
  const LineFramer::OnLine on_line = [&](std::string_view line) { session.handle_line(line); };
  const LineFramer::OnOversized on_oversized = [&](size_t bytes, const nlohmann::json& id) {
    session.handle_oversized(bytes, id);
  };
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
    util::call_mark("stdin read", "");
    framer.feed(std::string_view(buf, static_cast<size_t>(n)), on_line, on_oversized);
  }
  framer.finish(on_line, on_oversized);
  session.drain();
}

}  // namespace transport::stdio
