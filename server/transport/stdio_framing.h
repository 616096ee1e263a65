// stdio's framing: a byte stream cut into newline-delimited messages with a
// byte cap, a line over the cap dropped as it streams (never buffered whole).
// Pure; the stdio reader's thread. tests/fuzz/stdio_framing_fuzz checks it.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace transport::stdio {

class LineFramer {
 public:
  using OnLine = std::function<void(std::string_view line)>;  // without its CR LF; never blank
  using OnOversized = std::function<void(size_t bytes)>;       // a line over the cap, dropped

  explicit LineFramer(size_t max_message_bytes) : max_(max_message_bytes) {}
  // The next bytes read, in any chunking: the same lines come out.
  void feed(std::string_view bytes, const OnLine& on_line, const OnOversized& on_oversized);
  // End of input: an unterminated last line counts too.
  void finish(const OnLine& on_line, const OnOversized& on_oversized);

 private:
  void dispatch(const OnLine& on_line, const OnOversized& on_oversized);
  size_t max_;
  std::string line_;
  bool discarding_ = false;
  size_t discarded_ = 0;
};

}  // namespace transport::stdio
