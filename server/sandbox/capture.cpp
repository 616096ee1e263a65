// Bounded stream capture.
#include "server/sandbox/capture.h"

#include "server/util/text.h"

namespace sandbox::capture {

void Stream::feed(const char* data, size_t size) {
  total_ += size;
  if (data_.size() < max_bytes_) data_.append(data, std::min<size_t>(size, max_bytes_ - data_.size()));
}

namespace {
// Bytes of a multi-byte sequence that the cap cut short at the end of data.
size_t incomplete_tail(const std::string& data) {
  size_t n = data.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    unsigned char c = static_cast<unsigned char>(data[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}
}  // namespace

std::string Stream::text() const {
  std::string kept = data_;
  // A character the cap split is not the program's fault: drop it, don't repair it.
  if (total_ > max_bytes_) kept.resize(kept.size() - incomplete_tail(kept));
  std::string fixed = util::to_valid_utf8(kept);
  // Replacement characters can grow the text; the cap is on what we return.
  return std::string(util::utf8_prefix(fixed, max_bytes_));
}

bool Stream::truncated() const {
  if (total_ > max_bytes_) return true;
  return util::to_valid_utf8(data_).size() > max_bytes_;
}

}  // namespace sandbox::capture

namespace sandbox::capture {

std::string Stream::last_line() const {
  size_t end = data_.size();
  while (end > 0 && (data_[end - 1] == '\n' || data_[end - 1] == '\r')) --end;
  size_t start = data_.rfind('\n', end == 0 ? 0 : end - 1);
  start = start == std::string::npos ? 0 : start + 1;
  if (end < start) return "";
  std::string line = util::to_valid_utf8(std::string_view(data_).substr(start, end - start));
  return std::string(util::utf8_prefix(line, 200));
}

}  // namespace sandbox::capture
