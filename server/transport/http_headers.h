// Header text of the HTTP transport: decoding a client's encoded header value,
// quoting a header in an answer, the Mcp-Session-Id check and the 2026-07-28
// mirroring of the body in headers. Pure, on plain strings; any server thread.
// tests/fuzz/http_headers_fuzz and http_checks_fuzz check them.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace transport::http {

// An Mcp-Name value: plain visible ASCII, or "=?base64?...?=" for anything
// else (2026-07-28 transports/streamable-http, value encoding); nullopt when
// malformed.
std::optional<std::string> decode_header_value(const std::string& v);

// A client's text (a header value) quoted in an answer: at most max bytes,
// cut on a character boundary, invalid UTF-8 replaced, so the answer can be
// serialised (nlohmann::json throws on invalid UTF-8) and shows what came.
std::string quoted(std::string_view s, size_t max);

// An Mcp-Session-Id header (nullopt: absent) before any lookup: absent (400),
// not of the shape this server mints, util::random_id's 32 lowercase hex
// digits (404, as an unknown one), or worth looking up.
enum class SessionIdCheck { kMissing, kMalformed, kWellFormed };
SessionIdCheck check_session_id(const std::optional<std::string>& header);

// "localhost", 127.0.0.0/8 or ::1: an address only this host reaches.
bool is_loopback(const std::string& host);

// What a 2026-07-28 POST's headers say (nullopt: absent).
struct MirrorHeaders {
  std::optional<std::string> method;            // Mcp-Method
  std::optional<std::string> protocol_version;  // MCP-Protocol-Version
  std::optional<std::string> name;              // Mcp-Name as sent (maybe =?base64?...?=)
};
// What its body says: the method, the params, and the _meta protocol version
// (protocol::mcp::request_version: null when absent) named version_key.
struct MirrorBody {
  std::string_view method;
  const nlohmann::json& params;
  const nlohmann::json& protocol_version;
  std::string_view version_key;
};
// Why the headers fail to mirror the body (2026-07-28 transports/streamable-http,
// server validation), the text after "Header mismatch: ": valid UTF-8, at
// most kMirrorMismatchMaxBytes; nullopt when they mirror it.
inline constexpr size_t kMirrorMismatchMaxBytes = 1024;
std::optional<std::string> mirror_mismatch(const MirrorHeaders& headers, const MirrorBody& body);

}  // namespace transport::http
