// Proxy request heads (head.h): parse_head runs in the parser helper on a
// job's bytes; head_from_json runs in the server on the helper's answer.
#include "server/network/head.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace network {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;

constexpr size_t kQuotedTargetMax = 80;  // of a malformed target, in a reason
constexpr size_t kReasonMax = 400;

bool starts_with_nocase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  return true;
}

std::string quote_target(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, kQuotedTargetMax)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return "\"" + out + (s.size() > kQuotedTargetMax ? "...\"" : "\"");
}

Head malformed(std::string reason) {
  Head h;
  h.kind = Head::Kind::kMalformed;
  h.reason = std::move(reason);
  return h;
}

// What Host says for an authority: a v6 literal bracketed, the port only when not 80.
std::string host_header(const Authority& a) {
  if (a.port != 80) return a.text();
  return a.literal && a.host.find(':') != std::string::npos ? "[" + a.host + "]" : a.host;
}

}  // namespace

Head parse_head(std::string_view bytes) {
  http::request_parser<http::empty_body> parser;
  parser.header_limit(kHeadMaxBytes);
  parser.eager(false);
  beast::error_code ec;
  parser.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
  if (ec || !parser.is_header_done())
    return malformed("malformed request: " + (ec ? ec.message() : std::string("incomplete head")));
  auto& req = parser.get();
  const std::string target(req.target());
  Head h;
  if (req.method() == http::verb::connect) {
    auto dest = parse_authority(target, std::nullopt);
    if (!dest) return malformed("CONNECT " + quote_target(target) + ": " + dest.error().message);
    h.kind = Head::Kind::kConnect;
    h.dest = *dest;
    return h;
  }
  if (starts_with_nocase(target, "https://"))
    return malformed("https:// URLs go through CONNECT (set HTTPS_PROXY, not HTTP_PROXY, for them)");
  if (!starts_with_nocase(target, "http://"))
    return malformed("not a proxy request: send CONNECT host:port, or an absolute http:// URL");
  const std::string rest = target.substr(7);
  const size_t end_of_authority = rest.find_first_of("/?#");
  std::string origin = end_of_authority == std::string::npos ? "/" : rest.substr(end_of_authority);
  if (size_t hash = origin.find('#'); hash != std::string::npos) origin.resize(hash);  // never sent
  if (origin.empty() || origin[0] != '/') origin = "/" + origin;
  auto dest = parse_authority(rest.substr(0, end_of_authority), 80);
  if (!dest) return malformed(quote_target(target) + ": " + dest.error().message);
  h.kind = Head::Kind::kAbsolute;
  h.dest = *dest;
  // The head in origin form, Host the checked authority, proxy headers
  // dropped, one request only.
  req.target(origin);
  req.set(http::field::host, host_header(h.dest));
  req.erase(http::field::proxy_authorization);
  req.erase("Proxy-Connection");
  req.erase(http::field::keep_alive);
  req.set(http::field::connection, "close");
  std::ostringstream head;
  head << req.base();
  h.forward = head.str();
  return h;
}

nlohmann::json to_json(const Head& h) {
  const char* kind = h.kind == Head::Kind::kConnect    ? "connect"
                     : h.kind == Head::Kind::kAbsolute ? "absolute"
                                                       : "malformed";
  return {{"kind", kind}, {"reason", h.reason}, {"authority", h.kind == Head::Kind::kMalformed ? "" : h.dest.text()}};
}

util::Result<Head> head_from_json(const nlohmann::json& j, std::string forward) {
  auto bad = [](const std::string& why) { return util::make_error(util::ErrorCode::kInvalidArgument, "head: " + why); };
  for (const char* key : {"kind", "reason", "authority"})
    if (!j.contains(key) || !j[key].is_string()) return bad(std::string("no string ") + key);
  const std::string kind = j["kind"].get<std::string>();
  Head h;
  if (kind == "malformed") {
    h.kind = Head::Kind::kMalformed;
    std::string reason = j["reason"].get<std::string>().substr(0, kReasonMax);
    for (char& c : reason)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    h.reason = reason.empty() ? "malformed request" : reason;
    return h;
  }
  if (kind != "connect" && kind != "absolute") return bad("unknown kind");
  // The destination as the server's own parser reads it: no port left to the helper.
  auto dest = parse_authority(j["authority"].get<std::string>(), std::nullopt);
  if (!dest) return bad("authority: " + dest.error().message);
  h.dest = *dest;
  if (kind == "connect") {
    h.kind = Head::Kind::kConnect;
    return h;
  }
  h.kind = Head::Kind::kAbsolute;
  h.forward = std::move(forward);
  // One request for that authority: a request line, a Host header naming it,
  // the head ending once, within the size a head may have.
  if (h.forward.size() > kForwardMaxBytes) return bad("forwarded head too long");
  const size_t end = h.forward.find("\r\n\r\n");
  if (end == std::string::npos || end + 4 != h.forward.size())
    return bad("forwarded head does not end once, at its end");
  const size_t line_end = h.forward.find("\r\n");
  const std::string line = h.forward.substr(0, line_end);
  const size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string::npos || sp2 <= sp1 + 1 || line[sp1 + 1] != '/' ||
      (line.substr(sp2) != " HTTP/1.1" && line.substr(sp2) != " HTTP/1.0"))
    return bad("forwarded request line is not an origin-form HTTP/1.x one");
  if (h.forward.find("\r\nHost: " + host_header(h.dest) + "\r\n") == std::string::npos)
    return bad("forwarded head's Host");
  return h;
}

}  // namespace network
