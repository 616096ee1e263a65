// OAuth resource server: the --oauth file, access-token verification with
// cjose against the issuer's JWKS, the metadata and challenge texts. Server
// threads; the verifier's key cache is behind its own mutex.
#include "server/transport/oauth.h"

#include <cjose/cjose.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>

#include <httplib.h>
#include <spdlog/spdlog.h>

#include "server/transport/auth.h"
#include "server/transport/http_headers.h"
#include "server/util/crypto.h"

namespace transport::oauth {

using nlohmann::json;

namespace {

constexpr size_t kTokenMaxBytes = 16 * 1024;
constexpr size_t kLiteralClaimMax = 57;        // oauth- and 57: a tenant name's 64
constexpr const char* kDigestTag = "sha256-";  // oauth-sha256-<hex>: a digest, never a claim
constexpr size_t kHeaderMaxBytes = 2048;
constexpr size_t kJwksMaxBytes = 1024 * 1024;
constexpr time_t kFetchTimeoutS = 5;
// Asymmetric algorithms accepted (cjose verifies them). HS* is never accepted: the
// verifier holds public keys only, and an HMAC "verified" with a public key
// as its secret is the classic algorithm-confusion forgery.
constexpr const char* kAsymmetric[] = {"RS256", "RS384", "RS512", "ES256", "ES384", "ES512"};

struct Url {
  std::string scheme, host, authority, path;  // authority: host[:port]
  int port = 0;
};

std::optional<Url> parse_url(const std::string& text) {
  Url u;
  auto colon = text.find("://");
  if (colon == std::string::npos) return std::nullopt;
  u.scheme = text.substr(0, colon);
  if (u.scheme != "https" && u.scheme != "http") return std::nullopt;
  std::string rest = text.substr(colon + 3);
  if (rest.find('#') != std::string::npos) return std::nullopt;
  auto query = rest.find('?');
  auto slash = std::min(rest.find('/'), query);
  u.authority = rest.substr(0, slash);
  u.path = slash == std::string::npos ? "" : rest.substr(slash);
  if (u.authority.empty() || u.authority.find('@') != std::string::npos) return std::nullopt;
  std::string port;
  if (u.authority[0] == '[') {
    auto close = u.authority.find(']');
    if (close == std::string::npos) return std::nullopt;
    u.host = u.authority.substr(1, close - 1);
    if (close + 1 < u.authority.size()) {
      if (u.authority[close + 1] != ':') return std::nullopt;
      port = u.authority.substr(close + 2);
    }
  } else {
    auto c = u.authority.rfind(':');
    u.host = u.authority.substr(0, c);
    if (c != std::string::npos) port = u.authority.substr(c + 1);
  }
  if (u.host.empty()) return std::nullopt;
  if (!port.empty()) {
    if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    u.port = std::atoi(port.c_str());
    if (u.port < 1 || u.port > 65535) return std::nullopt;
  } else {
    u.port = u.scheme == "https" ? 443 : 80;
  }
  return u;
}

// https anywhere; http only to this machine (a test issuer, a local proxy).
bool secure_or_loopback(const Url& u) { return u.scheme == "https" || http::is_loopback(u.host); }

// RFC 6750 section 3: error_description is %x20-21 / %x23-5B / %x5D-7E.
std::string challenge_text(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 300))
    if (c >= 0x20 && c <= 0x7e && c != '"' && c != '\\') out += c;
  return out;
}

std::vector<std::string> scopes_of(const json& claims) {
  std::vector<std::string> out;
  auto add_words = [&](const std::string& s) {
    std::istringstream in(s);
    for (std::string w; in >> w;) out.push_back(w);
  };
  if (auto it = claims.find("scope"); it != claims.end() && it->is_string()) add_words(it->get<std::string>());
  // "scp": Okta's and Microsoft's name for it, a string or an array.
  if (auto it = claims.find("scp"); it != claims.end()) {
    if (it->is_string()) add_words(it->get<std::string>());
    if (it->is_array())
      for (const auto& s : *it)
        if (s.is_string()) out.push_back(s.get<std::string>());
  }
  return out;
}

// The JWK type and curve an algorithm needs.
std::pair<std::string, std::string> key_type_for(const std::string& alg) {
  if (alg.rfind("RS", 0) == 0) return {"RSA", ""};
  if (alg == "ES256") return {"EC", "P-256"};
  if (alg == "ES384") return {"EC", "P-384"};
  if (alg == "ES512") return {"EC", "P-521"};
  return {"", ""};
}

}  // namespace

std::string tenant_of(const std::string& claim) {
  // Two name spaces that cannot meet: a claim that is a plain name keeps it
  // readable as oauth-<claim>; any other claim, and any claim that starts
  // like a digest name, becomes oauth-sha256-<40 hex digits of its sha256>.
  // No claim value reaches the other space, and the tokens file refuses the
  // oauth- prefix (auth.cpp), so no static tenant is an OAuth one either.
  const bool name = !claim.empty() && claim.size() <= kLiteralClaimMax &&
                    claim.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") == std::string::npos &&
                    claim.rfind(kDigestTag, 0) != 0;
  return name ? http::kOAuthTenantPrefix + claim
              : std::string(http::kOAuthTenantPrefix) + kDigestTag + util::sha256_hex(claim).substr(0, 40);
}

util::Result<Config> parse_config(std::string_view text, const std::string& source) {
  auto bad = [&](const std::string& key, const std::string& why) {
    return util::make_error(util::ErrorCode::kAuth, source + ": " + key + ": " + why);
  };
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return bad("(file)", "not a JSON object");
  static const char* kKeys[] = {
      "issuer",     "jwks_uri", "resource", "audience",     "authorization_servers", "tenant_claim",
      "algorithms", "scopes",   "leeway_s", "jwks_cache_s", "jwks_refetch_min_s",    "$comment"};
  for (auto& item : doc.items())
    if (const std::string& k = item.key();
        std::find_if(std::begin(kKeys), std::end(kKeys), [&](const char* x) { return k == x; }) == std::end(kKeys))
      return bad(k,
                 "unknown key (issuer, jwks_uri, resource, audience, authorization_servers, tenant_claim, "
                 "algorithms, scopes, leeway_s, jwks_cache_s, jwks_refetch_min_s)");
  Config c;
  c.source = source;
  auto url = [&](const char* key, std::string& out, bool required) -> std::optional<util::Error> {
    if (!doc.contains(key)) {
      if (required) return bad(key, "required");
      return std::nullopt;
    }
    if (!doc[key].is_string()) return bad(key, "must be a string");
    out = doc[key].get<std::string>();
    auto u = parse_url(out);
    if (!u) return bad(key, "\"" + out + "\" is not an absolute http(s) URL without user info or fragment");
    if (!secure_or_loopback(*u)) return bad(key, "\"" + out + "\" must be https (http only for a loopback host)");
    return std::nullopt;
  };
  if (auto e = url("issuer", c.issuer, true)) return *e;
  if (auto e = url("jwks_uri", c.jwks_uri, true)) return *e;
  if (auto e = url("resource", c.resource, true)) return *e;
  if (c.resource.find('?') != std::string::npos) return bad("resource", "must not have a query (RFC 8707 section 2)");
  c.audience = c.resource;
  if (doc.contains("audience")) {
    if (!doc["audience"].is_string() || doc["audience"].get<std::string>().empty())
      return bad("audience", "must be a non-empty string");
    c.audience = doc["audience"].get<std::string>();
  }
  c.authorization_servers = {c.issuer};
  if (doc.contains("authorization_servers")) {
    const json& a = doc["authorization_servers"];
    if (!a.is_array() || a.empty()) return bad("authorization_servers", "must be a non-empty array of URLs");
    c.authorization_servers.clear();
    for (const auto& s : a) {
      if (!s.is_string() || !parse_url(s.get<std::string>()))
        return bad("authorization_servers", "each entry must be an absolute http(s) URL");
      c.authorization_servers.push_back(s.get<std::string>());
    }
  }
  if (doc.contains("tenant_claim")) {
    if (!doc["tenant_claim"].is_string() || doc["tenant_claim"].get<std::string>().empty())
      return bad("tenant_claim", "must be a claim name");
    c.tenant_claim = doc["tenant_claim"].get<std::string>();
  }
  if (doc.contains("algorithms")) {
    const json& a = doc["algorithms"];
    if (!a.is_array() || a.empty()) return bad("algorithms", "must be a non-empty array");
    c.algorithms.clear();
    for (const auto& s : a) {
      const std::string alg = s.is_string() ? s.get<std::string>() : s.dump();
      if (std::find(std::begin(kAsymmetric), std::end(kAsymmetric), alg) == std::end(kAsymmetric))
        return bad("algorithms", "\"" + alg +
                                     "\" is not one of RS256, RS384, RS512, ES256, ES384, ES512 "
                                     "(none and HS* are never accepted)");
      c.algorithms.push_back(alg);
    }
  }
  if (doc.contains("scopes")) {
    const json& s = doc["scopes"];
    if (!s.is_object()) return bad("scopes", "must be an object {\"run\": SCOPE, \"read\": SCOPE}");
    for (auto& [k, v] : s.items()) {
      if (k != "run" && k != "read") return bad("scopes." + k, "unknown key (run, read)");
      if (!v.is_string() || v.get<std::string>().empty() ||
          v.get<std::string>().find_first_of(" \t\"\\") != std::string::npos)
        return bad("scopes." + k, "must be one scope token (no spaces or quotes)");
      (k == "run" ? c.run_scope : c.read_scope) = v.get<std::string>();
    }
    if (c.run_scope == c.read_scope) return bad("scopes", "run and read must be different scopes");
  }
  auto seconds = [&](const char* key, int64_t& out, int64_t lo, int64_t hi) -> std::optional<util::Error> {
    if (!doc.contains(key)) return std::nullopt;
    if (!doc[key].is_number_integer() || doc[key].get<int64_t>() < lo || doc[key].get<int64_t>() > hi)
      return bad(key, "must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
    out = doc[key].get<int64_t>();
    return std::nullopt;
  };
  if (auto e = seconds("leeway_s", c.leeway_s, 0, 300)) return *e;
  if (auto e = seconds("jwks_cache_s", c.jwks_cache_s, 30, 86400)) return *e;
  if (auto e = seconds("jwks_refetch_min_s", c.jwks_refetch_min_s, 1, 3600)) return *e;
  return c;
}

util::Result<Config> load_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return util::make_error(util::ErrorCode::kAuth, "--oauth " + path + ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().size() > 64 * 1024)
    return util::make_error(util::ErrorCode::kAuth, "--oauth " + path + ": over 64 KiB");
  return parse_config(text.str(), path);
}

util::Result<std::string> http_fetch(const std::string& uri) {
  auto u = parse_url(uri);
  if (!u || !secure_or_loopback(*u))
    return util::make_error(util::ErrorCode::kAuth, "JWKS " + uri + ": not https (or http on loopback)");
  std::unique_ptr<httplib::ClientImpl> client;
  if (u->scheme == "https") {
    auto ssl = std::make_unique<httplib::SSLClient>(u->host, u->port);
    ssl->enable_server_certificate_verification(true);
    client = std::move(ssl);
  } else {
    client = std::make_unique<httplib::ClientImpl>(u->host, u->port);
  }
  client->set_connection_timeout(kFetchTimeoutS, 0);
  client->set_read_timeout(kFetchTimeoutS, 0);
  client->set_follow_location(false);
  std::string body;
  bool too_large = false;
  auto res = client->Get(u->path.empty() ? "/" : u->path, [&](const char* data, size_t n) {
    if (body.size() + n > kJwksMaxBytes) {
      too_large = true;
      return false;
    }
    body.append(data, n);
    return true;
  });
  if (too_large) return util::make_error(util::ErrorCode::kAuth, "JWKS " + uri + ": larger than 1 MiB");
  if (!res) return util::make_error(util::ErrorCode::kAuth, "JWKS " + uri + ": " + httplib::to_string(res.error()));
  if (res->status != 200)
    return util::make_error(util::ErrorCode::kAuth, "JWKS " + uri + ": HTTP " + std::to_string(res->status));
  return body;
}

Verifier::Verifier(Config config, Fetch fetch) : config_(std::move(config)), fetch_(std::move(fetch)) {}

std::variant<Jwk, Rejection> Verifier::key_for(const std::string& kid, const std::string& alg, int64_t now_s) {
  const std::pair<std::string, std::string> type = key_type_for(alg);
  const std::string& kty = type.first;
  const std::string& crv = type.second;
  auto find = [&]() -> std::optional<Jwk> {
    std::vector<const Jwk*> match;
    for (const auto& k : keys_)
      if (k.kty == kty && (crv.empty() || k.crv == crv) && (k.alg.empty() || k.alg == alg) &&
          (kid.empty() || k.kid == kid))
        match.push_back(&k);
    // Without a kid, only an unambiguous key will do.
    if (match.size() == 1 || (!kid.empty() && !match.empty())) return *match.front();
    return std::nullopt;
  };
  std::unique_lock lock(mu_);
  const bool stale = !fetched_at_s_ || now_s - *fetched_at_s_ >= config_.jwks_cache_s;
  if (!stale)
    if (auto k = find()) return *k;
  if (fetching_) {
    // Another request is reading the JWKS: stale keys in hand still do (the
    // fetch will refresh them); a key not in hand waits for that fetch.
    if (auto k = find()) return *k;
    fetched_.wait(lock, [this] { return !fetching_; });
  } else if (!attempted_at_s_ || now_s - *attempted_at_s_ >= config_.jwks_refetch_min_s) {
    // A new kid (the issuer rotated its keys) or stale keys: fetch, but never
    // more often than jwks_refetch_min_s, so tokens with made-up kids cannot
    // make this server hammer the issuer. Outside the lock: up to 10 s.
    attempted_at_s_ = now_s;
    fetching_ = true;
    lock.unlock();
    util::Result<std::vector<Jwk>> keys = util::make_error(util::ErrorCode::kAuth, "JWKS: the fetch failed");
    try {  // never leave fetching_ set: every later request would wait on it
      auto body = fetch_(config_.jwks_uri);
      keys = body ? parse_jwks(*body) : util::Result<std::vector<Jwk>>(body.error());
    } catch (const std::exception& e) {
      keys = util::make_error(util::ErrorCode::kAuth, std::string("JWKS: ") + e.what());
    }
    lock.lock();
    fetching_ = false;
    fetched_.notify_all();
    if (keys) {
      keys_ = std::move(*keys);
      fetched_at_s_ = now_s;
      spdlog::info("oauth: {} signing key(s) read from {}", keys_.size(), config_.jwks_uri);
    } else {
      // The keys last read stay in use while the issuer cannot be reached.
      spdlog::warn("oauth: {}", keys.error().message);
    }
  }
  if (auto k = find()) return *k;
  if (!fetched_at_s_) return Rejection{Failure::kKeysUnavailable, "the issuer's keys could not be read"};
  return Rejection{Failure::kUnknownKey, kid.empty()
                                             ? "no single key of the issuer's JWKS fits alg " + alg
                                             : "no key of the issuer's JWKS has kid \"" + kid + "\" for " + alg};
}

std::variant<Identity, Rejection> Verifier::verify(std::string_view token, int64_t now_s) {
  auto reject = [](Failure f, std::string m) { return Rejection{f, std::move(m)}; };
  if (token.size() > kTokenMaxBytes) return reject(Failure::kMalformed, "the token is over 16 KiB");
  const size_t d1 = token.find('.');
  const size_t d2 = d1 == std::string_view::npos ? d1 : token.find('.', d1 + 1);
  if (d2 == std::string_view::npos || token.find('.', d2 + 1) != std::string_view::npos)
    return reject(Failure::kMalformed, "not a JWS in compact form (three dot-separated parts)");
  if (d1 > kHeaderMaxBytes) return reject(Failure::kMalformed, "the JOSE header is over 2 KiB");
  // Every part strict base64url before cjose sees the token: cjose 0.6's
  // decoder asserts (aborting the process) on a part of 4n+1 characters or
  // one with '=' in it.
  if (!base64url_decode(token.substr(d1 + 1, d2 - d1 - 1)) || !base64url_decode(token.substr(d2 + 1)))
    return reject(Failure::kMalformed, "the payload or the signature is not base64url");
  auto header_bytes = base64url_decode(token.substr(0, d1));
  json header = header_bytes ? json::parse(*header_bytes, nullptr, false) : json();
  if (!header.is_object()) return reject(Failure::kMalformed, "the JOSE header is not base64url of a JSON object");
  if (!header.contains("alg") || !header["alg"].is_string())
    return reject(Failure::kMalformed, "the JOSE header has no \"alg\"");
  const std::string alg = header["alg"].get<std::string>();
  if (std::find(config_.algorithms.begin(), config_.algorithms.end(), alg) == config_.algorithms.end()) {
    std::string allowed;
    for (const auto& a : config_.algorithms) allowed += (allowed.empty() ? "" : ", ") + a;
    return reject(Failure::kAlgorithm, "alg \"" + challenge_text(alg) + "\" is not accepted (" + allowed + ")");
  }
  if (header.contains("crit")) return reject(Failure::kMalformed, "a \"crit\" header is not supported");
  // An access token is typed JWT (or untyped), or at+jwt (RFC 9068 section
  // 2.1); any other type (an ID token typed "id+jwt", a logout token) is not one.
  if (header.contains("typ")) {
    std::string typ = header["typ"].is_string() ? header["typ"].get<std::string>() : "";
    for (auto& c : typ) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (typ != "jwt" && typ != "at+jwt" && typ != "application/at+jwt")
      return reject(Failure::kMalformed, "typ \"" +
                                             challenge_text(header["typ"].is_string() ? header["typ"].get<std::string>()
                                                                                      : header["typ"].dump()) +
                                             "\" is not an access token's (JWT or at+jwt)");
  }
  const std::string kid = header.contains("kid") && header["kid"].is_string() ? header["kid"].get<std::string>() : "";
  auto key = key_for(kid, alg, now_s);
  if (auto* r = std::get_if<Rejection>(&key)) return *r;
  const Jwk& jwk = std::get<Jwk>(key);

  // cjose parses the JWS and checks its signature with that one key.
  cjose_err err{};
  auto release_jwk = [](cjose_jwk_t* k) { cjose_jwk_release(k); };
  std::unique_ptr<cjose_jwk_t, decltype(release_jwk)> cjwk(
      cjose_jwk_import(jwk.public_jwk.data(), jwk.public_jwk.size(), &err), release_jwk);
  if (!cjwk) {
    spdlog::error("oauth: cjose refused a key OpenSSL accepted (kid \"{}\"): {}", jwk.kid,
                  err.message ? err.message : "");
    return reject(Failure::kKeysUnavailable, "the issuer's key could not be used");
  }
  std::unique_ptr<cjose_jws_t, void (*)(cjose_jws_t*)> jws(cjose_jws_import(token.data(), token.size(), &err),
                                                           cjose_jws_release);
  if (!jws) return reject(Failure::kMalformed, "not a JWS cjose can read");
  // The algorithm cjose verifies with is the one checked above.
  const char* cjose_alg = cjose_header_get(cjose_jws_get_protected(jws.get()), CJOSE_HDR_ALG, &err);
  if (!cjose_alg || alg != cjose_alg) return reject(Failure::kAlgorithm, "cjose read another alg than the header's");
  if (!cjose_jws_verify(jws.get(), cjwk.get(), &err))
    return reject(Failure::kSignature, "the signature does not verify with the issuer's key");
  uint8_t* payload = nullptr;  // owned by jws
  size_t payload_len = 0;
  if (!cjose_jws_get_plaintext(jws.get(), &payload, &payload_len, &err) || !payload)
    return reject(Failure::kMalformed, "the token has no payload");
  json claims = json::parse(std::string_view(reinterpret_cast<const char*>(payload), payload_len), nullptr, false);
  if (!claims.is_object()) return reject(Failure::kMalformed, "the claims are not a JSON object");

  if (!claims.contains("iss") || claims["iss"] != config_.issuer)
    return reject(Failure::kIssuer, "iss is not " + config_.issuer);
  bool audience = false;
  if (claims.contains("aud")) {
    const json& aud = claims["aud"];
    if (aud.is_string()) audience = aud == config_.audience;
    if (aud.is_array())
      for (const auto& a : aud) audience = audience || (a.is_string() && a == config_.audience);
  }
  if (!audience) return reject(Failure::kAudience, "aud does not name " + config_.audience);
  if (!claims.contains("exp") || !claims["exp"].is_number()) return reject(Failure::kExpired, "the token has no exp");
  const double now = static_cast<double>(now_s), leeway = static_cast<double>(config_.leeway_s);
  if (now >= claims["exp"].get<double>() + leeway) return reject(Failure::kExpired, "the token has expired");
  if (claims.contains("nbf") && (!claims["nbf"].is_number() || now + leeway < claims["nbf"].get<double>()))
    return reject(Failure::kNotYetValid, "the token is not valid yet (nbf)");
  if (!claims.contains(config_.tenant_claim) || !claims[config_.tenant_claim].is_string() ||
      claims[config_.tenant_claim].get<std::string>().empty() ||
      claims[config_.tenant_claim].get<std::string>().size() > 1024)
    return reject(Failure::kTenant, "the token has no string claim \"" + config_.tenant_claim + "\" to name a tenant");

  Identity id;
  id.tenant = tenant_of(claims[config_.tenant_claim].get<std::string>());
  id.subject = claims.contains("sub") && claims["sub"].is_string() ? claims["sub"].get<std::string>() : "";
  const auto scopes = scopes_of(claims);
  auto has = [&](const std::string& s) { return std::find(scopes.begin(), scopes.end(), s) != scopes.end(); };
  id.can_run = has(config_.run_scope);
  if (!id.can_run && !has(config_.read_scope))
    return reject(Failure::kScope, "the token has neither scope " + config_.run_scope + " nor " + config_.read_scope);
  return id;
}

json resource_metadata(const Config& c) {
  return {{"resource", c.resource},
          {"authorization_servers", c.authorization_servers},
          {"scopes_supported", {c.run_scope, c.read_scope}},
          {"bearer_methods_supported", {"header"}},
          {"resource_name", "throwbox"}};
}

namespace {
constexpr const char* kMetadataPath = "/.well-known/oauth-protected-resource";

// The resource's path without trailing slashes (RFC 9728 section 3.1).
std::string resource_path(const Url& u) {
  std::string path = u.path;
  while (!path.empty() && path.back() == '/') path.pop_back();
  return path;
}
}  // namespace

std::string resource_metadata_url(const Config& c) {
  auto u = parse_url(c.resource);  // checked at load
  if (!u) return kMetadataPath;
  return u->scheme + "://" + u->authority + kMetadataPath + resource_path(*u);
}

std::vector<std::string> resource_metadata_paths(const Config& c) {
  auto u = parse_url(c.resource);
  std::vector<std::string> paths{kMetadataPath};
  if (std::string path = u ? resource_path(*u) : ""; !path.empty()) paths.push_back(kMetadataPath + path);
  return paths;
}

std::string challenge(const Config& c, std::string_view error, std::string_view description, std::string_view scope) {
  std::string h = "Bearer resource_metadata=\"" + resource_metadata_url(c) + "\"";
  if (!error.empty()) h += ", error=\"" + std::string(error) + "\"";
  if (!description.empty()) h += ", error_description=\"" + challenge_text(description) + "\"";
  if (!scope.empty()) h += ", scope=\"" + std::string(scope) + "\"";
  return h;
}

}  // namespace transport::oauth
