// PDF artifacts judged by a PDF parser (libqpdf), on the trusted side, in any
// server thread. Never throws: every qpdf exception becomes a rejection.
// Stops what a reader runs or opens on its own: JavaScript, /Launch, form
// submission and import, links to other files (/GoToR, /GoToE), automatic
// actions (/OpenAction, /AA) other than navigation, embedded files, XFA, rich
// media (/RichMedia, /Movie, /Sound, /Screen, /3D, /Rendition), non-web /URI
// targets (file:, UNC paths), object bodies a reader rebuilding the
// cross-reference table would see but qpdf does not, and decompression bombs in
// the streams qpdf itself decodes. Does NOT judge content streams, fonts or
// images (a font or JBIG2 parser exploit in the reader is out of its reach),
// nor what a plain http(s) link points at.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace artifacts::pdf {

// The gate's own per-file cap; larger input is rejected unread.
inline constexpr size_t kMaxInputBytes = size_t{16} << 20;

enum class Mode {
  kReject,  // refuse a document holding anything listed above
  kStrip,   // remove it, rewrite the document, and check the rewrite with kReject
};

struct Result {
  // false: rejected; reason says why (each finding names its object). output is then empty.
  bool ok = false;
  std::string reason;  // "PDF: ..."; empty when ok and nothing was removed
  // ok: the bytes to deliver. Byte-for-byte the input unless something was
  // removed (kStrip), then qpdf's deterministic rewrite (static /ID, unencrypted).
  std::string output;
  size_t removed = 0;  // kStrip: keys, entries and objects removed
};

Result check(std::string_view bytes, Mode mode);

}  // namespace artifacts::pdf
