// Bounded stream capture.
#include "server/sandbox/capture.h"

#include "server/util/text.h"

namespace sandbox::capture {

void Stream::feed(const char* data, size_t size) {
  total_ += size;
  if (data_.size() < max_bytes_) data_.append(data, std::min<size_t>(size, max_bytes_ - data_.size()));
}

std::string Stream::text() const {
  std::string fixed = util::to_valid_utf8(data_);
  // Replacement characters can grow the text; the cap is on what we return.
  return std::string(util::utf8_prefix(fixed, max_bytes_));
}

}  // namespace sandbox::capture
