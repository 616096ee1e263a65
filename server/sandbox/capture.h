// Bounded capture of the program's stdout and stderr. Runs in the runner parent.
// Beyond the cap the stream is still drained (so the program never blocks on a
// full pipe) but discarded, and the truncation is reported.
#pragma once
#include <cstdint>
#include <string>

namespace sandbox::capture {

class Stream {
 public:
  explicit Stream(uint64_t max_bytes) : max_bytes_(max_bytes) {}
  void feed(const char* data, size_t size);
  // True when any byte the program wrote is not in text(): beyond the cap, or
  // lost because replacing invalid bytes made the text outgrow the cap.
  bool truncated() const;
  uint64_t total_bytes() const { return total_; }
  // Valid UTF-8 (invalid bytes replaced), cut at a character boundary, never
  // ending in a replacement character for a sequence the cap split.
  std::string text() const;
  // The last non-empty line captured so far, at most 200 bytes, valid UTF-8.
  std::string last_line() const;

 private:
  uint64_t max_bytes_;
  uint64_t total_ = 0;
  std::string data_;
};

}  // namespace sandbox::capture
