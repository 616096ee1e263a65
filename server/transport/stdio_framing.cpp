// Line framing for stdio (server/transport/stdio.cpp's reader).
#include "server/transport/stdio_framing.h"

namespace transport::stdio {

// One complete line: strip a CR, refuse it when over the cap, skip it when blank.
void LineFramer::dispatch(const OnLine& on_line, const OnOversized& on_oversized) {
  if (!line_.empty() && line_.back() == '\r') line_.pop_back();
  if (line_.size() > max_) {
    id_.feed(line_);
    on_oversized(line_.size(), id_.finish());
    id_.reset();
  } else if (line_.find_first_not_of(" \t\r") != std::string::npos) {
    on_line(line_);
  }
  line_.clear();
}

void LineFramer::end_discarding(size_t bytes, const OnOversized& on_oversized) {
  on_oversized(bytes, id_.finish());
  id_.reset();
  discarding_ = false;
  discarded_ = 0;
}

void LineFramer::feed(std::string_view bytes, const OnLine& on_line, const OnOversized& on_oversized) {
  // One byte of room beyond the cap for a CR that a read may end on.
  const size_t max_pending = max_ + 1;
  size_t start = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != '\n') continue;
    size_t len = i - start;
    if (discarding_) {
      // A trailing CR reaches the scanner here: JSON whitespace, harmless.
      id_.feed(bytes.substr(start, len));
      end_discarding(discarded_ + len, on_oversized);
    } else {
      line_.append(bytes.substr(start, len));
      dispatch(on_line, on_oversized);
    }
    start = i + 1;
  }
  std::string_view rest = bytes.substr(start);
  if (discarding_) {
    id_.feed(rest);
    discarded_ += rest.size();
  } else if (line_.size() + rest.size() > max_pending) {
    // Never buffer an oversized message: drop it up to its newline, reading
    // its id from what passes.
    discarding_ = true;
    discarded_ = line_.size() + rest.size();
    id_.feed(line_);
    id_.feed(rest);
    line_.clear();
  } else {
    line_.append(rest);
  }
}

void LineFramer::finish(const OnLine& on_line, const OnOversized& on_oversized) {
  if (discarding_)
    end_discarding(discarded_, on_oversized);
  else if (!line_.empty())
    dispatch(on_line, on_oversized);
  discarding_ = false;
  discarded_ = 0;
  line_.clear();
}

}  // namespace transport::stdio
