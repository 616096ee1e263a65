// Image dimension checks (artifacts::images): pixel floods, animation bombs and
// malformed headers in PNG/APNG, JPEG and GIF, each with the exact verdict and
// reason; every truncation of a valid file is refused; and the table-driven
// corpus tests/gate_corpus/images/cases.json through the same API.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/artifacts/images.h"
#include "server/artifacts/types.h"
#include "tests/unit/paths.h"

using namespace std::string_literals;
namespace images = artifacts::images;

namespace {

constexpr uint64_t kCap = 50'000'000;

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}
std::string be16(uint32_t v) { return {static_cast<char>(v >> 8), static_cast<char>(v)}; }
std::string le16(uint32_t v) { return {static_cast<char>(v), static_cast<char>(v >> 8)}; }

// Bitwise CRC-32 (PNG Annex D), written apart from the module's table version.
uint32_t crc(const std::string& s) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char ch : s) {
    c ^= ch;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

std::string chunk(const std::string& type, const std::string& data) {
  return be32(static_cast<uint32_t>(data.size())) + type + data + be32(crc(type + data));
}

const std::string kSig = "\x89PNG\r\n\x1a\n"s;
// zlib stream of one zero byte (a filter byte): enough for the header walk, which never inflates.
const std::string kIdat = chunk("IDAT", "\x78\x9c\x63\x00\x00\x00\x01\x00\x01"s);
const std::string kIend = chunk("IEND", "");

std::string ihdr(uint32_t w, uint32_t h, uint8_t depth = 8, uint8_t colour = 0) {
  return chunk("IHDR", be32(w) + be32(h) + std::string{static_cast<char>(depth), static_cast<char>(colour), 0, 0, 0});
}
std::string png(uint32_t w, uint32_t h) { return kSig + ihdr(w, h) + kIdat + kIend; }

std::string fctl(uint32_t seq, uint32_t w, uint32_t h, uint32_t x = 0, uint32_t y = 0) {
  return chunk("fcTL", be32(seq) + be32(w) + be32(h) + be32(x) + be32(y) + be16(1) + be16(10) + "\0\0"s);
}
std::string actl(uint32_t frames) { return chunk("acTL", be32(frames) + be32(0)); }

std::string seg(uint8_t marker, const std::string& payload) {
  return "\xFF"s + static_cast<char>(marker) + be16(static_cast<uint32_t>(payload.size() + 2)) + payload;
}
std::string sof(uint32_t w, uint32_t h, uint8_t marker = 0xC0) {
  return seg(marker, "\x08"s + be16(h) + be16(w) + "\x01\x01\x11\x00"s);
}
const std::string kDqt = seg(0xDB, "\0"s + std::string(64, '\1'));
const std::string kDht =
    seg(0xC4, "\x00\x01"s + std::string(15, '\0') + "\0"s) + seg(0xC4, "\x10\x01"s + std::string(15, '\0') + "\0"s);
const std::string kSos = seg(0xDA, "\x01\x01\x00\x00\x3F\x00"s);
std::string jpeg(uint32_t w, uint32_t h, const std::string& before_dqt = "") {
  return "\xFF\xD8"s + before_dqt + kDqt + sof(w, h) + kDht + kSos + "\x0F\xFF\x00\x3F"s + "\xFF\xD9"s;
}

const std::string kLzw1px = "\x02\x02\x44\x01\x00"s;
std::string gif_frame(uint32_t x, uint32_t y, uint32_t w, uint32_t h) {
  return "\x21\xF9\x04\x04\x0A\x00\x00\x00"s + "\x2C"s + le16(x) + le16(y) + le16(w) + le16(h) + "\0"s + kLzw1px;
}
std::string gif(uint32_t sw, uint32_t sh, const std::string& frames) {
  return "GIF89a"s + le16(sw) + le16(sh) + "\x80\x00\x00"s + "\x00\x00\x00\xFF\xFF\xFF"s + frames + "\x3B"s;
}

void check_rejected(const images::Result& r, const std::string& reason) {
  CHECK_FALSE(r.ok);
  CHECK_MESSAGE(r.reason == reason, "reason: " << r.reason);
}

}  // namespace

TEST_CASE("a small PNG is accepted with its size and one frame") {
  images::Result r = images::check(png(3, 2), "image/png", kCap);
  CHECK(r.ok);
  CHECK(r.reason == "");
  CHECK(r.width == 3);
  CHECK(r.height == 2);
  CHECK(r.frames == 1);
}

TEST_CASE("pixel flood: a 100000 x 100000 PNG of a few bytes is rejected with its size") {
  images::Result r = images::check(png(100000, 100000), "image/png", kCap);
  check_rejected(r, "image: 100000 x 100000 pixels (10000000000) is above the policy's 50000000");
  CHECK(r.width == 100000);
  CHECK(r.height == 100000);
}

TEST_CASE("the cap is inclusive: width x height equal to pixels_max passes, one more pixel row does not") {
  CHECK(images::check(png(10000, 5000), "image/png", kCap).ok);
  check_rejected(images::check(png(10000, 5001), "image/png", kCap),
                 "image: 10000 x 5001 pixels (50010000) is above the policy's 50000000");
  check_rejected(images::check(png(1, 1), "image/png", 0), "image: 1 x 1 pixels (1) is above the policy's 0");
}

TEST_CASE("PNG sizes are 31-bit and the largest product does not wrap") {
  check_rejected(images::check(png(0x7FFFFFFF, 0x7FFFFFFF), "image/png", 4611686014132420608u),
                 "image: 2147483647 x 2147483647 pixels (4611686014132420609) is above the policy's "
                 "4611686014132420608");
  CHECK(images::check(png(0x7FFFFFFF, 0x7FFFFFFF), "image/png", UINT64_MAX).ok);
  check_rejected(images::check(png(0x80000000u, 1), "image/png", kCap),
                 "image: PNG: IHDR width 2147483648 at byte 16 is not in 1..2147483647");
  check_rejected(images::check(png(0, 1), "image/png", kCap),
                 "image: PNG: IHDR width 0 at byte 16 is not in 1..2147483647");
  check_rejected(images::check(png(1, 0), "image/png", kCap),
                 "image: PNG: IHDR height 0 at byte 20 is not in 1..2147483647");
}

TEST_CASE("a PNG whose IHDR CRC is wrong is rejected: readers disagree on such a chunk") {
  std::string file = png(100000, 100000);
  file[29] = static_cast<char>(file[29] ^ 1);  // last CRC byte of IHDR (8 + 8 + 13 + 3)
  images::Result r = images::check(file, "image/png", kCap);
  CHECK_FALSE(r.ok);
  CHECK_MESSAGE(r.reason.rfind("image: PNG: IHDR chunk at byte 8 has CRC 0x", 0) == 0, r.reason);
  CHECK_MESSAGE(r.reason.find(" but its bytes give 0x") != std::string::npos, r.reason);
}

TEST_CASE("PNG bit depth and colour type must be a combination PNG defines") {
  struct Combo {
    uint8_t depth, colour;
    bool valid;
  };
  const Combo combos[] = {{1, 0, true},  {16, 0, true},  {3, 0, false}, {8, 2, true},  {4, 2, false},
                          {8, 3, true},  {16, 3, false}, {16, 4, true}, {2, 4, false}, {8, 6, true},
                          {1, 6, false}, {8, 1, false},  {8, 5, false}, {8, 7, false}};
  for (const Combo& c : combos) {
    CAPTURE(int{c.depth});
    CAPTURE(int{c.colour});
    images::Result r = images::check(kSig + ihdr(4, 4, c.depth, c.colour) + kIdat + kIend, "image/png", kCap);
    CHECK(r.ok == c.valid);
    if (!c.valid)
      CHECK(r.reason == "image: PNG: IHDR bit depth " + std::to_string(c.depth) + " with colour type " +
                            std::to_string(c.colour) + " at byte 24 is not a valid combination");
  }
}

TEST_CASE("PNG chunk walk: IHDR first, bounded lengths, IDAT and IEND required") {
  check_rejected(images::check(kSig + chunk("tEXt", "a\0b"s) + ihdr(1, 1) + kIdat + kIend, "image/png", kCap),
                 "image: PNG: first chunk is tEXt at byte 8, not IHDR");
  check_rejected(images::check(kSig + ihdr(1, 1) + kIdat, "image/png", kCap),
                 "image: PNG: file ends at byte 54 inside the chunk header at byte 54 (no IEND)");
  check_rejected(images::check(kSig + ihdr(1, 1) + kIend, "image/png", kCap),
                 "image: PNG: IEND at byte 33 before any IDAT chunk");
  check_rejected(
      images::check(kSig + ihdr(1, 1) + be32(0xFFFFFFF0u) + "IDAT" + std::string(8, '\0'), "image/png", kCap),
      "image: PNG: IDAT chunk length 4294967280 at byte 33 is above 2^31-1");
  check_rejected(images::check(kSig + ihdr(1, 1) + be32(100) + "IDAT" + std::string(8, '\0'), "image/png", kCap),
                 "image: PNG: IDAT chunk of 100 bytes at byte 33 runs past the end of the file (49 bytes)");
  check_rejected(images::check(kSig + ihdr(1, 1) + ihdr(9, 9) + kIdat + kIend, "image/png", kCap),
                 "image: PNG: second IHDR chunk at byte 33");
  check_rejected(images::check("\x89PNG\r\n\x1a\r"s + ihdr(1, 1) + kIdat + kIend, "image/png", kCap),
                 "image: PNG: no PNG signature at byte 0");
  // What follows IEND is no reader's image data.
  CHECK(images::check(png(1, 1) + "trailing", "image/png", kCap).ok);
}

TEST_CASE("APNG: frames are counted, must lie inside the canvas, and acTL must match") {
  const std::string two = kSig + ihdr(4, 4) + actl(2) + fctl(0, 4, 4) + kIdat + fctl(1, 2, 2, 2, 2) +
                          chunk("fdAT", be32(2) + "\x78\x9c\x63\x00\x00\x00\x01\x00\x01"s) + kIend;
  images::Result r = images::check(two, "image/png", kCap);
  CHECK(r.ok);
  CHECK(r.frames == 2);

  // A default image outside the animation is decoded too: three images.
  const std::string separate = kSig + ihdr(4, 4) + actl(2) + kIdat + fctl(0, 4, 4) + fctl(2, 1, 1) + kIend;
  CHECK(images::check(separate, "image/png", kCap).frames == 3);

  check_rejected(images::check(kSig + ihdr(4, 4) + actl(2) + fctl(0, 4, 4) + kIdat + fctl(1, 2, 2, 3, 0) + kIend,
                               "image/png", kCap),
                 "image: PNG: APNG frame 2 (fcTL at byte 112) of 2 x 2 at 3,0 is outside the 4 x 4 canvas");
  // Offsets near 2^32 must not wrap back inside the canvas.
  images::Result wrap = images::check(
      kSig + ihdr(4, 4) + actl(2) + fctl(0, 4, 4) + kIdat + fctl(1, 2, 2, 0xFFFFFFFFu, 0) + kIend, "image/png", kCap);
  CHECK_FALSE(wrap.ok);
  CHECK_MESSAGE(wrap.reason.find("is outside the 4 x 4 canvas") != std::string::npos, wrap.reason);
  check_rejected(images::check(kSig + ihdr(4, 4) + actl(1) + fctl(0, 2, 2) + kIdat + kIend, "image/png", kCap),
                 "image: PNG: APNG frame 1 (fcTL at byte 53) precedes IDAT but is not the whole 4 x 4 canvas");
  check_rejected(images::check(kSig + ihdr(4, 4) + actl(5) + fctl(0, 4, 4) + kIdat + kIend, "image/png", kCap),
                 "image: PNG: acTL declares 5 frames but the file has 1 fcTL chunks");
  check_rejected(images::check(kSig + ihdr(4, 4) + kIdat + actl(1) + kIend, "image/png", kCap),
                 "image: PNG: acTL chunk at byte 54 after IDAT");
}

TEST_CASE("APNG animation bomb: frames x canvas above 8 x the cap is rejected, at 8 x accepted") {
  auto animation = [](uint32_t frames) {
    std::string f = kSig + ihdr(5000, 5000) + actl(frames) + fctl(0, 5000, 5000) + kIdat;
    for (uint32_t i = 1; i < frames; ++i) f += fctl(i, 5000, 5000);
    return f + kIend;
  };
  CHECK(images::check(animation(16), "image/png", kCap).ok);  // 16 x 25 M = 400 M
  images::Result r = images::check(animation(17), "image/png", kCap);
  check_rejected(r,
                 "image: 17 frames of 5000 x 5000 pixels (425000000 in all) are above 8 x the policy's 50000000 "
                 "(400000000)");
  CHECK(r.frames == 17);
}

TEST_CASE("JPEG: the SOF size is taken after APPn segments, skipped by their length") {
  images::Result r = images::check(jpeg(8, 8), "image/jpeg", kCap);
  CHECK(r.ok);
  CHECK(r.width == 8);
  CHECK(r.height == 8);
  CHECK(r.frames == 1);

  // An EXIF thumbnail is a whole JPEG inside APP1: its SOF is not the image's.
  const std::string exif = seg(0xE1, "Exif\0\0"s + jpeg(60000, 60000));
  r = images::check(jpeg(8, 8, exif), "image/jpeg", kCap);
  CHECK(r.ok);
  CHECK(r.width == 8);

  check_rejected(images::check(jpeg(65535, 65535), "image/jpeg", kCap),
                 "image: 65535 x 65535 pixels (4294836225) is above the policy's 50000000");
}

TEST_CASE("JPEG: the largest of several frame headers counts, whatever its SOF type") {
  for (uint8_t m : {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}) {
    CAPTURE(int{m});
    const std::string file =
        "\xFF\xD8"s + kDqt + sof(8, 8) + sof(20000, 20000, m) + sof(16, 16) + kDht + kSos + "\x00"s + "\xFF\xD9"s;
    images::Result r = images::check(file, "image/jpeg", kCap);
    check_rejected(r, "image: 20000 x 20000 pixels (400000000) is above the policy's 50000000");
  }
  // DHT (C4), DAC (CC) are not frame headers: a "size" in them is not read.
  CHECK(images::check("\xFF\xD8"s + seg(0xCC, "\x00\xFF\xFF\xFF\xFF\x01\x01\x11\x00"s) + jpeg(8, 8).substr(2),
                      "image/jpeg", kCap)
            .ok);
}

TEST_CASE("JPEG: DNL height, a scan before any frame, bad segments and unknown markers are rejected") {
  check_rejected(
      images::check(jpeg(1000, 0), "image/jpeg", kCap),
      "image: JPEG: frame header marker 0xFFC0 at byte 71 declares height 0 (set later by DNL): unverifiable");
  check_rejected(images::check("\xFF\xD8"s + kDqt + kDht + kSos + "\x00"s + "\xFF\xD9"s, "image/jpeg", kCap),
                 "image: JPEG: scan (SOS) marker 0xFFDA at byte 115 before any frame header (SOFn)");
  check_rejected(images::check("\xFF\xD8\xFF\xD9"s, "image/jpeg", kCap),
                 "image: JPEG: no frame header (SOFn) before EOI at byte 2");
  check_rejected(images::check("\xFF\xD8"s + seg(0xF7, "\x08\xEA\x60\xEA\x60\x01\x01\x11\x00"s) + jpeg(8, 8).substr(2),
                               "image/jpeg", kCap),
                 "image: JPEG: unknown marker 0xFFF7 at byte 2");
  check_rejected(images::check("\xFF\xD8\xFF\xE0\x00\x01"s + jpeg(8, 8).substr(2), "image/jpeg", kCap),
                 "image: JPEG: length 1 of marker 0xFFE0 at byte 2 is below 2");
  check_rejected(
      images::check("\xFF\xD8"s + seg(0xC0, "\x08\x00\x08\x00\x08\x02\x01\x11\x00"s) + "\xFF\xD9"s, "image/jpeg", kCap),
      "image: JPEG: frame header marker 0xFFC0 at byte 2 has length 11 for 2 components");
  check_rejected(images::check("\xFF\xD8\x00"s, "image/jpeg", kCap),
                 "image: JPEG: byte 0x00 at byte 2 where a marker is expected");
  check_rejected(images::check("\xFF\xD8\xFF\xD8"s, "image/jpeg", kCap),
                 "image: JPEG: second SOI marker 0xFFD8 at byte 2");
  check_rejected(images::check("GIF89a", "image/jpeg", kCap), "image: JPEG: no SOI marker (FF D8) at byte 0");
}

TEST_CASE("JPEG: fill bytes, RST and stuffed bytes in a scan are walked over") {
  const std::string file = "\xFF\xD8"s + kDqt + "\xFF\xFF"s + sof(16, 8) + seg(0xDD, "\x00\x01"s) + kDht + kSos +
                           "\x0F\xFF\x00\xFF\xD0\x0F\xFF\xFF\xFF\xD9"s;
  images::Result r = images::check(file, "image/jpeg", kCap);
  CHECK_MESSAGE(r.ok, r.reason);
  CHECK(r.width == 16);
  CHECK(r.height == 8);
  // A huge SOF hidden after a scan is still found: the walk goes on to EOI.
  const std::string later =
      "\xFF\xD8"s + kDqt + sof(8, 8) + kDht + kSos + "\x0F\xFF\x00"s + sof(30000, 30000) + kSos + "\x0F"s + "\xFF\xD9"s;
  check_rejected(images::check(later, "image/jpeg", kCap),
                 "image: 30000 x 30000 pixels (900000000) is above the policy's 50000000");
}

TEST_CASE("GIF: logical screen and each frame are checked; offsets grow the canvas") {
  images::Result r = images::check(gif(1, 1, gif_frame(0, 0, 1, 1)), "image/gif", kCap);
  CHECK(r.ok);
  CHECK(r.width == 1);
  CHECK(r.frames == 1);

  check_rejected(images::check(gif(65535, 65535, gif_frame(0, 0, 1, 1)), "image/gif", kCap),
                 "image: 65535 x 65535 pixels (4294836225) is above the policy's 50000000");
  images::Result f = images::check(gif(1, 1, gif_frame(0, 0, 1, 1) + gif_frame(0, 0, 60000, 60000)), "image/gif", kCap);
  check_rejected(f, "image: GIF frame 2 at byte 50: 60000 x 60000 pixels (3600000000) is above the policy's 50000000");
  CHECK(f.frames == 2);
  check_rejected(images::check(gif(10, 10, gif_frame(60000, 60000, 1000, 1000)), "image/gif", kCap),
                 "image: 61000 x 61000 pixels (3721000000) is above the policy's 50000000");
  // A 0 x 0 screen takes its size from the frames.
  r = images::check(gif(0, 0, gif_frame(0, 0, 300, 200)), "image/gif", kCap);
  CHECK(r.ok);
  CHECK(r.width == 300);
  CHECK(r.height == 200);
}

TEST_CASE("GIF animation bomb: frames x canvas above 8 x the cap is rejected, at 8 x accepted") {
  std::string frames;
  for (int i = 0; i < 100; ++i) frames += gif_frame(0, 0, 1, 1);
  images::Result ok = images::check(gif(2000, 2000, frames), "image/gif", kCap);
  CHECK(ok.ok);
  CHECK(ok.frames == 100);
  images::Result bomb = images::check(gif(2000, 2000, frames + gif_frame(0, 0, 1, 1)), "image/gif", kCap);
  check_rejected(bomb,
                 "image: 101 frames of 2000 x 2000 pixels (404000000 in all) are above 8 x the policy's "
                 "50000000 (400000000)");
  CHECK(bomb.frames == 101);
  // The budget saturates instead of wrapping.
  CHECK(images::check(gif(2000, 2000, frames), "image/gif", UINT64_MAX).ok);
}

TEST_CASE("GIF block walk: extensions, local colour tables, the trailer required, unknown blocks refused") {
  const std::string local = "GIF87a"s + le16(2) + le16(2) + "\x00\x00\x00"s + "\x2C"s + le16(0) + le16(0) + le16(1) +
                            le16(1) + "\x81"s + std::string(12, '\x7F') + kLzw1px + "\x3B"s;
  CHECK(images::check(local, "image/gif", kCap).ok);
  check_rejected(images::check(gif(4, 4, gif_frame(0, 0, 4, 4)).substr(0, 42) + "\x00\x3B"s, "image/gif", kCap),
                 "image: GIF: block 0x00 at byte 42 is not an extension (0x21), image (0x2C) or trailer (0x3B)");
  check_rejected(images::check(gif(4, 4, ""), "image/gif", kCap), "image: GIF: no image before the trailer at byte 19");
  check_rejected(images::check("GIF90a" + std::string(20, '\0'), "image/gif", kCap),
                 "image: GIF: no GIF87a or GIF89a header at byte 0");
}

TEST_CASE("every truncation of a valid file is rejected with a reason, never read past") {
  const std::string apng = kSig + ihdr(4, 4) + actl(2) + fctl(0, 4, 4) + kIdat + fctl(1, 2, 2, 2, 2) + kIend;
  const std::string exif_jpeg = jpeg(8, 8, seg(0xE1, "Exif\0\0"s + jpeg(16, 16)));
  const struct {
    std::string type, file;
  } files[] = {{"image/png", apng}, {"image/jpeg", exif_jpeg}, {"image/gif", gif(4, 4, gif_frame(0, 0, 4, 4))}};
  for (const auto& f : files) {
    REQUIRE(images::check(f.file, f.type, kCap).ok);
    for (size_t n = 0; n < f.file.size(); ++n) {
      CAPTURE(f.type);
      CAPTURE(n);
      // A copy of the prefix alone, so a read past it is a read past an allocation (ASan).
      const std::string prefix = f.file.substr(0, n);
      images::Result r = images::check(prefix, f.type, kCap);
      CHECK_FALSE(r.ok);
      CHECK(r.reason.rfind("image: ", 0) == 0);
    }
  }
}

TEST_CASE("media types other than PNG, JPEG and GIF are not looked at") {
  for (const char* type : {"text/plain", "application/pdf", "image/svg+xml", "image/webp", ""}) {
    images::Result r = images::check(png(100000, 100000), type, kCap);
    CHECK(r.ok);
    CHECK(r.reason == "");
    CHECK(r.frames == 0);
  }
}

// The corpus the lead also runs through Gate::check: one file per case,
// cases.json saying the verdict and part of the reason.
TEST_CASE("corpus tests/gate_corpus/images: every case in cases.json has its verdict and reason") {
  const std::filesystem::path dir = std::filesystem::path(unit::source_dir()) / "tests/gate_corpus/images";
  std::ifstream manifest(dir / "cases.json");
  REQUIRE_MESSAGE(manifest.good(), "cannot open " << (dir / "cases.json"));
  const nlohmann::json cases = nlohmann::json::parse(manifest, nullptr, /*allow_exceptions=*/false);
  REQUIRE(cases.is_array());
  CHECK(cases.size() >= 30);

  std::set<std::string> listed;
  size_t accepted = 0, rejected = 0;
  for (const nlohmann::json& c : cases) {
    const std::string file = c.value("file", "");
    const std::string expect = c.value("expect", "");
    const std::string reason_part = c.value("reason_contains", "");
    CAPTURE(file);
    REQUIRE((expect == "accepted" || expect == "rejected"));
    CHECK_FALSE(c.value("reader", "").empty());
    CHECK_FALSE(c.value("source", "").empty());
    CHECK(listed.insert(file).second);

    std::ifstream in(dir / file, std::ios::binary);
    REQUIRE_MESSAGE(in.good(), "cannot open " << (dir / file));
    const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const std::string type = artifacts::types::media_type_for_extension(file);
    REQUIRE((type == "image/png" || type == "image/jpeg" || type == "image/gif"));

    images::Result r = images::check(bytes, type, c.value("pixels_max", kCap));
    if (expect == "accepted") {
      ++accepted;
      CHECK_MESSAGE(r.ok, r.reason);
      CHECK(r.frames >= 1);
    } else {
      ++rejected;
      CHECK_FALSE(r.ok);
      CHECK_FALSE(reason_part.empty());
      CHECK_MESSAGE(r.reason.find(reason_part) != std::string::npos, "reason: " << r.reason);
    }
  }
  CHECK(accepted >= 5);
  CHECK(rejected >= 20);
  // No file in the directory is left out of the manifest.
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name == "cases.json" || name == "generate.py") continue;
    CHECK_MESSAGE(listed.count(name) == 1, name << " is not in cases.json");
  }
}
