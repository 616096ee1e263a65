// The OAuth resource server's pure parts: the --oauth file's errors and
// defaults, JWKS parsing (keys rebuilt by OpenSSL, bad ones refused), the
// metadata URL and challenge text, and the checks a token fails before any
// key is fetched.
#include <doctest/doctest.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>

#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "server/transport/jwks.h"
#include "server/transport/oauth.h"
#include "server/util/base64.h"
#include "server/util/crypto.h"

namespace oauth = transport::oauth;
using nlohmann::json;

namespace {

const char* kMinimal = R"({"issuer": "https://idp.example/", "jwks_uri": "https://idp.example/jwks",
                           "resource": "https://tb.example/mcp"})";

std::string error_of(const std::string& text) {
  auto c = oauth::parse_config(text, "oauth.json");
  REQUIRE_FALSE(c.ok());
  return c.error().message;
}

std::string b64u(const std::string& bytes) {
  std::string s = util::base64_encode(bytes);
  for (char& c : s) c = c == '+' ? '-' : c == '/' ? '_' : c;
  while (!s.empty() && s.back() == '=') s.pop_back();
  return s;
}

std::string bn_bytes(EVP_PKEY* key, const char* name) {
  BIGNUM* bn = nullptr;
  REQUIRE(EVP_PKEY_get_bn_param(key, name, &bn) == 1);
  std::string out(static_cast<size_t>(BN_num_bytes(bn)), '\0');
  BN_bn2bin(bn, reinterpret_cast<unsigned char*>(out.data()));
  BN_free(bn);
  return out;
}

json rsa_jwk(int bits, const std::string& kid) {
  EVP_PKEY* key = EVP_RSA_gen(static_cast<unsigned>(bits));
  REQUIRE(key);
  json jwk{{"kty", "RSA"},
           {"kid", kid},
           {"n", b64u(bn_bytes(key, OSSL_PKEY_PARAM_RSA_N))},
           {"e", b64u(bn_bytes(key, OSSL_PKEY_PARAM_RSA_E))}};
  EVP_PKEY_free(key);
  return jwk;
}

// An RSA key pair, its public JWK, and RS256 tokens signed with it.
struct RsaSigner {
  EVP_PKEY* key = EVP_RSA_gen(2048);
  std::string kid;
  explicit RsaSigner(std::string k) : kid(std::move(k)) { REQUIRE(key); }
  ~RsaSigner() { EVP_PKEY_free(key); }
  json jwk() const {
    return {{"kty", "RSA"},
            {"kid", kid},
            {"n", b64u(bn_bytes(key, OSSL_PKEY_PARAM_RSA_N))},
            {"e", b64u(bn_bytes(key, OSSL_PKEY_PARAM_RSA_E))}};
  }
  std::string sign(const json& claims, const json& extra_header = json::object()) const {
    json header{{"alg", "RS256"}, {"kid", kid}};
    header.update(extra_header);
    const std::string input = b64u(header.dump()) + "." + b64u(claims.dump());
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    REQUIRE(EVP_DigestSignInit(ctx, nullptr, EVP_sha256(), nullptr, key) == 1);
    size_t n = 0;
    REQUIRE(EVP_DigestSign(ctx, nullptr, &n, reinterpret_cast<const unsigned char*>(input.data()), input.size()) == 1);
    std::string sig(n, '\0');
    REQUIRE(EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &n,
                           reinterpret_cast<const unsigned char*>(input.data()), input.size()) == 1);
    EVP_MD_CTX_free(ctx);
    sig.resize(n);
    return input + "." + b64u(sig);
  }
};

json ec_jwk(const std::string& kid) {
  EVP_PKEY* key = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
  REQUIRE(key);
  unsigned char point[65];
  size_t n = 0;
  REQUIRE(EVP_PKEY_get_octet_string_param(key, OSSL_PKEY_PARAM_PUB_KEY, point, sizeof point, &n) == 1);
  REQUIRE(n == 65);
  json jwk{{"kty", "EC"},
           {"crv", "P-256"},
           {"kid", kid},
           {"x", b64u(std::string(reinterpret_cast<char*>(point) + 1, 32))},
           {"y", b64u(std::string(reinterpret_cast<char*>(point) + 33, 32))}};
  EVP_PKEY_free(key);
  return jwk;
}

}  // namespace

TEST_CASE("config: the minimal file gets the defaults") {
  auto c = oauth::parse_config(kMinimal, "oauth.json");
  REQUIRE(c.ok());
  CHECK(c->audience == "https://tb.example/mcp");
  CHECK(c->authorization_servers == std::vector<std::string>{"https://idp.example/"});
  CHECK(c->tenant_claim == "sub");
  CHECK(c->algorithms == std::vector<std::string>{"RS256", "ES256"});
  CHECK(c->run_scope == "throwbox.run");
  CHECK(c->read_scope == "throwbox.read");
  CHECK(c->leeway_s == 60);
}

TEST_CASE("config: each bad key is named") {
  CHECK(error_of("[]") == "oauth.json: (file): not a JSON object");
  CHECK(error_of(R"({"jwks_uri": "https://i/j", "resource": "https://r/mcp"})") == "oauth.json: issuer: required");
  CHECK(error_of(R"({"issuer": "http://idp.example/", "jwks_uri": "https://i/j", "resource": "https://r/mcp"})") ==
        "oauth.json: issuer: \"http://idp.example/\" must be https (http only for a loopback host)");
  CHECK(error_of(R"({"issuer": "https://i/", "jwks_uri": "https://u:p@i/j", "resource": "https://r/mcp"})")
            .find("jwks_uri: \"https://u:p@i/j\" is not an absolute") != std::string::npos);
  CHECK(error_of(R"({"issuer": "https://i/", "jwks_uri": "https://i/j", "resource": "https://r/mcp#x"})")
            .find("resource:") != std::string::npos);
  std::string base = R"("issuer": "https://i/", "jwks_uri": "https://i/j", "resource": "https://r/mcp")";
  CHECK(error_of("{" + base + R"(, "tenant": "x"})").find("oauth.json: tenant: unknown key") == 0);
  CHECK(error_of("{" + base + R"(, "algorithms": ["RS256", "HS256"]})") ==
        "oauth.json: algorithms: \"HS256\" is not one of RS256, RS384, RS512, ES256, ES384, ES512 (none and HS* are "
        "never accepted)");
  CHECK(error_of("{" + base + R"(, "algorithms": ["none"]})").find("\"none\" is not one of") != std::string::npos);
  CHECK(error_of("{" + base + R"(, "algorithms": []})") == "oauth.json: algorithms: must be a non-empty array");
  CHECK(error_of("{" + base + R"(, "scopes": {"run": "a", "read": "a"}})") ==
        "oauth.json: scopes: run and read must be different scopes");
  CHECK(error_of("{" + base + R"(, "scopes": {"run": "a b"}})") ==
        "oauth.json: scopes.run: must be one scope token (no spaces or quotes)");
  CHECK(error_of("{" + base + R"(, "scopes": {"write": "w"}})") == "oauth.json: scopes.write: unknown key (run, read)");
  CHECK(error_of("{" + base + R"(, "leeway_s": 3600})") == "oauth.json: leeway_s: must be an integer from 0 to 300");
  CHECK(error_of("{" + base + R"(, "tenant_claim": ""})") == "oauth.json: tenant_claim: must be a claim name");
  // http is fine for a loopback issuer (a test issuer, a local proxy).
  CHECK(oauth::parse_config(R"({"issuer": "http://127.0.0.1:9/", "jwks_uri": "http://localhost:9/j",
                                "resource": "http://127.0.0.1:8765/mcp"})",
                            "o")
            .ok());
}

TEST_CASE("tenants: a plain claim and a digest never share a name, whatever the claim holds") {
  CHECK(oauth::tenant_of("alice") == "oauth-alice");
  CHECK(oauth::tenant_of("ci-runner_2") == "oauth-ci-runner_2");
  const std::string digest = util::sha256_hex("John.Doe").substr(0, 40);
  CHECK(oauth::tenant_of("John.Doe") == "oauth-sha256-" + digest);
  // A claim that is the digest's hex digits names a tenant of its own.
  CHECK(oauth::tenant_of(digest) == "oauth-" + digest);
  CHECK(oauth::tenant_of(digest) != oauth::tenant_of("John.Doe"));
  // A claim spelled like a digest name is hashed too: it cannot reach oauth-sha256-<hex>.
  CHECK(oauth::tenant_of("sha256-" + digest) == "oauth-sha256-" + util::sha256_hex("sha256-" + digest).substr(0, 40));
  CHECK(oauth::tenant_of("sha256-" + digest) != oauth::tenant_of("John.Doe"));
  // Too long for a name (57 is the most): hashed.
  CHECK(oauth::tenant_of(std::string(57, 'a')) == "oauth-" + std::string(57, 'a'));
  CHECK(oauth::tenant_of(std::string(58, 'a')).rfind("oauth-sha256-", 0) == 0);
  for (const std::string& claim : {std::string("x"), digest, std::string("John.Doe"), std::string(58, 'a')})
    CHECK(oauth::tenant_of(claim).size() <= 64);
}

TEST_CASE("metadata URL: the resource's origin, the well-known path, then the resource's path") {
  auto c = oauth::parse_config(kMinimal, "o");
  REQUIRE(c.ok());
  CHECK(oauth::resource_metadata_url(*c) == "https://tb.example/.well-known/oauth-protected-resource/mcp");
  CHECK(oauth::resource_metadata_paths(*c) ==
        std::vector<std::string>{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"});
  json m = oauth::resource_metadata(*c);
  CHECK(m["resource"] == "https://tb.example/mcp");
  CHECK(m["authorization_servers"] == json::array({"https://idp.example/"}));
  CHECK(m["scopes_supported"] == json::array({"throwbox.run", "throwbox.read"}));
}

TEST_CASE("challenge: no quote or backslash of a reason reaches the header") {
  auto c = oauth::parse_config(kMinimal, "o");
  REQUIRE(c.ok());
  CHECK(oauth::challenge(*c, "", "", "") ==
        "Bearer resource_metadata=\"https://tb.example/.well-known/oauth-protected-resource/mcp\"");
  CHECK(oauth::challenge(*c, "invalid_token", "alg \"x\\\" is\r\nbad", "") ==
        "Bearer resource_metadata=\"https://tb.example/.well-known/oauth-protected-resource/mcp\", "
        "error=\"invalid_token\", error_description=\"alg x isbad\"");
  CHECK(oauth::challenge(*c, "insufficient_scope", "", "throwbox.run").find(", scope=\"throwbox.run\"") !=
        std::string::npos);
}

TEST_CASE("jwks: RSA and EC public keys become PEM; others are left out") {
  json doc{{"keys",
            {rsa_jwk(2048, "r1"), ec_jwk("e1"), json{{"kty", "oct"}, {"k", "c2VjcmV0"}, {"kid", "sym"}},
             [] {
               json enc = rsa_jwk(2048, "enc");
               enc["use"] = "enc";
               return enc;
             }(),
             [] {
               json priv = ec_jwk("priv");
               priv["d"] = "AAAA";
               return priv;
             }()}}};
  auto keys = oauth::parse_jwks(doc.dump());
  REQUIRE(keys.ok());
  REQUIRE(keys->size() == 2);
  CHECK((*keys)[0].kid == "r1");
  CHECK((*keys)[0].kty == "RSA");
  CHECK((*keys)[0].pem.rfind("-----BEGIN PUBLIC KEY-----", 0) == 0);
  CHECK((*keys)[1].kid == "e1");
  CHECK((*keys)[1].crv == "P-256");
}

TEST_CASE("jwks: a weak, short or off-curve key is an error naming it") {
  auto err = [](const json& key) {
    auto k = oauth::parse_jwks(json{{"keys", {key}}}.dump());
    REQUIRE_FALSE(k.ok());
    return k.error().message;
  };
  CHECK(err(rsa_jwk(1024, "small")) == "keys[0] (kid \"small\"): the RSA modulus must be 2048 to 8192 bits");
  json shortx = ec_jwk("s");
  shortx["x"] = b64u(std::string(31, 'a'));
  CHECK(err(shortx) == "keys[0] (kid \"s\"): \"x\" and \"y\" must be base64url of 32 bytes each for P-256");
  json off = ec_jwk("off");
  off["y"] = b64u(std::string(32, '\x01'));
  CHECK(err(off).find("keys[0] (kid \"off\"): the point is not") == 0);
  json curve = ec_jwk("c");
  curve["crv"] = "secp256k1";
  CHECK(err(curve) == "keys[0] (kid \"c\"): curve \"secp256k1\" is not P-256, P-384 or P-521");
  CHECK_FALSE(oauth::parse_jwks("not json").ok());
  CHECK_FALSE(oauth::parse_jwks(R"({"keys": {}})").ok());
}

TEST_CASE("verify: a token whose alg is not allowed is refused before any key is fetched") {
  auto c = oauth::parse_config(kMinimal, "o");
  REQUIRE(c.ok());
  int fetches = 0;
  oauth::Verifier v(*c, [&](const std::string&) -> util::Result<std::string> {
    ++fetches;
    return std::string(R"({"keys": []})");
  });
  auto token = [](const json& header) { return b64u(header.dump()) + "." + b64u(R"({"sub":"a"})") + ".c2ln"; };
  for (const char* alg : {"none", "HS256", "PS256", "RS384"}) {
    auto r = v.verify(token({{"alg", alg}, {"kid", "k"}}), 1000);
    REQUIRE(std::holds_alternative<oauth::Rejection>(r));
    CHECK(std::get<oauth::Rejection>(r).failure == oauth::Failure::kAlgorithm);
  }
  for (const std::string& bad : std::vector<std::string>{"", "a.b", "a.b.c.d", "!!!.e30.", token({{"typ", "JWT"}})}) {
    auto r = v.verify(bad, 1000);
    REQUIRE(std::holds_alternative<oauth::Rejection>(r));
    CHECK(std::get<oauth::Rejection>(r).failure == oauth::Failure::kMalformed);
  }
  CHECK(fetches == 0);
  // An allowed alg with no key: one fetch, then none for a second try within the minimum interval.
  auto r = v.verify(token({{"alg", "RS256"}, {"kid", "k"}}), 1000);
  CHECK(std::get<oauth::Rejection>(r).failure == oauth::Failure::kUnknownKey);
  r = v.verify(token({{"alg", "RS256"}, {"kid", "k2"}}), 1001);
  CHECK(std::get<oauth::Rejection>(r).failure == oauth::Failure::kUnknownKey);
  CHECK(fetches == 1);
  r = v.verify(token({{"alg", "RS256"}, {"kid", "k3"}}), 1031);
  CHECK(fetches == 2);
}

TEST_CASE(
    "verify: a payload or signature that is not strict base64url never reaches cjose (whose decoder aborts on it)") {
  RsaSigner signer("rsa-1");
  auto c = oauth::parse_config(kMinimal, "o");
  REQUIRE(c.ok());
  oauth::Verifier v(*c, [&](const std::string&) -> util::Result<std::string> {
    return json{{"keys", json::array({signer.jwk()})}}.dump();
  });
  const std::string good = signer.sign({{"iss", "https://idp.example/"},
                                        {"aud", "https://tb.example/mcp"},
                                        {"sub", "a"},
                                        {"exp", 2000},
                                        {"scope", "throwbox.run"}});
  const size_t d1 = good.find('.'), d2 = good.rfind('.');
  const std::string head = good.substr(0, d1);
  // Parts of 4n+1 characters, padding and bytes outside the alphabet: each
  // aborted the process inside cjose_jws_import before this check.
  for (const std::string& bad : std::vector<std::string>{head + ".e=1.AAA", head + ".e30.AAAAA", head + ".e30=.AAAA",
                                                         head + "." + good.substr(d1 + 1, d2 - d1 - 1) + ".AAAAA",
                                                         head + ".e30.AA|A", head + ".e30.AAA\xc1"}) {
    auto r = v.verify(bad, 1000);
    REQUIRE(std::holds_alternative<oauth::Rejection>(r));
    CHECK(std::get<oauth::Rejection>(r).failure == oauth::Failure::kMalformed);
  }
  CHECK(std::holds_alternative<oauth::Identity>(v.verify(good, 1000)));
}

TEST_CASE("verify: a JWKS fetch in flight does not hold up tokens whose key is in hand") {
  auto c = oauth::parse_config(kMinimal, "o");
  REQUIRE(c.ok());
  RsaSigner k1("k1");
  std::mutex mu;
  std::condition_variable cv;
  int fetches = 0;
  bool release = false;
  oauth::Verifier v(*c, [&](const std::string&) -> util::Result<std::string> {
    std::unique_lock lock(mu);
    if (++fetches == 1) return json{{"keys", {k1.jwk()}}}.dump();
    cv.notify_all();                         // the second fetch has started
    cv.wait(lock, [&] { return release; });  // ... and hangs like an issuer that does not answer
    return json{{"keys", {k1.jwk()}}}.dump();
  });
  const json claims{{"iss", "https://idp.example/"},
                    {"aud", "https://tb.example/mcp"},
                    {"sub", "alice"},
                    {"exp", 5000},
                    {"scope", "throwbox.run"}};
  auto ok = v.verify(k1.sign(claims), 1000);
  REQUIRE_MESSAGE(std::holds_alternative<oauth::Identity>(ok), std::get<oauth::Rejection>(ok).message);

  // A token with a new kid (past jwks_refetch_min_s) starts a fetch that hangs.
  RsaSigner k2("k2");
  auto waiting = std::async(std::launch::async, [&] { return v.verify(k2.sign(claims), 1100); });
  {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return fetches == 2; }));
  }
  // Meanwhile a token signed with k1 is verified at once.
  auto prompt = std::async(std::launch::async, [&] { return v.verify(k1.sign(claims), 1100); });
  const bool answered = prompt.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  // A second new kid waits for the fetch in flight rather than starting one.
  RsaSigner k3("k3");
  auto queued = std::async(std::launch::async, [&] { return v.verify(k3.sign(claims), 1100); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const bool queued_waits = queued.wait_for(std::chrono::seconds(0)) == std::future_status::timeout;
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  CHECK(answered);
  CHECK(queued_waits);
  auto p = prompt.get();
  CHECK(std::holds_alternative<oauth::Identity>(p));
  auto w = waiting.get();
  REQUIRE(std::holds_alternative<oauth::Rejection>(w));
  CHECK(std::get<oauth::Rejection>(w).failure == oauth::Failure::kUnknownKey);
  auto q = queued.get();
  REQUIRE(std::holds_alternative<oauth::Rejection>(q));
  CHECK(std::get<oauth::Rejection>(q).failure == oauth::Failure::kUnknownKey);
  CHECK(fetches == 2);
}

TEST_CASE("verify: typ JWT, at+jwt (RFC 9068) or none is an access token; another typ is refused") {
  auto c = oauth::parse_config(kMinimal, "o");
  REQUIRE(c.ok());
  RsaSigner k("k");
  oauth::Verifier v(*c, [&](const std::string&) -> util::Result<std::string> {
    return json{{"keys", {k.jwk()}}}.dump();
  });
  const json claims{{"iss", "https://idp.example/"},
                    {"aud", "https://tb.example/mcp"},
                    {"sub", "alice"},
                    {"exp", 5000},
                    {"scope", "throwbox.read"}};
  for (const char* typ : {"JWT", "jwt", "at+jwt", "application/at+jwt"}) {
    CAPTURE(typ);
    auto r = v.verify(k.sign(claims, {{"typ", typ}}), 1000);
    REQUIRE_MESSAGE(std::holds_alternative<oauth::Identity>(r), std::get<oauth::Rejection>(r).message);
    CHECK_FALSE(std::get<oauth::Identity>(r).can_run);
  }
  CHECK(std::holds_alternative<oauth::Identity>(v.verify(k.sign(claims), 1000)));
  for (const json& typ : {json("id+jwt"), json("logout+jwt"), json(7)}) {
    auto r = v.verify(k.sign(claims, {{"typ", typ}}), 1000);
    REQUIRE(std::holds_alternative<oauth::Rejection>(r));
    CHECK(std::get<oauth::Rejection>(r).failure == oauth::Failure::kMalformed);
    CHECK(std::get<oauth::Rejection>(r).message.find("is not an access token's") != std::string::npos);
  }
  // A signature over other bytes (the payload swapped) does not verify.
  const std::string good = k.sign(claims);
  json mallory = claims;
  mallory["sub"] = "mallory";
  const std::string other = k.sign(mallory);
  const std::string forged = good.substr(0, good.find('.') + 1) +
                             other.substr(other.find('.') + 1, other.rfind('.') - other.find('.') - 1) +
                             good.substr(good.rfind('.'));
  auto r = v.verify(forged, 1000);
  REQUIRE(std::holds_alternative<oauth::Rejection>(r));
  CHECK(std::get<oauth::Rejection>(r).failure == oauth::Failure::kSignature);
}
