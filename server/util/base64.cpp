// Strict base64 codec.
#include "server/util/base64.h"

namespace util {
namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
int value_of(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}
}  // namespace

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  auto byte = [&](size_t k) { return static_cast<unsigned>(static_cast<unsigned char>(in[k])); };
  for (; i + 2 < in.size(); i += 3) {
    unsigned v = byte(i) << 16 | byte(i + 1) << 8 | byte(i + 2);
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
    out += kAlphabet[v >> 6 & 63];
    out += kAlphabet[v & 63];
  }
  if (i + 1 == in.size()) {
    unsigned v = byte(i) << 16;
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    unsigned v = byte(i) << 16 | byte(i + 1) << 8;
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
    out += kAlphabet[v >> 6 & 63];
    out += '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view in) {
  if (in.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    bool last = i + 4 == in.size();
    int a = value_of(in[i]), b = value_of(in[i + 1]);
    if (a < 0 || b < 0) return std::nullopt;
    char c3 = in[i + 2], c4 = in[i + 3];
    if (last && c3 == '=' && c4 == '=') {
      if (b & 15) return std::nullopt;  // non-canonical trailing bits
      out += static_cast<char>(a << 2 | b >> 4);
      break;
    }
    int c = value_of(c3);
    if (c < 0) return std::nullopt;
    if (last && c4 == '=') {
      if (c & 3) return std::nullopt;
      out += static_cast<char>(a << 2 | b >> 4);
      out += static_cast<char>((b & 15) << 4 | c >> 2);
      break;
    }
    int d = value_of(c4);
    if (d < 0) return std::nullopt;
    out += static_cast<char>(a << 2 | b >> 4);
    out += static_cast<char>((b & 15) << 4 | c >> 2);
    out += static_cast<char>((c & 3) << 6 | d);
  }
  return out;
}

}  // namespace util
