// Header value decoding, quoting and the header checks of the HTTP endpoint (server/transport/http_server.h).
#include "server/transport/http_headers.h"

#include <arpa/inet.h>

#include "server/util/base64.h"
#include "server/util/text.h"

namespace transport::http {
namespace {

std::string clip(std::string_view s) { return quoted(s, 100); }

}  // namespace

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

SessionIdCheck check_session_id(const std::optional<std::string>& header) {
  if (!header) return SessionIdCheck::kMissing;
  const std::string& id = *header;
  const bool minted = id.size() == 32 && id.find_first_not_of("0123456789abcdef") == std::string::npos;
  return minted ? SessionIdCheck::kWellFormed : SessionIdCheck::kMalformed;
}

std::optional<std::string> mirror_mismatch(const MirrorHeaders& h, const MirrorBody& b) {
  // What intermediaries route on must be what the body says, or the two
  // could be made to disagree.
  auto mismatch = [](const std::string& message) { return util::to_valid_utf8(message); };
  if (!h.method) return mismatch("the Mcp-Method header is required");
  if (*h.method != b.method)
    return mismatch("Mcp-Method header value '" + clip(*h.method) + "' does not match body value '" + clip(b.method) +
                    "'");
  if (!h.protocol_version) return mismatch("the MCP-Protocol-Version header is required");
  const nlohmann::json& version_b = b.protocol_version;
  if (!version_b.is_string() || version_b.get_ref<const std::string&>() != *h.protocol_version)
    return mismatch("MCP-Protocol-Version header value '" + clip(*h.protocol_version) + "' does not match body value " +
                    clip(version_b.is_null()
                             ? std::string("(absent)")
                             : version_b.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)) +
                    " of _meta[\"" + clip(b.version_key) + "\"]");
  // SEP-2243 names tools/call, resources/read and prompts/get; the tasks
  // extension adds its methods with their taskId (routing to the task's server).
  const bool names_task = b.method == "tasks/get" || b.method == "tasks/update" || b.method == "tasks/cancel";
  if (b.method == "tools/call" || b.method == "resources/read" || b.method == "prompts/get" || names_task) {
    const std::string field = b.method == "resources/read" ? "uri" : names_task ? "taskId" : "name";
    if (!h.name) return mismatch("the Mcp-Name header is required for " + std::string(b.method));
    auto name_h = decode_header_value(*h.name);
    if (!name_h) return mismatch("the Mcp-Name header value is malformed");
    auto body = b.params.is_object() ? b.params.find(field) : b.params.end();
    if (!b.params.is_object() || body == b.params.end() || !body->is_string() || *name_h != body->get<std::string>())
      return mismatch("Mcp-Name header value '" + clip(*name_h) + "' does not match body value params." + field);
  }
  return std::nullopt;
}

bool is_loopback(const std::string& host) {
  if (host == "localhost") return true;
  in_addr a4{};
  if (::inet_pton(AF_INET, host.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  in6_addr a6{};
  if (::inet_pton(AF_INET6, host.c_str(), &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
  return false;
}

}  // namespace transport::http
