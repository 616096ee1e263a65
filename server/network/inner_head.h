// A request a job sends inside an intercepted connection (its TLS ended by
// the proxy): parsed in the parser helper (parse_inner_request, Boost.Beast's
// parser), the way it goes on decided there from the job's bytes alone, and
// checked again by the server before anything is sent. Every request on the
// connection passes here.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "server/network/address.h"

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

}  // namespace network
