// util::base64: encode then decode is the identity, and the decoder accepts
// only canonical text (whatever it decodes re-encodes to the same text).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/util/base64.h"
#include "tests/fuzz/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::string encoded = util::base64_encode(bytes);
  FUZZ_CHECK(encoded.size() == (size + 2) / 3 * 4);
  auto round = util::base64_decode(encoded);
  FUZZ_CHECK(round && *round == bytes);
  // The same bytes read as base64 text.
  if (auto decoded = util::base64_decode(bytes)) {
    FUZZ_CHECK(util::base64_encode(*decoded) == bytes);
  }
  return 0;
}
