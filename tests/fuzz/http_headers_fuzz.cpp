// The HTTP transport's header text (server/transport/http_headers.cpp):
// decode_header_value takes plain visible ASCII as it is and "=?base64?..?="
// as its bytes, refuses anything else, and decodes what base64 encoding
// wrote; quoted() is valid UTF-8, within its bound, serialisable as JSON, and
// leaves short valid text as it is.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/transport/http_headers.h"
#include "server/util/base64.h"
#include "server/util/text.h"
#include "tests/fuzz/check.h"

namespace http = transport::http;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string v(reinterpret_cast<const char*>(data), size);
  bool visible = true;
  for (unsigned char c : v) visible = visible && (c == '\t' || (c >= 0x20 && c <= 0x7e));
  auto decoded = http::decode_header_value(v);
  if (!visible) FUZZ_CHECK(!decoded);
  const bool encoded = v.size() >= 11 && v.starts_with("=?base64?") && v.ends_with("?=");
  if (visible && !encoded) FUZZ_CHECK(decoded && *decoded == v);
  if (visible && encoded) FUZZ_CHECK(decoded == util::base64_decode(std::string_view(v).substr(9, v.size() - 11)));
  // Any bytes a client encodes come back.
  FUZZ_CHECK(http::decode_header_value("=?base64?" + util::base64_encode(v) + "?=") == v);

  const size_t max = size == 0 ? 0 : data[0] % 64;
  const std::string q = http::quoted(v, max);
  FUZZ_CHECK(util::is_valid_utf8(q));
  FUZZ_CHECK(q.size() <= 3 * max + 3);  // a replaced byte is 3; "..." when cut
  if (v.size() <= max && util::is_valid_utf8(v)) FUZZ_CHECK(q == v);
  if (v.size() > max) FUZZ_CHECK(q.ends_with("..."));
  (void)nlohmann::json(q).dump();  // strict: throws on invalid UTF-8
  return 0;
}
