// Text helpers shared by server and runner: UTF-8 repair, errno names, call errors.
// Pure functions; safe in any thread. Not for use between clone and execve.
#pragma once
#include <string>
#include <string_view>

namespace util {

// Replaces every invalid UTF-8 sequence with U+FFFD so the text can go into JSON.
std::string to_valid_utf8(std::string_view bytes);
// True when bytes are well-formed UTF-8 (no overlongs, surrogates or > U+10FFFF).
bool is_valid_utf8(std::string_view bytes);
// Length of the well-formed UTF-8 sequence that starts at bytes[i], or 0 when
// the byte there is invalid (to_valid_utf8 turns it alone into U+FFFD).
size_t utf8_sequence_length(std::string_view bytes, size_t i);
// Longest prefix of at most max_bytes that does not split a UTF-8 sequence.
std::string_view utf8_prefix(std::string_view text, size_t max_bytes);
// "EPERM", "ENOENT", ...; the number when the name is unknown.
std::string errno_name(int err);
// The one error form for a failed call: call("arg"): ENAME (message)
std::string call_error(std::string_view call, std::string_view arg, int err);
// "SIGKILL" etc.
std::string signal_name(int sig);
// The one rule for a file name a client gives (an input's name): null when
// `name` is a plain file name, else what is wrong ("must not be empty", ...).
// A plain name: 1-255 bytes of valid UTF-8, not "." or "..", no "/", no C0 or
// C1 control character and no bidirectional control that would make it
// display as another name.
const char* file_name_problem(std::string_view name);
// The name of a file the server puts under a sandbox's /inputs: a plain file
// name, or up to eight of them joined by "/" (an acceptance check's view of a
// job: "inputs/data.csv", "artifacts/report/total.csv"). Null when it is one.
const char* input_path_problem(std::string_view name);
// Text safe for one log line: C0 and C1 controls, DEL, line and paragraph
// separators and bidirectional controls as \n, \xNN or \u{XXXX}, invalid
// UTF-8 bytes as \xNN; everything else as it is. Nothing from a client can
// start a line of its own or hide what surrounds it.
std::string escape_for_log(std::string_view text);

}  // namespace util
