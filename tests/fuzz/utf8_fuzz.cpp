// util text helpers: UTF-8 repair yields valid UTF-8, is idempotent and keeps
// valid text as it is; a prefix never splits a character; a file name that
// passes file_name_problem is a plain name.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/util/text.h"
#include "tests/fuzz/check.h"

namespace {

// An independent validator (Unicode 15, table 3-7), to check util's.
bool reference_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < n; ++k) {
      unsigned b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = cp << 6 | (b & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const bool valid = util::is_valid_utf8(bytes);
  FUZZ_CHECK(valid == reference_valid_utf8(bytes));

  const std::string repaired = util::to_valid_utf8(bytes);
  FUZZ_CHECK(util::is_valid_utf8(repaired));
  FUZZ_CHECK(reference_valid_utf8(repaired));
  FUZZ_CHECK(util::to_valid_utf8(repaired) == repaired);
  if (valid) FUZZ_CHECK(repaired == bytes);

  // A prefix of valid text, at every cut, is valid and as long as it can be.
  const size_t max = size == 0 ? 0 : data[0] % (size + 1);
  std::string_view prefix = util::utf8_prefix(repaired, max);
  FUZZ_CHECK(prefix.size() <= max || repaired.size() <= max);
  FUZZ_CHECK(repaired.substr(0, prefix.size()) == prefix);
  FUZZ_CHECK(util::is_valid_utf8(prefix));
  FUZZ_CHECK(repaired.size() <= max || max - prefix.size() < 4);

  if (util::file_name_problem(bytes) == nullptr) {
    FUZZ_CHECK(!bytes.empty() && bytes.size() <= 255);
    FUZZ_CHECK(bytes != "." && bytes != "..");
    FUZZ_CHECK(bytes.find('/') == std::string_view::npos && bytes.find('\0') == std::string_view::npos);
    FUZZ_CHECK(valid);
  }
  return 0;
}
