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

}  // namespace network
