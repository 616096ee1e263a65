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
  bool truncated() const { return total_ > max_bytes_; }
  uint64_t total_bytes() const { return total_; }
  // Valid UTF-8 (invalid bytes replaced), cut at a character boundary.
  std::string text() const;

 private:
  uint64_t max_bytes_;
  uint64_t total_ = 0;
  std::string data_;
};

}  // namespace sandbox::capture
