// UTF-8 validation and repair, errno and signal names.
#include "server/util/text.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string.h>

namespace util {
namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when invalid.
size_t valid_sequence_length(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // UTF-16 surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  return n;
}

}  // namespace

size_t utf8_sequence_length(std::string_view bytes, size_t i) { return valid_sequence_length(bytes, i); }

bool is_valid_utf8(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    size_t n = valid_sequence_length(bytes, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string to_valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    size_t n = valid_sequence_length(bytes, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string_view utf8_prefix(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t end = max_bytes;
  // Step back over continuation bytes so a multi-byte sequence is never split.
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end);
}

std::string errno_name(int err) {
  const char* name = ::strerrorname_np(err);
  return name ? name : std::to_string(err);
}

std::string call_error(std::string_view call, std::string_view arg, int err) {
  std::string s(call);
  s += "(\"";
  s += arg;
  s += "\"): ";
  s += errno_name(err);
  s += " (";
  s += std::strerror(err);
  s += ")";
  return s;
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

const char* file_name_problem(std::string_view name) {
  constexpr size_t kMaxBytes = 255;  // NAME_MAX
  if (name.empty()) return "must not be empty";
  if (name.size() > kMaxBytes) return "longer than 255 bytes";
  if (name == "." || name == "..") return "\".\" and \"..\" are not file names";
  if (name.find('/') != std::string_view::npos) return "must be a plain file name without \"/\"";
  for (unsigned char c : name)
    if (c < 0x20 || c == 0x7F) return "must not contain NUL or control characters";
  if (!is_valid_utf8(name)) return "must be valid UTF-8";
  // C1 controls (U+0080-U+009F, C2 80-9F) and bidirectional overrides (U+200E/F,
  // U+202A-E, U+2066-9) make a name display as something it is not.
  auto b = [&](size_t k) { return static_cast<unsigned char>(name[k]); };
  for (size_t i = 0; i + 1 < name.size(); ++i) {
    if (b(i) == 0xC2 && b(i + 1) >= 0x80 && b(i + 1) <= 0x9F) return "must not contain control characters";
    if (i + 2 < name.size() && b(i) == 0xE2 &&
        ((b(i + 1) == 0x80 && (b(i + 2) == 0x8E || b(i + 2) == 0x8F || (b(i + 2) >= 0xAA && b(i + 2) <= 0xAE))) ||
         (b(i + 1) == 0x81 && b(i + 2) >= 0xA6 && b(i + 2) <= 0xA9)))
      return "must not contain bidirectional control characters";
  }
  return nullptr;
}

const char* input_path_problem(std::string_view name) {
  constexpr size_t kMaxParts = 8;
  size_t parts = 0;
  for (size_t start = 0;;) {
    const size_t slash = name.find('/', start);
    const std::string_view part = name.substr(start, slash == std::string_view::npos ? slash : slash - start);
    if (const char* why = file_name_problem(part)) return why;
    if (++parts > kMaxParts) return "has more than eight parts";
    if (slash == std::string_view::npos) return nullptr;
    start = slash + 1;
  }
}

namespace {

// A code point that would break or disguise a log line: C1 controls, the
// line and paragraph separators, bidirectional marks, embeddings, overrides
// and isolates.
bool disguises_line(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 || cp == 0x200E || cp == 0x200F ||
         (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

uint32_t decode(std::string_view s, size_t i, size_t n) {
  auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[i + k])); };
  if (n == 2) return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
  if (n == 3) return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
  return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
}

}  // namespace

std::string escape_for_log(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    const size_t n = c < 0x80 ? 0 : valid_sequence_length(text, i);
    if (n > 1) {
      const uint32_t cp = decode(text, i, n);
      if (disguises_line(cp)) {
        char buf[16];
        std::snprintf(buf, sizeof buf, "\\u{%04x}", static_cast<unsigned>(cp));
        out += buf;
      } else {
        out.append(text.substr(i, n));
      }
      i += n;
      continue;
    }
    if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
    ++i;
  }
  return out;
}

}  // namespace util
