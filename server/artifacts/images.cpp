// Header walkers for PNG and APNG (W3C PNG 3rd edition, APNG 1.0), JPEG
// (ITU-T T.81 Annex B) and GIF (GIF89a): only lengths and sizes are read,
// every read is bounded by the buffer first. Any server thread; never decodes
// pixel data, never allocates beyond the reason string.
#include "server/artifacts/images.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>

namespace artifacts::images {
namespace {

// A product that cannot wrap: saturates, so a huge declaration stays huge.
uint64_t mul_sat(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

// Callers check the bounds before each of these reads.
uint8_t u8(std::string_view b, size_t at) { return static_cast<uint8_t>(b[at]); }
uint32_t be16(std::string_view b, size_t at) { return uint32_t{u8(b, at)} << 8 | u8(b, at + 1); }
uint32_t le16(std::string_view b, size_t at) { return uint32_t{u8(b, at + 1)} << 8 | u8(b, at); }
uint32_t be32(std::string_view b, size_t at) { return be16(b, at) << 16 | be16(b, at + 2); }

std::string num(uint64_t v) { return std::to_string(v); }

std::string hex(uint64_t v, int digits) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%0*llX", digits, static_cast<unsigned long long>(v));
  return buf;
}

Result fail(Result r, const std::string& reason) {
  r.ok = false;
  r.reason = "image: " + reason;
  return r;
}

std::string over_cap(std::string_view what, uint64_t w, uint64_t h, uint64_t pixels_max) {
  return "image: " + std::string(what) + num(w) + " x " + num(h) + " pixels (" + num(mul_sat(w, h)) +
         ") is above the policy's " + num(pixels_max);
}

// ---- PNG ------------------------------------------------------------------

constexpr std::string_view kPngSignature{"\x89PNG\r\n\x1a\n", 8};
constexpr uint32_t kPngLengthMax = 0x7FFFFFFF;  // PNG 5.3: chunk lengths and IHDR sizes are <= 2^31-1
constexpr size_t kPngChunkOverhead = 12;        // length, type, CRC

constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t n = 0; n < 256; ++n) {
    uint32_t c = n;
    for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[n] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrcTable = make_crc_table();

// PNG Annex D (the zlib/ISO 3309 CRC): over the chunk type and data.
uint32_t crc32(std::string_view bytes) {
  uint32_t c = 0xFFFFFFFFu;
  for (char ch : bytes) c = kCrcTable[(c ^ static_cast<uint8_t>(ch)) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

// PNG 11.2.1 table 11.1: the bit depths each colour type allows.
bool valid_depth(uint8_t colour_type, uint8_t depth) {
  switch (colour_type) {
    case 0:
      return depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16;
    case 3:
      return depth == 1 || depth == 2 || depth == 4 || depth == 8;
    case 2:
    case 4:
    case 6:
      return depth == 8 || depth == 16;
    default:
      return false;
  }
}

bool is_letter(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

// IHDR, 13 bytes at byte 16 of the file: width, height, depth, colour type,
// compression, filter, interlace.
std::string check_ihdr(std::string_view d, Result& r) {
  const uint32_t w = be32(d, 0), h = be32(d, 4);
  if (w == 0 || w > kPngLengthMax) return "PNG: IHDR width " + num(w) + " at byte 16 is not in 1..2147483647";
  if (h == 0 || h > kPngLengthMax) return "PNG: IHDR height " + num(h) + " at byte 20 is not in 1..2147483647";
  r.width = w;
  r.height = h;
  const uint8_t depth = u8(d, 8), colour = u8(d, 9);
  if (!valid_depth(colour, depth))
    return "PNG: IHDR bit depth " + num(depth) + " with colour type " + num(colour) +
           " at byte 24 is not a valid combination";
  if (u8(d, 10) != 0) return "PNG: IHDR compression method " + num(u8(d, 10)) + " at byte 26 is not 0";
  if (u8(d, 11) != 0) return "PNG: IHDR filter method " + num(u8(d, 11)) + " at byte 27 is not 0";
  if (u8(d, 12) > 1) return "PNG: IHDR interlace method " + num(u8(d, 12)) + " at byte 28 is not 0 or 1";
  return {};
}

Result walk_png(std::string_view b) {
  Result r;
  if (b.size() < kPngSignature.size() || b.substr(0, kPngSignature.size()) != kPngSignature)
    return fail(r, "PNG: no PNG signature at byte 0");
  size_t pos = kPngSignature.size();
  bool seen_idat = false, seen_actl = false, first_frame_is_idat = false;
  uint64_t actl_frames = 0, fctl_count = 0;
  // Each pass consumes at least 12 bytes: the walk is bounded by the file size.
  for (bool first = true;; first = false) {
    if (b.size() - pos < kPngChunkOverhead)
      return fail(r, "PNG: file ends at byte " + num(b.size()) + " inside the chunk header at byte " + num(pos) +
                         (seen_idat ? " (no IEND)" : ""));
    const uint32_t len = be32(b, pos);
    const std::string_view type = b.substr(pos + 4, 4);
    if (!std::all_of(type.begin(), type.end(), is_letter))
      return fail(r, "PNG: chunk type at byte " + num(pos + 4) + " is not four ASCII letters");
    const std::string name(type);
    if (len > kPngLengthMax)
      return fail(r, "PNG: " + name + " chunk length " + num(len) + " at byte " + num(pos) + " is above 2^31-1");
    if (b.size() - pos - kPngChunkOverhead < len)
      return fail(r, "PNG: " + name + " chunk of " + num(len) + " bytes at byte " + num(pos) +
                         " runs past the end of the file (" + num(b.size()) + " bytes)");
    const std::string_view data = b.substr(pos + 8, len);
    const uint32_t stored = be32(b, pos + 8 + len), computed = crc32(b.substr(pos + 4, 4 + size_t{len}));
    // A reader that checks CRCs drops or refuses a damaged chunk, one that does not uses it:
    // the two would see different images, so neither is judged.
    if (stored != computed)
      return fail(r, "PNG: " + name + " chunk at byte " + num(pos) + " has CRC " + hex(stored, 8) +
                         " but its bytes give " + hex(computed, 8));

    if (first) {
      if (name != "IHDR") return fail(r, "PNG: first chunk is " + name + " at byte 8, not IHDR");
      if (len != 13) return fail(r, "PNG: IHDR length is " + num(len) + " at byte 8, not 13");
      if (std::string bad = check_ihdr(data, r); !bad.empty()) return fail(r, bad);
    } else if (name == "IHDR") {
      return fail(r, "PNG: second IHDR chunk at byte " + num(pos));
    } else if (name == "IDAT") {
      seen_idat = true;
    } else if (name == "acTL") {
      // APNG 4.1: one acTL, before the first IDAT; num_frames > 0 and equal to the fcTL count.
      if (seen_actl) return fail(r, "PNG: second acTL chunk at byte " + num(pos));
      if (seen_idat) return fail(r, "PNG: acTL chunk at byte " + num(pos) + " after IDAT");
      if (len != 8) return fail(r, "PNG: acTL length is " + num(len) + " at byte " + num(pos) + ", not 8");
      actl_frames = be32(data, 0);
      if (actl_frames == 0) return fail(r, "PNG: acTL at byte " + num(pos) + " declares 0 frames");
      seen_actl = true;
    } else if (name == "fcTL") {
      // APNG 4.2: every frame lies inside the canvas; a reader that trusts the offsets
      // writes outside its buffer or grows it.
      if (len != 26) return fail(r, "PNG: fcTL length is " + num(len) + " at byte " + num(pos) + ", not 26");
      const uint64_t w = be32(data, 4), h = be32(data, 8), x = be32(data, 12), y = be32(data, 16);
      const std::string frame = "PNG: APNG frame " + num(fctl_count + 1) + " (fcTL at byte " + num(pos) + ")";
      if (w == 0 || h == 0) return fail(r, frame + " is " + num(w) + " x " + num(h) + ": empty");
      if (x + w > r.width || y + h > r.height)
        return fail(r, frame + " of " + num(w) + " x " + num(h) + " at " + num(x) + "," + num(y) + " is outside the " +
                           num(r.width) + " x " + num(r.height) + " canvas");
      if (fctl_count == 0 && !seen_idat) {
        // APNG 4.2: an fcTL before IDAT makes the default image the first frame, which then is the canvas.
        if (x != 0 || y != 0 || w != r.width || h != r.height)
          return fail(
              r, frame + " precedes IDAT but is not the whole " + num(r.width) + " x " + num(r.height) + " canvas");
        first_frame_is_idat = true;
      }
      ++fctl_count;
    } else if (name == "IEND") {
      if (!seen_idat) return fail(r, "PNG: IEND at byte " + num(pos) + " before any IDAT chunk");
      break;  // what follows IEND is no reader's image data
    }
    pos += kPngChunkOverhead + len;
  }
  if (seen_actl && actl_frames != fctl_count)
    return fail(
        r, "PNG: acTL declares " + num(actl_frames) + " frames but the file has " + num(fctl_count) + " fcTL chunks");
  // The default image is decoded by every reader; fcTL frames by APNG readers (counted even
  // without acTL, which a lenient reader may not insist on).
  r.frames = fctl_count + (first_frame_is_idat ? 0 : 1);
  r.ok = true;
  return r;
}

// ---- JPEG -----------------------------------------------------------------

// T.81 table B.1: frame headers that carry the image's size.
bool is_sof(uint8_t m) { return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC; }

// Markers with a length field this walker knows: SOFn, DHT, DAC, SOS, DQT, DNL, DRI,
// DHP, EXP, APPn, COM. Any other (0x02-0xBF, JPG 0xC8, JPGn 0xF0-0xFD) is refused, as
// libjpeg refuses it: such a segment may carry a size some reader uses (JPEG-LS's SOF55
// is 0xF7), and skipping it would let that size through unread.
bool is_known_segment(uint8_t m) {
  return (m >= 0xC0 && m <= 0xCF && m != 0xC8) || (m >= 0xDA && m <= 0xDF) || (m >= 0xE0 && m <= 0xEF) || m == 0xFE;
}

Result walk_jpeg(std::string_view b) {
  Result r;
  if (b.size() < 2 || u8(b, 0) != 0xFF || u8(b, 1) != 0xD8) return fail(r, "JPEG: no SOI marker (FF D8) at byte 0");
  size_t pos = 2;
  bool seen_sof = false;
  // Each pass consumes at least one byte: the walk is bounded by the file size.
  for (;;) {
    if (pos >= b.size()) return fail(r, "JPEG: file ends at byte " + num(b.size()) + " before the EOI marker");
    if (u8(b, pos) != 0xFF)
      return fail(r, "JPEG: byte " + hex(u8(b, pos), 2) + " at byte " + num(pos) + " where a marker is expected");
    const size_t at = pos;
    while (pos < b.size() && u8(b, pos) == 0xFF) ++pos;  // fill bytes (T.81 B.1.1.2)
    if (pos >= b.size()) return fail(r, "JPEG: file ends at byte " + num(b.size()) + " before the EOI marker");
    const uint8_t m = u8(b, pos++);
    const std::string marker = "marker " + hex(0xFF00u | m, 4) + " at byte " + num(at);
    if (m == 0xD9) break;                                 // EOI: what follows is no reader's image
    if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue;  // TEM, RSTn: no length (B.1.1.3)
    if (m == 0x00) return fail(r, "JPEG: stuffed byte 0xFF00 at byte " + num(at) + " outside a scan");
    if (m == 0xD8) return fail(r, "JPEG: second SOI " + marker);
    if (!is_known_segment(m)) return fail(r, "JPEG: unknown " + marker);
    if (b.size() - pos < 2) return fail(r, "JPEG: file ends inside the length of " + marker);
    const uint32_t len = be16(b, pos);
    if (len < 2) return fail(r, "JPEG: length " + num(len) + " of " + marker + " is below 2");
    if (b.size() - pos < len)
      return fail(r, "JPEG: " + marker + " has a segment of " + num(len) +
                         " bytes that runs past the end of the file (" + num(b.size()) + " bytes)");
    // An APPn segment (an EXIF thumbnail's SOF included) is skipped whole by its length.
    const std::string_view seg = b.substr(pos + 2, len - 2);
    if (is_sof(m) || m == 0xDE) {
      // B.2.2 (and B.3.2 for DHP): P, Y, X, Nf, then 3 bytes per component.
      if (seg.size() < 6) return fail(r, "JPEG: frame header " + marker + " of " + num(len) + " bytes is too short");
      const uint32_t h = be16(seg, 1), w = be16(seg, 3), components = u8(seg, 5);
      if (components == 0 || seg.size() != 6 + 3 * size_t{components})
        return fail(
            r, "JPEG: frame header " + marker + " has length " + num(len) + " for " + num(components) + " components");
      // B.2.5: Y = 0 means a DNL marker after the first scan sets the height; a reader then
      // learns it only while decoding, so no check here could bound it.
      if (h == 0)
        return fail(r, "JPEG: frame header " + marker + " declares height 0 (set later by DNL): unverifiable");
      if (w == 0) return fail(r, "JPEG: frame header " + marker + " declares width 0");
      // Hierarchical files and decoders that accept a second SOF see more than one size:
      // the largest is what some reader allocates.
      if (uint64_t{w} * h > r.width * r.height) {
        r.width = w;
        r.height = h;
      }
      if (is_sof(m)) seen_sof = true;
    }
    pos += len;
    if (m == 0xDA) {
      if (!seen_sof) return fail(r, "JPEG: scan (SOS) " + marker + " before any frame header (SOFn)");
      // Entropy-coded data runs to the next marker; 0xFF00 is a stuffed 0xFF and RSTn
      // belongs to the scan (B.1.1.5).
      for (;;) {
        const size_t ff = b.find('\xFF', pos);
        if (ff == std::string_view::npos)
          return fail(r, "JPEG: scan after " + marker + " runs to the end of the file without EOI");
        size_t next = ff + 1;
        while (next < b.size() && u8(b, next) == 0xFF) ++next;
        if (next >= b.size()) return fail(r, "JPEG: scan after " + marker + " runs to the end of the file without EOI");
        const uint8_t c = u8(b, next);
        if (c == 0x00 || (c >= 0xD0 && c <= 0xD7)) {
          pos = next + 1;
          continue;
        }
        pos = ff;
        break;
      }
    }
  }
  if (!seen_sof) return fail(r, "JPEG: no frame header (SOFn) before EOI at byte " + num(pos - 2));
  r.frames = 1;
  r.ok = true;
  return r;
}

// ---- GIF ------------------------------------------------------------------

// Data sub-blocks (GIF89a 15): a size byte, that many bytes, until a size of 0.
bool skip_sub_blocks(std::string_view b, size_t& pos) {
  for (;;) {
    if (pos >= b.size()) return false;
    const size_t n = u8(b, pos++);
    if (n == 0) return true;
    if (b.size() - pos < n) return false;
    pos += n;
  }
}

// A colour table flag and size in a packed byte: 3 x 2^(size+1) bytes (GIF89a 18, 20).
bool skip_colour_table(std::string_view b, size_t& pos, uint8_t packed) {
  if (!(packed & 0x80)) return true;
  const size_t table = size_t{3} << ((packed & 7) + 1);
  if (b.size() - pos < table) return false;
  pos += table;
  return true;
}

Result walk_gif(std::string_view b, uint64_t pixels_max) {
  Result r;
  if (b.size() < 6 || (b.substr(0, 6) != "GIF87a" && b.substr(0, 6) != "GIF89a"))
    return fail(r, "GIF: no GIF87a or GIF89a header at byte 0");
  if (b.size() < 13)
    return fail(r, "GIF: file ends at byte " + num(b.size()) + " inside the logical screen descriptor");
  r.width = le16(b, 6);
  r.height = le16(b, 8);
  size_t pos = 13;
  if (!skip_colour_table(b, pos, u8(b, 10)))
    return fail(r, "GIF: global colour table at byte 13 runs past the end of the file");
  // Each pass consumes at least one byte: the walk is bounded by the file size.
  for (;;) {
    if (pos >= b.size()) return fail(r, "GIF: file ends at byte " + num(b.size()) + " before the trailer (0x3B)");
    const size_t at = pos;
    const uint8_t block = u8(b, pos);
    if (block == 0x3B) break;  // trailer: what follows is no reader's image
    if (block == 0x21) {       // extension: label, then sub-blocks
      pos += 2;
      if (pos > b.size() || !skip_sub_blocks(b, pos))
        return fail(r, "GIF: extension at byte " + num(at) + " runs past the end of the file");
    } else if (block == 0x2C) {  // image descriptor (GIF89a 20)
      if (b.size() - pos < 10)
        return fail(r, "GIF: image descriptor at byte " + num(at) + " runs past the end of the file");
      const uint64_t left = le16(b, pos + 1), top = le16(b, pos + 3), w = le16(b, pos + 5), h = le16(b, pos + 7);
      const uint8_t packed = u8(b, pos + 9);
      ++r.frames;
      // A frame of no pixels is malformed (found by fuzzing: a 0 x 0 frame at
      // offset 7718 left a 7718 x 0 canvas that passed).
      if (w == 0 || h == 0)
        return fail(r, "GIF: frame " + num(r.frames) + " at byte " + num(at) + " is " + num(w) + " x " + num(h) +
                           " pixels (no pixels)");
      if (mul_sat(w, h) > pixels_max) {
        Result big = r;
        big.ok = false;
        big.reason = over_cap("GIF frame " + num(r.frames) + " at byte " + num(at) + ": ", w, h, pixels_max);
        return big;
      }
      // A frame that does not fit the logical screen: some readers grow the canvas to it, so
      // the canvas judged is the union (at most 131070 on a side: 16-bit offset plus size).
      r.width = std::max(r.width, left + w);
      r.height = std::max(r.height, top + h);
      pos += 10;
      if (!skip_colour_table(b, pos, packed))
        return fail(r, "GIF: local colour table of frame " + num(r.frames) + " at byte " + num(at) +
                           " runs past the end of the file");
      if (pos >= b.size())
        return fail(r, "GIF: frame " + num(r.frames) + " at byte " + num(at) + " ends before its LZW code size");
      ++pos;  // LZW minimum code size; the data itself is never decoded
      if (!skip_sub_blocks(b, pos))
        return fail(
            r, "GIF: image data of frame " + num(r.frames) + " at byte " + num(at) + " runs past the end of the file");
    } else {
      return fail(r, "GIF: block " + hex(block, 2) + " at byte " + num(at) +
                         " is not an extension (0x21), image (0x2C) or trailer (0x3B)");
    }
  }
  if (r.frames == 0) return fail(r, "GIF: no image before the trailer at byte " + num(pos));
  r.ok = true;
  return r;
}

}  // namespace

Result check(std::string_view bytes, std::string_view media_type, uint64_t pixels_max) {
  Result r;
  if (media_type == "image/png")
    r = walk_png(bytes);
  else if (media_type == "image/jpeg")
    r = walk_jpeg(bytes);
  else if (media_type == "image/gif")
    r = walk_gif(bytes, pixels_max);
  else
    return Result{true, "", 0, 0, 0};
  if (!r.ok) return r;

  const uint64_t pixels = mul_sat(r.width, r.height);
  if (pixels > pixels_max) {
    r.ok = false;
    r.reason = over_cap("", r.width, r.height, pixels_max);
    return r;
  }
  // An animation is decoded frame after frame onto one canvas. A browser keeps a few canvases,
  // not all, so frames x canvas is not its memory; it is every reader's work, though, and the
  // memory of converters that load the whole sequence (ImageMagick, Pillow's ImageSequence into
  // a list). Eight canvases' worth lets generated animations through (matplotlib: 200 frames of
  // 640 x 480 is 1.2 x a cap of 50 M) and refuses 10,000 frames of 1000 x 1000 (200 x).
  const uint64_t all = mul_sat(pixels, r.frames), budget = mul_sat(pixels_max, kAnimationPixelsFactor);
  if (r.frames > 1 && all > budget) {
    r.ok = false;
    r.reason = "image: " + num(r.frames) + " frames of " + num(r.width) + " x " + num(r.height) + " pixels (" +
               num(all) + " in all) are above " + num(kAnimationPixelsFactor) + " x the policy's " + num(pixels_max) +
               " (" + num(budget) + ")";
    return r;
  }
  return r;
}

}  // namespace artifacts::images
