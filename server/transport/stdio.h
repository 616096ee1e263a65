// MCP over stdio: newline-delimited JSON-RPC on fd 0 / the saved fd 1.
// Guards stdout first so that nothing but protocol messages can reach it.
#pragma once
#include <mutex>

#include "server/protocol/mcp.h"

namespace transport::stdio {

// Moves the real stdout to a private close-on-exec descriptor and points fd 1
// at stderr, so a stray print (ours or a library's) cannot corrupt the wire.
// Returns the private descriptor.
int guard_stdout();

class Writer : public protocol::mcp::Outbox {
 public:
  explicit Writer(int fd) : fd_(fd) {}
  void send(const nlohmann::json& message) override;

 private:
  std::mutex mu_;
  int fd_;
};

// Reads lines until EOF, feeding the session. Lines longer than the cap are
// discarded (never buffered whole) and answered with an error. Returns when
// stdin closes, or stop_fd (a signalfd) becomes readable, and every in-flight
// call has answered.
void serve(protocol::mcp::Session& session, size_t max_message_bytes, int in_fd = 0, int stop_fd = -1);

}  // namespace transport::stdio
