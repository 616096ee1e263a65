// A request a job sends inside an intercepted connection (its TLS ended by
// the proxy): parsed in the parser helper (parse_inner_request, Boost.Beast's
// parser), the way it goes on decided there from the job's bytes alone, and
// checked again by the server before anything is sent. Every request on the
// connection passes here.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/network/address.h"
#include "server/util/result.h"

namespace network {

struct InnerRequest {
  bool ok = false;
  int status = 400;    // !ok: the status the job is answered with
  std::string reason;  // !ok: one line the job may print
  std::string method;
  std::string path;         // normalised (request_rules.h)
  std::string query;        // with its '?', or ""
  uint64_t body_bytes = 0;  // Content-Length; 0 without one
  bool close = false;       // the job's last request on the connection (Connection: close, HTTP/1.0)
  // The head sent on: origin form with the normalised target, Host the
  // connection's host, hop-by-hop and proxy headers and the credential's
  // header dropped (the server adds it), Connection: keep-alive.
  std::string forward;
};

// `bytes` ends with the head's blank line; `dest` is the host the
// connection was opened to; `credential_header` the header the server will
// set ("" for none).
InnerRequest parse_inner_request(std::string_view bytes, const Authority& dest, std::string_view credential_header);

// The answer's document (the forward head travels beside it as raw bytes).
nlohmann::json to_json(const InnerRequest& request);
// The helper's answer, trusted no further than the server's own checks
// allow: a refusal's status one of 400, 403, 411 and its reason one bounded
// printable line; a request's method a token, its path in normal form, its
// forward head exactly one origin-form HTTP/1.1 request for that path with
// one Host naming dest, no Transfer-Encoding and no credential_header.
util::Result<InnerRequest> inner_from_json(const nlohmann::json& j, std::string forward, const Authority& dest,
                                           std::string_view credential_header);

}  // namespace network
