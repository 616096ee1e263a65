// stdio's framing: a byte stream cut into newline-delimited messages with a
// byte cap, a line over the cap dropped as it streams (never buffered whole),
// its top-level id read on the way. Pure; the stdio reader's thread.
// tests/fuzz/stdio_framing_fuzz checks it.
#pragma once
#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "server/protocol/id_scan.h"

namespace transport::stdio {

class LineFramer {
 public:
  using OnLine = std::function<void(std::string_view line)>;  // without its CR LF; never blank
  // A line over the cap, dropped; id is its top-level "id" (string or
  // integer) where protocol::id_scan could read it, else null.
  using OnOversized = std::function<void(size_t bytes, const nlohmann::json& id)>;

  explicit LineFramer(size_t max_message_bytes) : max_(max_message_bytes) {}
  // The next bytes read, in any chunking: the same lines (and ids) come out.
  void feed(std::string_view bytes, const OnLine& on_line, const OnOversized& on_oversized);
  // End of input: an unterminated last line counts too.
  void finish(const OnLine& on_line, const OnOversized& on_oversized);

 private:
  void dispatch(const OnLine& on_line, const OnOversized& on_oversized);
  void end_discarding(size_t bytes, const OnOversized& on_oversized);
  size_t max_;
  std::string line_;
  bool discarding_ = false;
  size_t discarded_ = 0;
  protocol::id_scan::IdScanner id_;  // fed the dropped line's bytes, head first
};

}  // namespace transport::stdio
