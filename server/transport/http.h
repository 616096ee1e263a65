// MCP over Streamable HTTP (2025-03-26, 2025-06-18, 2025-11-25) at /mcp, with
// the server's own boundary: loopback by default, bearer tokens (tenant from
// the token, never from the request), Host and Origin allowlists against DNS
// rebinding, caps on body, headers, connections and request time, optional TLS.
#pragma once
#include <string>
#include <vector>

#include "server/protocol/mcp.h"
#include "server/util/result.h"

namespace transport::http {

struct Options {
  std::string host = "127.0.0.1";
  int port = 8765;
  std::string tokens_file;                   // empty: no authentication (loopback only), tenant "local"
  std::string oauth_file;                    // --oauth: JWT access tokens of an OAuth issuer (beside tokens)
  std::string tls_cert, tls_key;             // both or neither
  std::vector<std::string> allowed_origins;  // beyond the defaults for the listen address
  std::vector<std::string> allowed_hosts;    // Host header values beyond the defaults
};

// "HOST:PORT", "[v6]:PORT" or ":PORT".
util::Result<Options> parse_listen(const std::string& text, Options base);

// The files of options read as serve() reads them at start, with nothing
// started (`throwbox policy check --tokens ...`): the tokens file (mode and
// lines), the --oauth settings (the issuer's keys are not fetched), and the
// TLS certificate and key (loaded, and the key matching the certificate).
// One line for each file given, saying what it holds; else the first problem.
util::Result<std::vector<std::string>> check_files(const Options& options);

// Serves until SIGINT or SIGTERM (which the caller blocked in every thread
// before starting any). Prints "throwbox: listening on <url>" on stderr once
// bound. Errors are start-up problems (address, tokens file, TLS files).
util::Status serve(protocol::mcp::ServerContext& ctx, const Options& options);

}  // namespace transport::http
