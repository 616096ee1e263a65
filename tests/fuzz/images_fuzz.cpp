// artifacts::images::check on fuzzed bytes: never a read outside the input
// (ASan, on an exact-size copy), and an accepted image is within the cap and
// the animation budget; a refused one says why, as "image: ...". A non-image
// media type is never refused.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/artifacts/images.h"
#include "tests/fuzz/check.h"

namespace images = artifacts::images;

namespace {

constexpr std::string_view kTypes[] = {"image/png", "image/jpeg", "image/gif", "text/plain"};
// The corpus's cap, tiny caps that make every size matter, and the extremes the
// arithmetic must survive (0 refuses everything; UINT64_MAX saturates the budget).
constexpr uint64_t kCaps[] = {50'000'000, 1000, 0, UINT64_MAX};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the media type (bits 0-1) and the cap (bits 2-3); the rest is the file.
  const std::string_view type = kTypes[data[0] & 3];
  const uint64_t cap = kCaps[(data[0] >> 2) & 3];
  const std::string file(reinterpret_cast<const char*>(data) + 1, size - 1);

  const images::Result r = images::check(file, type, cap);
  if (type == "text/plain") {
    FUZZ_CHECK(r.ok && r.reason.empty() && r.frames == 0);
    return 0;
  }
  if (!r.ok) {
    FUZZ_CHECK(r.reason.rfind("image: ", 0) == 0);
    return 0;
  }
  FUZZ_CHECK(r.reason.empty());
  FUZZ_CHECK(r.width >= 1 && r.height >= 1 && r.frames >= 1);
  // No wrap: each side fits in 32 bits, so the product is exact in 64.
  FUZZ_CHECK(r.width <= UINT32_MAX && r.height <= UINT32_MAX);
  const unsigned __int128 pixels = static_cast<unsigned __int128>(r.width) * r.height;
  FUZZ_CHECK(pixels <= cap);
  if (r.frames > 1)
    FUZZ_CHECK(pixels * r.frames <= static_cast<unsigned __int128>(cap) * images::kAnimationPixelsFactor);
  return 0;
}
