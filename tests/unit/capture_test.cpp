// Bounded stdout/stderr capture: cap, truncation flag, byte count, UTF-8 repair,
// and over the cap the head and the tail with a marker of the cut between them.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>

#include "server/sandbox/capture.h"
#include "server/util/text.h"

using sandbox::capture::Stream;

namespace {
const std::string kFFFD = "\xEF\xBF\xBD";

void feed(Stream& s, const std::string& data) { s.feed(data.data(), data.size()); }

std::string marker(uint64_t cut, const char* name, uint64_t cap) {
  return "[throwbox: " + std::to_string(cut) + " bytes cut here (" + std::string(name) + " over its " +
         std::to_string(cap) + "-byte cap)]\n";
}

// Lines "line 1\n" .. "line n\n".
std::string numbered_lines(int n) {
  std::string out;
  for (int i = 1; i <= n; ++i) out += "line " + std::to_string(i) + "\n";
  return out;
}

// The text split at its marker line: {head, marker line, tail}; the marker
// empty when there is none.
struct Parts {
  std::string head, marker, tail;
};
Parts split_at_marker(const std::string& text) {
  size_t at = text.find("[throwbox: ");
  if (at == std::string::npos) return {text, "", ""};
  size_t end = text.find('\n', at);
  REQUIRE(end != std::string::npos);
  return {text.substr(0, at), text.substr(at, end + 1 - at), text.substr(end + 1)};
}

// The count the marker states.
uint64_t marker_count(const std::string& marker_line) {
  return std::stoull(marker_line.substr(std::string("[throwbox: ").size()));
}
}  // namespace

TEST_CASE("output under the cap is kept exactly and not truncated") {
  Stream s(1024);
  feed(s, "hello ");
  feed(s, "world\n");
  CHECK_FALSE(s.truncated());
  CHECK(s.total_bytes() == 12);
  CHECK(s.text() == "hello world\n");
}

TEST_CASE("empty stream") {
  Stream s(16);
  CHECK_FALSE(s.truncated());
  CHECK(s.total_bytes() == 0);
  CHECK(s.text() == "");
  s.feed("", 0);
  CHECK(s.text() == "");
}

TEST_CASE("output exactly at the cap is not truncated") {
  Stream s(10);
  feed(s, "0123456789");
  CHECK_FALSE(s.truncated());
  CHECK(s.text() == "0123456789");
}

TEST_CASE("output over the cap is truncated but still counted (output flood)") {
  Stream s(10);
  feed(s, "0123456");
  feed(s, "789abcdef");
  for (int i = 0; i < 1000; ++i) feed(s, std::string(1000, 'x'));
  CHECK(s.truncated());
  CHECK(s.total_bytes() == 16 + 1000 * 1000);
  std::string t = s.text();
  CHECK(t.size() <= 10);
  CHECK(t == "0123456789");
}

TEST_CASE("one byte over the cap is truncated") {
  Stream s(10);
  feed(s, "0123456789A");
  CHECK(s.truncated());
  CHECK(s.total_bytes() == 11);
  CHECK(s.text() == "0123456789");
}

TEST_CASE("invalid UTF-8 bytes are replaced with U+FFFD") {
  Stream s(1024);
  feed(s, "ok \xff\xfe end \xC0\x80");
  CHECK_FALSE(s.truncated());
  std::string t = s.text();
  CHECK(util::is_valid_utf8(t));
  CHECK(t == "ok " + kFFFD + kFFFD + " end " + kFFFD + kFFFD);
}

TEST_CASE("valid multibyte output passes through, even split across feeds") {
  Stream s(1024);
  std::string emoji = "\xF0\x9F\x98\x80";
  feed(s, "a" + emoji.substr(0, 2));
  feed(s, emoji.substr(2) + "b");
  CHECK(s.text() == "a" + emoji + "b");
}

TEST_CASE("a cap landing inside a multibyte character still yields valid UTF-8") {
  const std::string euro = "\xE2\x82\xAC";       // 3 bytes
  const std::string emoji = "\xF0\x9F\x98\x80";  // 4 bytes
  for (uint64_t cap = 1; cap <= 24; ++cap) {
    CAPTURE(cap);
    Stream s(cap);
    std::string data;
    for (int i = 0; i < 4; ++i) data += "a" + euro + emoji;
    feed(s, data);
    CHECK(s.truncated() == (data.size() > cap));
    std::string t = s.text();
    CHECK(t.size() <= cap);
    CHECK(util::is_valid_utf8(t));
  }
}

// Regression: when the cap kept 3 bytes of a 4-byte character, they were
// repaired into U+FFFD characters the program never wrote (caps 7, 15, 23).
TEST_CASE("a cap inside a character must not invent a U+FFFD") {
  const std::string euro = "\xE2\x82\xAC";
  const std::string emoji = "\xF0\x9F\x98\x80";
  std::string data;
  for (int i = 0; i < 4; ++i) data += "a" + euro + emoji;
  for (uint64_t cap = 1; cap <= 24; ++cap) {
    CAPTURE(cap);
    Stream s(cap);
    feed(s, data);
    std::string t = s.text();
    // What is kept is a prefix of the real output.
    CHECK(data.compare(0, t.size(), t) == 0);
  }
}

TEST_CASE("cap in the middle of a character: exact kept text") {
  Stream s(5);
  feed(s, "abcd\xC3\xA9xyz");  // cap falls between C3 and A9
  CHECK(s.truncated());
  CHECK(s.total_bytes() == 9);
  CHECK(s.text() == "abcd");
}

TEST_CASE("replacement characters never push the text past the cap") {
  Stream s(8);
  feed(s, std::string(8, '\xff'));  // 8 bytes in, 8 x 3 bytes once repaired
  std::string t = s.text();
  CHECK(t.size() <= 8);
  CHECK(util::is_valid_utf8(t));
  CHECK(t == kFFFD + kFFFD);
}

// Regression: 8 invalid bytes under a cap of 8 repair to 24 bytes and are cut
// to 2 x U+FFFD; truncated() must say output was lost.
TEST_CASE("text cut by the cap after repair must report truncation") {
  Stream s(8);
  feed(s, std::string(8, '\xff'));
  CHECK(s.text() == kFFFD + kFFFD);
  CHECK(s.truncated());
}

// --- Over the cap: the head and the tail ---------------------------------

TEST_CASE("over the cap: the head, a marker line with the exact cut, and the tail") {
  const uint64_t cap = 1024;
  Stream s(cap, "stdout");
  const std::string data = numbered_lines(10000);  // 88894 bytes
  feed(s, data);
  CHECK(s.truncated());
  const std::string t = s.text();
  CHECK(t.size() <= cap);
  CHECK(util::is_valid_utf8(t));
  Parts p = split_at_marker(t);
  REQUIRE_FALSE(p.marker.empty());
  // Both cuts at line boundaries: whole lines at the start, whole lines at the end.
  CHECK(p.head.rfind("line 1\nline 2\n", 0) == 0);
  CHECK(p.head.back() == '\n');
  CHECK(p.tail.rfind("line ", 0) == 0);
  CHECK(p.tail.size() >= 7);
  CHECK(p.tail.substr(p.tail.size() - 11) == "line 10000\n");
  CHECK(data.compare(0, p.head.size(), p.head) == 0);
  CHECK(data.compare(data.size() - p.tail.size(), p.tail.size(), p.tail) == 0);
  const uint64_t cut = data.size() - p.head.size() - p.tail.size();
  CHECK(s.cut_bytes() == cut);
  CHECK(p.marker == marker(cut, "stdout", cap));
  // Roughly half each (the line cuts move each by less than a line).
  CHECK(p.head.size() > 400);
  CHECK(p.tail.size() > 400);
  CHECK(s.last_line() == "line 10000");
}

TEST_CASE("a Python traceback after a flood survives at the end") {
  Stream s(4096, "stderr");
  for (int i = 0; i < 20000; ++i) feed(s, "warning: noise " + std::to_string(i) + "\n");
  const std::string tb =
      "Traceback (most recent call last):\n  File \"/work/main.py\", line 3, in <module>\n"
      "    1 / 0\nZeroDivisionError: division by zero\n";
  feed(s, tb);
  const std::string t = s.text();
  CHECK(t.size() <= 4096);
  CHECK(t.substr(t.size() - tb.size()) == tb);
  CHECK(t.rfind("warning: noise 0\n", 0) == 0);
  CHECK(s.last_line() == "ZeroDivisionError: division by zero");
}

TEST_CASE("any chunking of feed() gives the same text, cut count and last line") {
  std::string data;
  std::mt19937 rng(20260801);
  // Lines of random length, some multi-byte characters and some invalid bytes.
  const std::string pieces[] = {"a",    "bc",   "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xC3\xA9", "\xff", "\n",
                                "xyz ", "\xC3", "\x80"};
  while (data.size() < 40000) data += pieces[rng() % 10];
  for (uint64_t cap : {256u, 300u, 1000u, 4096u, 39999u, 40000u, 65536u}) {
    CAPTURE(cap);
    Stream whole(cap, "stdout");
    feed(whole, data);
    Stream bytes(cap, "stdout");
    for (char c : data) bytes.feed(&c, 1);
    Stream chunks(cap, "stdout");
    for (size_t i = 0; i < data.size();) {
      size_t n = std::min<size_t>(data.size() - i, rng() % 5000);
      chunks.feed(data.data() + i, n);
      i += n;
    }
    CHECK(bytes.text() == whole.text());
    CHECK(chunks.text() == whole.text());
    CHECK(bytes.cut_bytes() == whole.cut_bytes());
    CHECK(chunks.cut_bytes() == whole.cut_bytes());
    CHECK(bytes.last_line() == whole.last_line());
    CHECK(chunks.last_line() == whole.last_line());
    CHECK(whole.total_bytes() == data.size());
  }
}

TEST_CASE("the text stays within the cap and valid UTF-8 for every cap, and the count adds up") {
  std::string data;
  std::mt19937 rng(7);
  const std::string pieces[] = {"word ", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\n", "\xff\xfe", "\xED\xA0\x80"};
  while (data.size() < 5000) data += pieces[rng() % 6];
  for (uint64_t cap = 1; cap <= 5200; cap += (cap < 300 ? 1 : 7)) {
    CAPTURE(cap);
    Stream s(cap, "stderr");
    feed(s, data);
    const std::string t = s.text();
    CHECK(t.size() <= cap);
    CHECK(util::is_valid_utf8(t));
    CHECK(s.truncated() == (s.cut_bytes() > 0));
    if (data.size() > cap) CHECK(s.truncated());
    Parts p = split_at_marker(t);
    if (cap >= sandbox::capture::kHeadAndTailMinCapBytes && data.size() > cap) {
      REQUIRE_FALSE(p.marker.empty());
      CHECK(marker_count(p.marker) == s.cut_bytes());
      CHECK(p.marker == marker(s.cut_bytes(), "stderr", cap));
    }
  }
}

TEST_CASE("cut count: every byte the program wrote is either cut or shown (invalid ones as U+FFFD)") {
  // Without a newline near either cut the cuts fall where the budget ends.
  const uint64_t cap = 512;
  std::string data(3000, 'a');
  data[10] = '\xff';    // in the head: shown as U+FFFD, counts as one byte kept
  data[2990] = '\xfe';  // in the tail
  Stream s(cap, "stdout");
  feed(s, data);
  Parts p = split_at_marker(s.text());
  REQUIRE_FALSE(p.marker.empty());
  CHECK(p.head.find(kFFFD) == 10);
  CHECK(p.tail.find(kFFFD) != std::string::npos);
  // Shown bytes: each U+FFFD (3 bytes of text) stands for one byte written.
  const uint64_t shown = (p.head.size() - 1 /* the newline before the marker */ - 2) + (p.tail.size() - 2);
  CHECK(s.cut_bytes() == data.size() - shown);
  CHECK(marker_count(p.marker) == s.cut_bytes());
  CHECK(s.text().size() <= cap);
}

TEST_CASE("UTF-8 characters split at either cut are dropped whole, never repaired") {
  const std::string euro = "\xE2\x82\xAC";
  const std::string emoji = "\xF0\x9F\x98\x80";
  // No newline: every cut position lands at some offset inside the characters.
  for (const std::string& ch : {euro, emoji, std::string("\xC3\xA9")}) {
    std::string unit = "a" + ch;
    std::string data;
    while (data.size() < 20000) data += unit;
    for (uint64_t cap = 256; cap <= 300; ++cap) {
      CAPTURE(cap);
      CAPTURE(ch.size());
      Stream s(cap, "stdout");
      feed(s, data);
      const std::string t = s.text();
      CHECK(t.size() <= cap);
      CHECK(util::is_valid_utf8(t));
      CHECK(t.find(kFFFD) == std::string::npos);
      Parts p = split_at_marker(t);
      REQUIRE_FALSE(p.marker.empty());
      REQUIRE(p.head.back() == '\n');
      const std::string head = p.head.substr(0, p.head.size() - 1);
      CHECK(data.compare(0, head.size(), head) == 0);
      CHECK(data.compare(data.size() - p.tail.size(), p.tail.size(), p.tail) == 0);
      CHECK(s.cut_bytes() == data.size() - head.size() - p.tail.size());
    }
  }
}

TEST_CASE("a cut moves to a line boundary within 256 bytes, and only then") {
  const uint64_t cap = 4096;
  // Lines of 200 bytes: a newline is always near a cut.
  std::string near;
  while (near.size() < 100000) near += std::string(199, 'n') + "\n";
  Stream s(cap, "stdout");
  feed(s, near);
  Parts p = split_at_marker(s.text());
  CHECK(p.head.size() % 200 == 0);
  CHECK(p.tail.size() % 200 == 0);
  CHECK(p.head.size() + p.tail.size() + p.marker.size() > cap - 2 * 256 - 100);

  // Lines of 3000 bytes: none within 256 bytes of either cut (the head's at
  // about 2000, the tail inside the last line), which stay where the budget ends.
  std::string far;
  while (far.size() < 100000) far += std::string(2999, 'f') + "\n";
  Stream f(cap, "stdout");
  feed(f, far);
  const std::string t = f.text();
  Parts q = split_at_marker(t);
  CHECK(q.head.size() > 1990);
  CHECK(q.head.back() == '\n');  // the marker went on a line of its own
  CHECK(q.head[q.head.size() - 2] == 'f');
  CHECK(q.tail.front() == 'f');
  CHECK(t.size() == cap - 1);  // unused: the room kept for a count one digit longer
}

TEST_CASE("at or under the cap the text is unchanged, whatever the cap") {
  const std::string data = numbered_lines(300);
  for (uint64_t cap : {data.size(), data.size() + 1, data.size() * 2}) {
    CAPTURE(cap);
    Stream s(cap, "stdout");
    feed(s, data);
    CHECK_FALSE(s.truncated());
    CHECK(s.cut_bytes() == 0);
    CHECK(s.text() == data);
    CHECK(s.last_line() == "line 300");
  }
  Stream bad(1024, "stdout");
  feed(bad, "ok \xff end");
  CHECK(bad.text() == "ok " + kFFFD + " end");
  CHECK(bad.cut_bytes() == 0);
}

TEST_CASE("last_line comes from the tail once over the cap") {
  Stream s(1024, "stdout");
  feed(s, numbered_lines(5));
  CHECK(s.last_line() == "line 5");
  feed(s, std::string(100000, 'x') + "\n");
  feed(s, "progress 99%\r\n\n");
  CHECK(s.last_line() == "progress 99%");
  // A line longer than the ring: the part the ring holds, from a character boundary.
  std::string long_line;
  while (long_line.size() < 5000) long_line += "\xE2\x82\xAC";
  feed(s, "\n" + long_line);
  std::string last = s.last_line();
  CHECK(last.size() <= 200);
  CHECK(util::is_valid_utf8(last));
  CHECK(last.find(kFFFD) == std::string::npos);
  CHECK(last.size() >= 195);
}

TEST_CASE("a 50 MB stream: the text is within the cap, its head and tail the stream's") {
  Stream s(300, "stdout");
  feed(s, "first\n");
  const std::string block(1 << 20, 'z');
  for (int i = 0; i < 50; ++i) feed(s, block);
  feed(s, "\nlast\n");
  const std::string t = s.text();
  CHECK(t.size() <= 300);
  // Both cuts moved to the newline within 256 bytes of them.
  CHECK(t == "first\n" + marker(50u * (1u << 20) + 1, "stdout", 300) + "last\n");
  CHECK(s.cut_bytes() == 50u * (1u << 20) + 1);
  CHECK(s.total_bytes() == 6 + 50u * (1u << 20) + 6);
}
