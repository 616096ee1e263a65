// UTF-8 validation and repair, errno/signal names, call errors, strict base64.
#include <doctest/doctest.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <random>
#include <string>

#include "server/util/base64.h"
#include "server/util/text.h"

using namespace std::string_literals;

namespace {
const std::string kFFFD = "\xEF\xBF\xBD";
}

TEST_CASE("valid UTF-8 is accepted, including 2-, 3- and 4-byte characters") {
  CHECK(util::is_valid_utf8(""));
  CHECK(util::is_valid_utf8("plain ascii"));
  CHECK(util::is_valid_utf8("caf\xC3\xA9"));       // é
  CHECK(util::is_valid_utf8("\xE2\x82\xAC"));      // €
  CHECK(util::is_valid_utf8("\xF0\x9F\x98\x80"));  // 😀 U+1F600
  CHECK(util::is_valid_utf8("\xF4\x8F\xBF\xBF"));  // U+10FFFF, the last code point
  CHECK(util::is_valid_utf8("\xED\x9F\xBF"));      // U+D7FF, just below the surrogates
  CHECK(util::is_valid_utf8("\xEE\x80\x80"));      // U+E000, just above
  CHECK(util::is_valid_utf8("a\0b"s));             // NUL is valid UTF-8
}

TEST_CASE("overlong encodings are rejected") {
  CHECK_FALSE(util::is_valid_utf8("\xC0\x80"));  // overlong NUL
  CHECK_FALSE(util::is_valid_utf8("\xC1\xBF"));
  CHECK_FALSE(util::is_valid_utf8("\xE0\x80\xAF"));  // overlong '/'
  CHECK_FALSE(util::is_valid_utf8("\xE0\x9F\xBF"));
  CHECK_FALSE(util::is_valid_utf8("\xF0\x8F\xBF\xBF"));  // overlong U+FFFF
}

TEST_CASE("UTF-16 surrogates are rejected") {
  CHECK_FALSE(util::is_valid_utf8("\xED\xA0\x80"));              // U+D800
  CHECK_FALSE(util::is_valid_utf8("\xED\xBF\xBF"));              // U+DFFF
  CHECK_FALSE(util::is_valid_utf8("\xED\xA0\xBD\xED\xB8\x80"));  // CESU-8 pair
}

TEST_CASE("code points above U+10FFFF and invalid lead bytes are rejected") {
  CHECK_FALSE(util::is_valid_utf8("\xF4\x90\x80\x80"));  // U+110000
  CHECK_FALSE(util::is_valid_utf8("\xF5\x80\x80\x80"));
  CHECK_FALSE(util::is_valid_utf8("\xF8\x88\x80\x80\x80"));
  CHECK_FALSE(util::is_valid_utf8("\xFF"));
  CHECK_FALSE(util::is_valid_utf8("\xFE"));
  CHECK_FALSE(util::is_valid_utf8("\x80"));  // lone continuation
  CHECK_FALSE(util::is_valid_utf8("a\xBF"));
}

TEST_CASE("truncated sequences are rejected") {
  CHECK_FALSE(util::is_valid_utf8("\xC3"));
  CHECK_FALSE(util::is_valid_utf8("\xE2\x82"));
  CHECK_FALSE(util::is_valid_utf8("\xF0\x9F\x98"));
  CHECK_FALSE(
      util::is_valid_utf8("\xF0\x9F\x98"
                          "a"));
  CHECK_FALSE(
      util::is_valid_utf8("\xE2"
                          "ab"));
}

TEST_CASE("to_valid_utf8 keeps valid text and replaces each bad byte with U+FFFD") {
  CHECK(util::to_valid_utf8("caf\xC3\xA9 \xF0\x9F\x98\x80") == "caf\xC3\xA9 \xF0\x9F\x98\x80");
  CHECK(util::to_valid_utf8("a\xFF"
                            "b") == "a" + kFFFD + "b");
  CHECK(util::to_valid_utf8("\xC0\x80") == kFFFD + kFFFD);
  CHECK(util::to_valid_utf8("\xED\xA0\x80") == kFFFD + kFFFD + kFFFD);
  CHECK(util::to_valid_utf8("\xF4\x90\x80\x80") == kFFFD + kFFFD + kFFFD + kFFFD);
  // A truncated sequence followed by a valid character: the valid one survives.
  CHECK(util::to_valid_utf8("\xE2\x82"
                            "\xC3\xA9") == kFFFD + kFFFD + "\xC3\xA9");
  CHECK(util::to_valid_utf8("x\xF0\x9F\x98") == "x" + kFFFD + kFFFD + kFFFD);
  CHECK(util::to_valid_utf8("") == "");
  CHECK(util::to_valid_utf8("a\0b"s) == "a\0b"s);
}

TEST_CASE("to_valid_utf8 output is always valid UTF-8 (random bytes)") {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> byte(0, 255), len(0, 64);
  for (int i = 0; i < 2000; ++i) {
    std::string s(static_cast<size_t>(len(rng)), '\0');
    for (auto& c : s) c = static_cast<char>(byte(rng));
    std::string fixed = util::to_valid_utf8(s);
    CHECK(util::is_valid_utf8(fixed));
    if (util::is_valid_utf8(s)) CHECK(fixed == s);
  }
}

TEST_CASE("utf8_prefix never splits a multibyte character") {
  const std::string text = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z";  // a é € 😀 z: 1+2+3+4+1 bytes
  CHECK(util::utf8_prefix(text, 100) == text);
  CHECK(util::utf8_prefix(text, text.size()) == text);
  CHECK(util::utf8_prefix(text, 0) == "");
  CHECK(util::utf8_prefix(text, 1) == "a");
  CHECK(util::utf8_prefix(text, 2) == "a");  // inside é
  CHECK(util::utf8_prefix(text, 3) == "a\xC3\xA9");
  CHECK(util::utf8_prefix(text, 4) == "a\xC3\xA9");  // inside €
  CHECK(util::utf8_prefix(text, 5) == "a\xC3\xA9");
  CHECK(util::utf8_prefix(text, 6) == "a\xC3\xA9\xE2\x82\xAC");
  for (size_t n = 7; n <= 9; ++n) CHECK(util::utf8_prefix(text, n) == "a\xC3\xA9\xE2\x82\xAC");
  CHECK(util::utf8_prefix(text, 10) == "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
  for (size_t n = 0; n <= text.size(); ++n) {
    CAPTURE(n);
    auto p = util::utf8_prefix(text, n);
    CHECK(p.size() <= n);
    CHECK(util::is_valid_utf8(p));
    CHECK(text.compare(0, p.size(), p) == 0);
  }
}

TEST_CASE("escape_for_log: nothing can start a line or disguise one; ordinary text is unchanged") {
  CHECK(util::escape_for_log("job 1a2b: tenant alice, caf\xC3\xA9 \xE2\x82\xAC") ==
        "job 1a2b: tenant alice, caf\xC3\xA9 \xE2\x82\xAC");
  CHECK(util::escape_for_log("k\n2099-01-01 info ADMIN") == "k\\n2099-01-01 info ADMIN");
  CHECK(util::escape_for_log("a\rb\tc\x1b[31md\x7f"s) == "a\\rb\\tc\\x1b[31md\\x7f");
  CHECK(util::escape_for_log("nul\0x"s) == "nul\\x00x");
  // NEL (U+0085), the line separator, a right-to-left override.
  CHECK(util::escape_for_log("a\xC2\x85"
                             "b\xE2\x80\xA8"
                             "c\xE2\x80\xAE"
                             "d") == "a\\u{0085}b\\u{2028}c\\u{202e}d");
  // An invalid byte stays visible as itself, never half a character.
  CHECK(util::escape_for_log("x\xFFy\xC3") == "x\\xffy\\xc3");
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string bytes(32, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() & 0xFF);
    const std::string out = util::escape_for_log(bytes);
    CHECK(out.find('\n') == std::string::npos);
    CHECK(out.find('\r') == std::string::npos);
    CHECK(util::is_valid_utf8(out));
  }
}

TEST_CASE("errno_name gives the symbolic name") {
  CHECK(util::errno_name(EPERM) == "EPERM");
  CHECK(util::errno_name(ENOENT) == "ENOENT");
  CHECK(util::errno_name(EACCES) == "EACCES");
  CHECK(util::errno_name(ENOSYS) == "ENOSYS");
  CHECK(util::errno_name(987654) == "987654");
}

TEST_CASE("call_error follows the one error form call(\"arg\"): ENAME (message)") {
  std::string e = util::call_error("mount", "/proc", EPERM);
  CHECK(e == std::string("mount(\"/proc\"): EPERM (") + std::strerror(EPERM) + ")");
  CHECK(e.rfind("mount(\"/proc\"): EPERM (", 0) == 0);
  CHECK(e.back() == ')');
}

TEST_CASE("signal_name gives SIG-prefixed names") {
  CHECK(util::signal_name(SIGKILL) == "SIGKILL");
  CHECK(util::signal_name(SIGSEGV) == "SIGSEGV");
  CHECK(util::signal_name(SIGXCPU) == "SIGXCPU");
  CHECK(util::signal_name(SIGSYS) == "SIGSYS");
  CHECK(util::signal_name(12345) == "signal 12345");
}

TEST_CASE("base64 known vectors (RFC 4648 section 10)") {
  const std::pair<const char*, const char*> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (auto& [plain, enc] : vectors) {
    CAPTURE(std::string(plain));
    CHECK(util::base64_encode(plain) == enc);
    auto dec = util::base64_decode(enc);
    REQUIRE(dec.has_value());
    CHECK(*dec == plain);
  }
  CHECK(util::base64_encode("\xFF\xFE\xFD") == "//79");
  CHECK(util::base64_decode("//79") == std::optional<std::string>("\xFF\xFE\xFD"));
}

TEST_CASE("base64 round trip for random bytes of length 0..300") {
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> byte(0, 255);
  for (size_t n = 0; n <= 300; ++n) {
    CAPTURE(n);
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(byte(rng));
    std::string enc = util::base64_encode(s);
    CHECK(enc.size() == (n + 2) / 3 * 4);
    auto dec = util::base64_decode(enc);
    REQUIRE(dec.has_value());
    CHECK(*dec == s);
  }
}

TEST_CASE("base64 decode rejects a length that is not a multiple of 4") {
  for (const char* bad : {"Q", "QQ", "QQ=", "Zm9vY", "Zm9vYmFy="}) {
    CAPTURE(std::string(bad));
    CHECK_FALSE(util::base64_decode(bad).has_value());
  }
}

TEST_CASE("base64 decode rejects characters outside the alphabet") {
  for (std::string bad : {"Zm9v!A=="s, "Zm-v"s, "Zm_v"s, "Zm9\x80"s, "Zm\0v"s}) {
    CAPTURE(std::string(bad));
    CHECK_FALSE(util::base64_decode(bad).has_value());
  }
}

TEST_CASE("base64 decode rejects whitespace") {
  for (const char* bad : {"Zm9v Zm9v", "Zm9v\nYmFy", "Zm9vYmFy\n", " Zm9vYmF", "Zm9v\r\nYmE="}) {
    CAPTURE(std::string(bad));
    CHECK_FALSE(util::base64_decode(bad).has_value());
  }
}

TEST_CASE("base64 decode rejects non-canonical padding bits") {
  CHECK(util::base64_decode("QQ==") == std::optional<std::string>("A"));
  CHECK_FALSE(util::base64_decode("QR==").has_value());
  CHECK_FALSE(util::base64_decode("QX==").has_value());
  CHECK(util::base64_decode("QUI=") == std::optional<std::string>("AB"));
  CHECK_FALSE(util::base64_decode("QUJ=").has_value());
  CHECK_FALSE(util::base64_decode("QUL=").has_value());
}

TEST_CASE("base64 decode rejects misplaced padding") {
  for (const char* bad : {"QQ==QQ==", "Q=Q=", "QQ=Q", "=QQQ", "Q===", "====", "Zm9v=mFy", "QUI=QUI="}) {
    CAPTURE(std::string(bad));
    CHECK_FALSE(util::base64_decode(bad).has_value());
  }
}

TEST_CASE("file_name_problem: one rule for every input name") {
  auto problem = [](std::string_view n) {
    const char* p = util::file_name_problem(n);
    return p ? std::string(p) : std::string();
  };
  CHECK(problem("data.csv") == "");
  CHECK(problem("r\xC3\xA9sum\xC3\xA9.txt") == "");  // é is fine
  CHECK(problem(std::string(255, 'a')) == "");
  CHECK(problem("") == "must not be empty");
  CHECK(problem(std::string(256, 'a')) == "longer than 255 bytes");
  CHECK(problem(".") == "\".\" and \"..\" are not file names");
  CHECK(problem("..") == "\".\" and \"..\" are not file names");
  CHECK(problem("a/b") == "must be a plain file name without \"/\"");
  CHECK(problem(std::string("a\0b", 3)) == "must not contain NUL or control characters");
  CHECK(problem("a\nb") == "must not contain NUL or control characters");
  CHECK(problem("a\x7F") == "must not contain NUL or control characters");
  CHECK(problem("a\xFF") == "must be valid UTF-8");
  CHECK(problem("a\xC2\x85") == "must not contain control characters");  // U+0085
  CHECK(problem("invoice\xE2\x80\xAE"
                "fdp.cmd") == "must not contain bidirectional control characters");        // U+202E
  CHECK(problem("a\xE2\x81\xA6") == "must not contain bidirectional control characters");  // U+2066
  CHECK(problem("a\xE2\x80\x8F") == "must not contain bidirectional control characters");  // U+200F
}
