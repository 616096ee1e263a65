// Header text of the HTTP transport: decoding a client's encoded header value
// and quoting a header in an answer. Pure; any server thread.
// tests/fuzz/http_headers_fuzz checks them.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace transport::http {

// An Mcp-Name value: plain visible ASCII, or "=?base64?...?=" for anything
// else (2026-07-28 transports/streamable-http, value encoding); nullopt when
// malformed.
std::optional<std::string> decode_header_value(const std::string& v);

// A client's text (a header value) quoted in an answer: at most max bytes,
// cut on a character boundary, invalid UTF-8 replaced, so the answer can be
// serialised (nlohmann::json throws on invalid UTF-8) and shows what came.
std::string quoted(std::string_view s, size_t max);

}  // namespace transport::http
