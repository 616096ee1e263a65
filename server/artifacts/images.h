// Image dimension checks (decompression bombs) for PNG/APNG, JPEG and GIF
// artifacts, from their headers alone: pixel data is never decoded. Pure,
// non-throwing; any server thread. Stops: pixel floods (a few KB declaring
// 100,000 x 100,000), animation bombs (many canvas-sized frames), and headers
// that cannot be walked to their end marker. Does not stop: a deflate/LZW
// stream that inflates past its declared size (decoders bound it by the
// dimensions checked here), progressive-JPEG scan floods (CPU, not memory),
// EXIF thumbnails (skipped, never judged), or data after the end marker.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace artifacts::images {

// An animation may hold this many canvases' worth of pixels in all: see images.cpp.
inline constexpr uint64_t kAnimationPixelsFactor = 8;

struct Result {
  bool ok = false;
  std::string reason;  // empty when ok; else "image: ..." naming what, and at which byte
  // What the header declares, filled as far as it was read (also when rejected).
  uint64_t width = 0, height = 0;  // the canvas a reader allocates
  uint64_t frames = 0;             // images a reader decodes (1 for a still image)
};

// media_type "image/png", "image/jpeg" or "image/gif" (as artifacts::types
// decided it); any other type is ok with nothing read. Rejects a file whose
// width x height exceeds pixels_max, a GIF or APNG whose frames x width x
// height exceeds pixels_max x kAnimationPixelsFactor, and a malformed header.
Result check(std::string_view bytes, std::string_view media_type, uint64_t pixels_max);

}  // namespace artifacts::images
