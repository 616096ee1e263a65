// Requests inside an intercepted connection (inner_head.h).
#include "server/network/inner_head.h"

#include <cctype>
#include <sstream>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "server/network/head.h"
#include "server/network/request_rules.h"

namespace network {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;

InnerRequest refused(int status, std::string reason) {
  InnerRequest r;
  r.status = status;
  r.reason = std::move(reason);
  return r;
}

bool same_nocase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

}  // namespace

InnerRequest parse_inner_request(std::string_view bytes, const Authority& dest, std::string_view credential_header) {
  http::request_parser<http::empty_body> parser;
  parser.header_limit(kHeadMaxBytes);
  parser.eager(false);
  beast::error_code ec;
  parser.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
  if (ec || !parser.is_header_done())
    return refused(400, "malformed request: " + (ec ? ec.message() : std::string("incomplete head")));
  auto& req = parser.get();
  if (req.version() != 11 && req.version() != 10) return refused(400, "only HTTP/1.0 and HTTP/1.1 requests");
  if (req.method() == http::verb::connect) return refused(400, "CONNECT inside a connection to " + dest.host);
  const std::string method(req.method_string());
  if (method.empty() || method.size() > 16 ||
      method.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ") != std::string::npos)
    return refused(400, "a method is 1-16 upper-case letters");
  auto target = normalise_target(std::string_view(req.target().data(), req.target().size()));
  if (!target) return refused(400, target.error().message);
  // One Host, naming the host the connection is to (SNI was checked against it too).
  size_t hosts = 0;
  for (auto& f : req) hosts += f.name() == http::field::host ? 1 : 0;
  if (hosts != 1) return refused(400, "a request needs exactly one Host header");
  const std::string host(req[http::field::host]);
  auto named = parse_authority(host, dest.port);
  if (!named || named->host != dest.host || named->port != dest.port)
    return refused(403, "Host " + (named ? named->host : std::string("(malformed)")) +
                            " is not the host this connection was opened to (" + dest.host + ")");
  if (req.find(http::field::upgrade) != req.end()) return refused(400, "protocol upgrades are not relayed here");
  if (req.find(http::field::transfer_encoding) != req.end())
    return refused(411, "chunked request bodies are not relayed here: send Content-Length");
  InnerRequest r;
  if (auto len = parser.content_length()) r.body_bytes = *len;
  r.close = !req.keep_alive();
  r.method = method;
  r.path = target->path;
  r.query = target->query;
  req.target(r.path + r.query);
  for (auto f : {http::field::connection, http::field::keep_alive, http::field::proxy_authorization,
                 http::field::proxy_connection, http::field::te, http::field::trailer, http::field::expect})
    req.erase(f);
  if (!credential_header.empty()) {
    // Every spelling of the credential's header: the server sets the one value.
    for (auto it = req.begin(); it != req.end();)
      it = same_nocase(std::string_view(it->name_string().data(), it->name_string().size()), credential_header)
               ? req.erase(it)
               : std::next(it);
  }
  req.version(11);
  req.set(http::field::connection, "keep-alive");
  std::ostringstream head;
  head << req.base();
  r.forward = head.str();
  r.ok = true;
  return r;
}

nlohmann::json to_json(const InnerRequest& r) {
  return {{"ok", r.ok},     {"status", r.status}, {"reason", r.reason},         {"method", r.method},
          {"path", r.path}, {"query", r.query},   {"body_bytes", r.body_bytes}, {"close", r.close}};
}

util::Result<InnerRequest> inner_from_json(const nlohmann::json& j, std::string forward, const Authority& dest,
                                           std::string_view credential_header) {
  auto bad = [](const std::string& why) {
    return util::make_error(util::ErrorCode::kInvalidArgument, "inner request: " + why);
  };
  if (!j.is_object() || !j.contains("ok") || !j["ok"].is_boolean()) return bad("no ok");
  InnerRequest r;
  if (!j["ok"].get<bool>()) {
    const int status = j.value("status", 0);
    if (status != 400 && status != 403 && status != 411) return bad("refusal status");
    std::string reason = j.value("reason", "");
    reason = reason.substr(0, 400);
    for (char& c : reason)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    r.status = status;
    r.reason = reason.empty() ? "malformed request" : reason;
    return r;
  }
  for (const char* key : {"method", "path", "query"})
    if (!j.contains(key) || !j[key].is_string()) return bad(std::string("no string ") + key);
  if (!j.contains("body_bytes") || !j["body_bytes"].is_number_unsigned()) return bad("body_bytes");
  if (!j.contains("close") || !j["close"].is_boolean()) return bad("close");
  r.method = j["method"].get<std::string>();
  r.path = j["path"].get<std::string>();
  r.query = j["query"].get<std::string>();
  r.body_bytes = j["body_bytes"].get<uint64_t>();
  r.close = j["close"].get<bool>();
  if (r.method.empty() || r.method.size() > 16 ||
      r.method.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ") != std::string::npos)
    return bad("method");
  // The path as the server's own normalisation has it.
  auto again = normalise_target(r.path + r.query);
  if (!again || again->path != r.path || again->query != r.query) return bad("target not in normal form");
  if (forward.size() > kForwardMaxBytes) return bad("forwarded head too long");
  const size_t end = forward.find("\r\n\r\n");
  if (end == std::string::npos || end + 4 != forward.size()) return bad("forwarded head does not end once, at its end");
  const std::string line = r.method + " " + r.path + r.query + " HTTP/1.1\r\n";
  if (forward.compare(0, line.size(), line) != 0) return bad("forwarded request line");
  // Header lines: one Host naming dest; no Transfer-Encoding; not the credential's.
  size_t hosts = 0;
  for (size_t at = line.size(); at < end;) {
    const size_t eol = forward.find("\r\n", at);
    const std::string field = forward.substr(at, eol - at);
    at = eol + 2;
    const size_t colon = field.find(':');
    if (colon == std::string::npos || colon == 0) return bad("forwarded header line");
    const std::string_view name(field.data(), colon);
    if (same_nocase(name, "host")) {
      ++hosts;
      auto named =
          parse_authority(std::string_view(field).substr(colon + 1).substr(field[colon + 1] == ' ' ? 1 : 0), dest.port);
      if (!named || named->host != dest.host || named->port != dest.port) return bad("forwarded Host");
    }
    if (same_nocase(name, "transfer-encoding")) return bad("forwarded Transfer-Encoding");
    if (!credential_header.empty() && same_nocase(name, credential_header)) return bad("forwarded credential header");
  }
  if (hosts != 1) return bad("forwarded Host");
  r.forward = std::move(forward);
  r.ok = true;
  return r;
}

}  // namespace network
