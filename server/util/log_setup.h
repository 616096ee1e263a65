// The server's log: stderr only (stdout belongs to the protocol), one line a
// message. Every message passes util::escape_for_log at the sink, so no value
// a client or a token put in a message can start a line of its own.
#pragma once

namespace util::log_setup {

// The default spdlog logger: stderr, timestamp, level, the escaped message.
void install_stderr_logger();

}  // namespace util::log_setup
