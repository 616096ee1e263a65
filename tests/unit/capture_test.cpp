// Bounded stdout/stderr capture: cap, truncation flag, byte count, UTF-8 repair.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <string>

#include "server/sandbox/capture.h"
#include "server/util/text.h"

using sandbox::capture::Stream;

namespace {
const std::string kFFFD = "\xEF\xBF\xBD";

void feed(Stream& s, const std::string& data) { s.feed(data.data(), data.size()); }
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
