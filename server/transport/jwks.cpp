// JWKS parsing: each RSA or EC public key rebuilt with OpenSSL 3 from its
// JWK members and written as PEM. Server threads; no state.
#include "server/transport/jwks.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>

#include <memory>

#include <nlohmann/json.hpp>

#include "server/util/base64.h"

namespace transport::oauth {

using nlohmann::json;

namespace {

// A JWKS is small: a cap on its keys and on each member keeps a hostile
// issuer (or whoever answers for it) from making the server do much work.
constexpr size_t kKeysMax = 64;
constexpr size_t kRsaModulusMaxBytes = 1024;  // 8192 bits
constexpr size_t kRsaModulusMinBytes = 256;   // 2048 bits: RFC 7518 section 3.3

template <class T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using Bignum = std::unique_ptr<BIGNUM, Deleter<BIGNUM, BN_free>>;
using ParamBuild = std::unique_ptr<OSSL_PARAM_BLD, Deleter<OSSL_PARAM_BLD, OSSL_PARAM_BLD_free>>;
using Params = std::unique_ptr<OSSL_PARAM, Deleter<OSSL_PARAM, OSSL_PARAM_free>>;
using PkeyCtx = std::unique_ptr<EVP_PKEY_CTX, Deleter<EVP_PKEY_CTX, EVP_PKEY_CTX_free>>;
using Pkey = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;

std::optional<std::string> member(const json& key, const char* name) {
  auto it = key.find(name);
  if (it == key.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

std::optional<std::string> pem_of(EVP_PKEY* pkey) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PUBKEY(bio.get(), pkey) != 1) return std::nullopt;
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  if (n <= 0 || !data) return std::nullopt;
  return std::string(data, static_cast<size_t>(n));
}

// An EVP_PKEY of `type` ("RSA", "EC") from the parameters, public part only.
Pkey key_from(const char* type, const ParamBuild& build) {
  Params params(OSSL_PARAM_BLD_to_param(build.get()));
  PkeyCtx ctx(EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr));
  EVP_PKEY* raw = nullptr;
  if (!params || !ctx || EVP_PKEY_fromdata_init(ctx.get()) != 1 ||
      EVP_PKEY_fromdata(ctx.get(), &raw, EVP_PKEY_PUBLIC_KEY, params.get()) != 1)
    return Pkey();
  return Pkey(raw);
}

util::Result<std::string> rsa_pem(const json& key, const std::string& name) {
  auto n = member(key, "n"), e = member(key, "e");
  if (!n || !e) return util::make_error(util::ErrorCode::kAuth, name + ": an RSA key needs \"n\" and \"e\"");
  auto nb = base64url_decode(*n), eb = base64url_decode(*e);
  if (!nb || !eb || nb->empty() || eb->empty() || eb->size() > 8)
    return util::make_error(util::ErrorCode::kAuth, name + ": \"n\" or \"e\" is not base64url of a number");
  // A modulus under 2048 bits is refused (RFC 7518 section 3.3), one over 8192 too.
  size_t bytes = nb->size() - nb->find_first_not_of('\0');
  if (nb->find_first_not_of('\0') == std::string::npos || bytes < kRsaModulusMinBytes || bytes > kRsaModulusMaxBytes)
    return util::make_error(util::ErrorCode::kAuth, name + ": the RSA modulus must be 2048 to 8192 bits");
  auto bn = [](const std::string& b) {
    return Bignum(BN_bin2bn(reinterpret_cast<const unsigned char*>(b.data()), static_cast<int>(b.size()), nullptr));
  };
  Bignum bn_n = bn(*nb), bn_e = bn(*eb);
  ParamBuild build(OSSL_PARAM_BLD_new());
  if (!bn_n || !bn_e || !build || OSSL_PARAM_BLD_push_BN(build.get(), OSSL_PKEY_PARAM_RSA_N, bn_n.get()) != 1 ||
      OSSL_PARAM_BLD_push_BN(build.get(), OSSL_PKEY_PARAM_RSA_E, bn_e.get()) != 1)
    return util::make_error(util::ErrorCode::kAuth, name + ": OpenSSL could not hold the RSA parameters");
  Pkey pkey = key_from("RSA", build);
  auto pem = pkey ? pem_of(pkey.get()) : std::nullopt;
  if (!pem) return util::make_error(util::ErrorCode::kAuth, name + ": OpenSSL refused the RSA key");
  return *pem;
}

util::Result<std::string> ec_pem(const json& key, const std::string& name, const std::string& crv) {
  const char* group = nullptr;
  size_t coordinate_bytes = 0;
  if (crv == "P-256")
    group = "prime256v1", coordinate_bytes = 32;
  else if (crv == "P-384")
    group = "secp384r1", coordinate_bytes = 48;
  else if (crv == "P-521")
    group = "secp521r1", coordinate_bytes = 66;
  else
    return util::make_error(util::ErrorCode::kAuth, name + ": curve \"" + crv + "\" is not P-256, P-384 or P-521");
  auto x = member(key, "x"), y = member(key, "y");
  auto xb = x ? base64url_decode(*x) : std::nullopt, yb = y ? base64url_decode(*y) : std::nullopt;
  // RFC 7518 section 6.2.1.2: each coordinate is the full field size.
  if (!xb || !yb || xb->size() != coordinate_bytes || yb->size() != coordinate_bytes)
    return util::make_error(util::ErrorCode::kAuth, name + ": \"x\" and \"y\" must be base64url of " +
                                                        std::to_string(coordinate_bytes) + " bytes each for " + crv);
  // The uncompressed point (SEC 1): 0x04 || x || y. OpenSSL checks it is on the curve.
  std::string point = std::string(1, '\x04') + *xb + *yb;
  ParamBuild build(OSSL_PARAM_BLD_new());
  if (!build || OSSL_PARAM_BLD_push_utf8_string(build.get(), OSSL_PKEY_PARAM_GROUP_NAME, group, 0) != 1 ||
      OSSL_PARAM_BLD_push_octet_string(build.get(), OSSL_PKEY_PARAM_PUB_KEY, point.data(), point.size()) != 1)
    return util::make_error(util::ErrorCode::kAuth, name + ": OpenSSL could not hold the EC parameters");
  Pkey pkey = key_from("EC", build);
  if (!pkey) return util::make_error(util::ErrorCode::kAuth, name + ": the point is not on " + crv);
  PkeyCtx check(EVP_PKEY_CTX_new_from_pkey(nullptr, pkey.get(), nullptr));
  if (!check || EVP_PKEY_public_check(check.get()) != 1)
    return util::make_error(util::ErrorCode::kAuth, name + ": the point is not a valid public key on " + crv);
  auto pem = pem_of(pkey.get());
  if (!pem) return util::make_error(util::ErrorCode::kAuth, name + ": OpenSSL could not write the EC key");
  return *pem;
}

}  // namespace

std::optional<std::string> base64url_decode(std::string_view text) {
  if (text.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != std::string::npos)
    return std::nullopt;
  if (text.size() % 4 == 1) return std::nullopt;
  std::string standard(text);
  for (char& c : standard) {
    if (c == '-')
      c = '+';
    else if (c == '_')
      c = '/';
  }
  standard.append((4 - standard.size() % 4) % 4, '=');
  return util::base64_decode(standard);
}

util::Result<std::vector<Jwk>> parse_jwks(std::string_view text) {
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("keys") || !doc["keys"].is_array())
    return util::make_error(util::ErrorCode::kAuth, "the JWKS is not a JSON object with a \"keys\" array");
  if (doc["keys"].size() > kKeysMax)
    return util::make_error(util::ErrorCode::kAuth, "the JWKS has more than " + std::to_string(kKeysMax) + " keys");
  std::vector<Jwk> keys;
  size_t index = 0;
  for (const json& key : doc["keys"]) {
    const std::string position = "keys[" + std::to_string(index++) + "]";
    if (!key.is_object()) return util::make_error(util::ErrorCode::kAuth, position + " is not an object");
    Jwk jwk;
    jwk.kid = member(key, "kid").value_or("");
    jwk.kty = member(key, "kty").value_or("");
    jwk.alg = member(key, "alg").value_or("");
    const std::string name = jwk.kid.empty() ? position : position + " (kid \"" + jwk.kid + "\")";
    if (auto use = member(key, "use"); use && *use != "sig") continue;  // an encryption key
    if (jwk.kty != "RSA" && jwk.kty != "EC") continue;                  // "oct" and others: never
    // Private members: this document should never carry them; the key is not used.
    if (key.contains("d") || key.contains("p") || key.contains("q")) continue;
    util::Result<std::string> pem =
        jwk.kty == "RSA" ? rsa_pem(key, name) : ec_pem(key, name, jwk.crv = member(key, "crv").value_or(""));
    if (!pem) return pem.error();
    jwk.pem = std::move(*pem);
    // Only the members that make the key: whatever else the issuer put in it
    // ("alg", "use", "x5c", ...) is not handed to the verifier.
    json pub{{"kty", jwk.kty}};
    const std::vector<const char*> members =
        jwk.kty == "RSA" ? std::vector<const char*>{"n", "e"} : std::vector<const char*>{"crv", "x", "y"};
    for (const char* m : members) pub[m] = key[m];
    jwk.public_jwk = pub.dump();
    keys.push_back(std::move(jwk));
  }
  return keys;
}

}  // namespace transport::oauth
