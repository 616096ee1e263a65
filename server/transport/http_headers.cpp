// Header value decoding and quoting for server/transport/http.cpp.
#include "server/transport/http_headers.h"

#include "server/util/base64.h"
#include "server/util/text.h"

namespace transport::http {

std::optional<std::string> decode_header_value(const std::string& v) {
  for (unsigned char c : v)
    if ((c < 0x20 && c != '\t') || c > 0x7e) return std::nullopt;
  constexpr std::string_view kPrefix = "=?base64?", kSuffix = "?=";
  if (v.size() >= kPrefix.size() + kSuffix.size() && v.starts_with(kPrefix) && v.ends_with(kSuffix))
    return util::base64_decode(std::string_view(v).substr(kPrefix.size(), v.size() - kPrefix.size() - kSuffix.size()));
  return v;
}

std::string quoted(std::string_view s, size_t max) {
  std::string out = util::to_valid_utf8(util::utf8_prefix(s, max));
  return s.size() > max ? out + "..." : out;
}

}  // namespace transport::http
