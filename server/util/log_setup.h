// The server's log: stderr only (stdout belongs to the protocol), one line a
// message. Every message passes util::escape_for_log at the sink, so no value
// a client or a token put in a message can start a line of its own.
// Timestamps are UTC, written with a 'Z'. When stderr is the systemd journal,
// each line starts with its sd-daemon(3) priority ("<6>"), which journald
// takes as the entry's priority and strips.
#pragma once
#include <memory>
#include <spdlog/common.h>
#include <spdlog/formatter.h>

namespace util::log_setup {

// The default spdlog logger: stderr, timestamp, level, the escaped message;
// the journal priority first when stderr_is_journal().
void install_stderr_logger();

// "2026-01-02T03:04:05.678Z info <the escaped message>", with "<N>" before it
// when journal_priority is set.
std::unique_ptr<spdlog::formatter> make_formatter(bool journal_priority);

// The sd-daemon(3) priority of a level: 7 trace and debug, 6 info, 4 warn,
// 3 error, 2 critical.
int journal_priority(spdlog::level::level_enum level);

// Whether fd is the stream journal_stream names: systemd sets $JOURNAL_STREAM
// to "<device>:<inode>" of the stream it connects a unit's stdout or stderr
// to. A child whose stderr was redirected elsewhere inherits the variable,
// hence the comparison. False for a null or malformed value.
bool is_journal_stream(int fd, const char* journal_stream);
// is_journal_stream(2, $JOURNAL_STREAM).
bool stderr_is_journal();

}  // namespace util::log_setup
