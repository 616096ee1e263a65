// Bounded capture of the program's stdout and stderr. Runs in the runner parent.
// Beyond the cap the stream is still drained (so the program never blocks on a
// full pipe); its head and its tail are kept, in O(cap) memory whatever the
// program writes, and what was cut between them is counted and marked.
#pragma once
#include <cstdint>
#include <string>

namespace sandbox::capture {

// Below this cap a marker would take too much of it: only the head is kept.
// (Policies allow 1024 bytes at least; the small caps are for the unit tests.)
constexpr uint64_t kHeadAndTailMinCapBytes = 256;
// A cut moves by at most this much to land at a line boundary.
constexpr size_t kLineSearchBytes = 256;

class Stream {
 public:
  // `name` ("stdout", "stderr") is said in the marker.
  explicit Stream(uint64_t max_bytes, std::string name = "output");
  void feed(const char* data, size_t size);
  // True when any byte the program wrote is not in text(): beyond the cap, or
  // lost because replacing invalid bytes made the text outgrow the cap.
  bool truncated() const { return cut_bytes() > 0; }
  // The bytes the program wrote that are not in text(); an invalid byte that
  // text() shows as U+FFFD counts as kept, as one byte.
  uint64_t cut_bytes() const { return compose().cut_bytes; }
  uint64_t total_bytes() const { return total_; }
  // At most max_bytes of valid UTF-8 (invalid bytes replaced). Output at or
  // under the cap is all of it. Beyond the cap: the head, a marker line
  //   [throwbox: N bytes cut here (stdout over its M-byte cap)]
  // and the tail; both cuts at character boundaries (never a U+FFFD for a
  // character the cap split), at a line boundary when one is near.
  std::string text() const { return compose().text; }
  // The last non-empty line captured so far (from the tail once over the
  // cap), at most 200 bytes, valid UTF-8.
  std::string last_line() const;

 private:
  struct Composed {
    std::string text;
    uint64_t cut_bytes = 0;
  };
  Composed compose() const;
  Composed compose_head_and_tail() const;
  void push_tail(const char* data, size_t size);
  char tail_at(size_t i) const;             // i-th oldest byte of the tail window
  std::string tail_window(size_t n) const;  // its newest n bytes

  uint64_t max_bytes_;
  std::string name_;
  bool keep_tail_;
  uint64_t total_ = 0;
  // The first max_bytes_ bytes; once over the cap (with keep_tail_) only as
  // many as the head can use.
  std::string head_;
  // Once over the cap: the newest bytes of the stream, a ring of
  // max_bytes_ / 2 + 1 bytes (the tail's share, and the byte before it to see
  // whether the tail starts a line). tail_next_ is where the next byte goes.
  std::string tail_;
  size_t tail_next_ = 0;
  size_t tail_filled_ = 0;
};

}  // namespace sandbox::capture
