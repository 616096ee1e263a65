// Bounded stream capture: the first bytes, a ring of the newest, and the text
// put together from them. Runs in the runner parent; holds at most the cap
// (1.5 times it for a moment, while the first overflow is split).
#include "server/sandbox/capture.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "server/util/text.h"

namespace sandbox::capture {
namespace {

constexpr size_t kReplacementBytes = 3;  // U+FFFD in UTF-8
constexpr size_t kLastLineMaxBytes = 200;

bool is_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// One unit of the repaired text: a valid sequence as it is, or one invalid byte
// that to_valid_utf8 makes a U+FFFD.
struct Unit {
  size_t raw;
  size_t text;
};
Unit unit_at(std::string_view raw, size_t i) {
  size_t n = util::utf8_sequence_length(raw, i);
  return n ? Unit{n, n} : Unit{1, kReplacementBytes};
}

// Raw bytes of the longest run of whole units from raw's start whose repaired
// text fits in budget.
size_t fit_prefix(std::string_view raw, size_t budget) {
  size_t i = 0, text = 0;
  while (i < raw.size()) {
    Unit u = unit_at(raw, i);
    if (text + u.text > budget) break;
    i += u.raw;
    text += u.text;
  }
  return i;
}

// Where the longest run of whole units from `from` to raw's end whose repaired
// text fits in budget starts. Units found walking from `from` stay units when
// the walk starts at a later unit, so dropping them from the front is exact.
size_t fit_suffix(std::string_view raw, size_t from, size_t budget) {
  size_t text = 0;
  for (size_t i = from; i < raw.size();) {
    Unit u = unit_at(raw, i);
    text += u.text;
    i += u.raw;
  }
  size_t start = from;
  while (text > budget) {
    Unit u = unit_at(raw, start);
    text -= u.text;
    start += u.raw;
  }
  return start;
}

// Bytes of a multi-byte sequence that the cap cut short at the end of data.
size_t incomplete_tail(std::string_view data) {
  size_t n = data.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    unsigned char c = static_cast<unsigned char>(data[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

std::string marker(uint64_t cut_bytes, const std::string& name, uint64_t max_bytes) {
  return "[throwbox: " + std::to_string(cut_bytes) + " bytes cut here (" + name + " over its " +
         std::to_string(max_bytes) + "-byte cap)]\n";
}

// The last non-empty line of the n bytes at(0..n-1), at most kLastLineMaxBytes
// of valid UTF-8. Copies at most 3 bytes more than it returns: a character the
// copy splits starts beyond kLastLineMaxBytes and is cut by the prefix.
template <class At>
std::string last_line_of(size_t n, At at, bool starts_mid_stream) {
  size_t end = n;
  while (end > 0 && (at(end - 1) == '\n' || at(end - 1) == '\r')) --end;
  size_t start = end;
  while (start > 0 && at(start - 1) != '\n') --start;
  // A line older than the ring may begin inside a character: not a U+FFFD of ours.
  if (start == 0 && starts_mid_stream)
    while (start < end && start < 3 && is_continuation(at(start))) ++start;
  std::string line;
  for (size_t i = start; i < end && line.size() < kLastLineMaxBytes + 3; ++i) line += at(i);
  return std::string(util::utf8_prefix(util::to_valid_utf8(line), kLastLineMaxBytes));
}

}  // namespace

Stream::Stream(uint64_t max_bytes, std::string name)
    : max_bytes_(max_bytes), name_(std::move(name)), keep_tail_(max_bytes >= kHeadAndTailMinCapBytes) {}

void Stream::feed(const char* data, size_t size) {
  const bool was_over = total_ > max_bytes_;
  total_ += size;
  if (was_over) {
    if (keep_tail_) push_tail(data, size);
    return;
  }
  const size_t room = max_bytes_ - head_.size();
  head_.append(data, std::min(size, room));
  if (total_ <= max_bytes_ || !keep_tail_) return;
  // The first overflow: the ring takes the newest bytes, and the head keeps its
  // share (at most half the cap) and the rest of a character at its last byte.
  tail_.assign(max_bytes_ / 2 + 1, '\0');
  push_tail(head_.data(), head_.size());
  push_tail(data + room, size - room);
  head_.resize(max_bytes_ / 2 + 4);
  head_.shrink_to_fit();
}

void Stream::push_tail(const char* data, size_t size) {
  const size_t ring = tail_.size();
  if (size >= ring) {
    std::memcpy(tail_.data(), data + size - ring, ring);
    tail_next_ = 0;
    tail_filled_ = ring;
    return;
  }
  const size_t first = std::min(size, ring - tail_next_);
  std::memcpy(tail_.data() + tail_next_, data, first);
  std::memcpy(tail_.data(), data + first, size - first);
  tail_next_ = (tail_next_ + size) % ring;
  tail_filled_ = std::min(ring, tail_filled_ + size);
}

char Stream::tail_at(size_t i) const {
  const size_t ring = tail_.size();
  return tail_[(tail_next_ + ring - tail_filled_ + i) % ring];
}

std::string Stream::tail_window(size_t n) const {
  const size_t ring = tail_.size();
  const size_t start = (tail_next_ + ring - n) % ring;
  if (start + n <= ring) return tail_.substr(start, n);
  return tail_.substr(start) + tail_.substr(0, n - (ring - start));
}

Stream::Composed Stream::compose() const {
  if (total_ > max_bytes_ && keep_tail_) return compose_head_and_tail();
  // At or under the cap (or a cap too small for a marker): the head alone.
  std::string_view kept = head_;
  // A character the cap split is not the program's fault: drop it, don't repair it.
  if (total_ > max_bytes_) kept.remove_suffix(incomplete_tail(kept));
  // Replacement characters can grow the text; the cap is on what we return.
  const size_t raw = fit_prefix(kept, max_bytes_);
  return {util::to_valid_utf8(kept.substr(0, raw)), total_ - raw};
}

Stream::Composed Stream::compose_head_and_tail() const {
  // Room for a newline and the marker with the largest count it could show
  // (every byte written), so the cut count cannot push the text past the cap.
  const size_t marker_max_bytes = 1 + marker(total_, name_, max_bytes_).size();
  const size_t budget = max_bytes_ - marker_max_bytes;
  // Half each. The head says what the program set out to do (a header, the
  // first error, the start of a listing), the tail how it ended (a traceback,
  // the final result); in general neither matters more, and the program's
  // last words usually go to the other stream, which is seldom over its cap.
  const size_t tail_budget = budget / 2;
  const size_t head_budget = budget - tail_budget;

  // The head: whole characters that fit, ending after a newline when one is near.
  const std::string_view head_raw(head_);
  size_t head_end = fit_prefix(head_raw, head_budget);
  const size_t search_from = head_end > kLineSearchBytes ? head_end - kLineSearchBytes : 0;
  if (size_t nl = head_raw.substr(search_from, head_end - search_from).rfind('\n'); nl != std::string_view::npos)
    head_end = search_from + nl + 1;

  // The tail: the newest bytes that fit, one more to see whether they start a line.
  const std::string window = tail_window(std::min(tail_filled_, tail_budget + 1));
  const std::string_view w(window);
  size_t start = 0;
  // The window may begin inside a character whose lead byte was cut: its
  // other bytes go with the cut, they are not repaired into a U+FFFD.
  while (start < 3 && start < w.size() && is_continuation(w[start])) ++start;
  start = fit_suffix(w, start, tail_budget);
  if (start == 0 || w[start - 1] != '\n') {
    // Newlines are ASCII, never inside a unit: after one is a unit boundary.
    size_t nl = w.substr(start, kLineSearchBytes).find('\n');
    if (nl != std::string_view::npos && start + nl + 1 < w.size()) start += nl + 1;
  }
  const std::string_view tail = w.substr(start);

  const uint64_t cut_bytes = total_ - head_end - tail.size();
  std::string text = util::to_valid_utf8(head_raw.substr(0, head_end));
  if (!text.empty() && text.back() != '\n') text += '\n';
  text += marker(cut_bytes, name_, max_bytes_);
  text += util::to_valid_utf8(tail);
  return {std::move(text), cut_bytes};
}

std::string Stream::last_line() const {
  if (tail_filled_ == 0)
    return last_line_of(
        head_.size(), [this](size_t i) { return head_[i]; }, false);
  return last_line_of(
      tail_filled_, [this](size_t i) { return tail_at(i); }, true);
}

}  // namespace sandbox::capture
