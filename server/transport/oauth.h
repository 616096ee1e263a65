// The OAuth 2.1 resource server of the HTTP transport (MCP authorization;
// RFC 9728 metadata, RFC 8707 audience, RFC 9068 JWT access tokens): the
// configuration, the verifier of access tokens against the issuer's JWKS,
// and the texts of the metadata and of a 401/403 challenge. Server threads.
// A token is only ever verified here: it is never forwarded anywhere.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/transport/jwks.h"
#include "server/util/result.h"

namespace transport::oauth {

struct Config {
  std::string issuer;                              // the exact "iss" of every token
  std::string jwks_uri;                            // the issuer's keys (https, or http on loopback)
  std::string resource;                            // this server's canonical URI (the MCP endpoint)
  std::string audience;                            // the "aud" a token must name; default: resource
  std::vector<std::string> authorization_servers;  // for the metadata; default: {issuer}
  std::string tenant_claim = "sub";
  std::vector<std::string> algorithms{"RS256", "ES256"};
  std::string run_scope = "throwbox.run";    // run_code, upload_input, workspaces
  std::string read_scope = "throwbox.read";  // tools/list, fetch_artifact, resources/*
  int64_t leeway_s = 60;                     // clock skew allowed on exp and nbf
  int64_t jwks_cache_s = 300;                // keys are fetched again after this
  int64_t jwks_refetch_min_s = 30;           // an unknown kid refetches at most this often
  std::string source;                        // the file it was read from
};

// The --oauth file (JSON); errors name the file and the key.
util::Result<Config> load_config(const std::string& path);
util::Result<Config> parse_config(std::string_view text, const std::string& source);

// Who a valid token speaks for.
struct Identity {
  std::string tenant;   // oauth-<claim>, or oauth-sha256-<hex> for any claim that is not a plain name
  std::string subject;  // "sub", for logs
  bool can_run = false;
};

// The tenant a token's claim names: oauth-<claim> for a plain name (1-57 of
// [a-z0-9_-], not starting "sha256-"), else oauth-sha256-<40 hex digits of
// its sha256>. The two forms never meet, whatever the claim's value.
std::string tenant_of(const std::string& claim);

enum class Failure {
  kMalformed,        // not three base64url parts of JSON
  kAlgorithm,        // "alg" not in the allowlist (none, HS*, ...)
  kUnknownKey,       // no key of the JWKS matches kid and alg
  kKeysUnavailable,  // the JWKS could not be fetched or read
  kSignature,        // cjose refused the signature
  kIssuer,
  kAudience,
  kExpired,
  kNotYetValid,
  kTenant,  // the tenant claim is missing or not a string
  kScope,   // neither the run nor the read scope
};

struct Rejection {
  Failure failure;
  std::string message;  // for the challenge's error_description and the log
};

// The body of a JWKS fetch, or why not.
using Fetch = std::function<util::Result<std::string>(const std::string& uri)>;
// GET over https (certificates verified against the system store), or http
// to a loopback host; 5 s to connect and to read, a 1 MiB body cap.
util::Result<std::string> http_fetch(const std::string& uri);

class Verifier {
 public:
  explicit Verifier(Config config, Fetch fetch = http_fetch);
  std::variant<Identity, Rejection> verify(std::string_view token, int64_t now_s);
  const Config& config() const { return config_; }

 private:
  // The key for (kid, alg), fetching the JWKS when it is stale or the kid is new.
  std::variant<Jwk, Rejection> key_for(const std::string& kid, const std::string& alg, int64_t now_s);
  Config config_;
  Fetch fetch_;
  // mu_ guards the members below; a JWKS fetch (up to 10 s) runs without it,
  // so tokens whose key is in hand never wait for the issuer.
  std::mutex mu_;
  std::condition_variable fetched_;  // a fetch ended (fetching_ went false)
  bool fetching_ = false;
  std::vector<Jwk> keys_;
  std::optional<int64_t> fetched_at_s_;  // when keys_ was last read
  std::optional<int64_t> attempted_at_s_;
};

// Protected Resource Metadata (RFC 9728 section 2).
nlohmann::json resource_metadata(const Config& config);
// Its URL: the resource's origin + /.well-known/oauth-protected-resource + its path (section 3.1).
std::string resource_metadata_url(const Config& config);
// The metadata paths this server answers (with and without the resource's path).
std::vector<std::string> resource_metadata_paths(const Config& config);
// WWW-Authenticate for a 401 (error "" when no token was sent) or a 403
// (error "insufficient_scope", scope the one needed).
std::string challenge(const Config& config, std::string_view error, std::string_view description,
                      std::string_view scope);

}  // namespace transport::oauth
