// The JWKS reader (transport::oauth::parse_jwks) on whatever an issuer's URL
// returns: no exception; every key kept is a public RSA or EC key OpenSSL
// built, with its PEM and a public JWK of only the key's members.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/transport/jwks.h"
#include "tests/fuzz/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto keys = transport::oauth::parse_jwks(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!keys) return 0;
  for (const auto& k : *keys) {
    FUZZ_CHECK(k.kty == "RSA" || k.kty == "EC");
    FUZZ_CHECK(k.pem.starts_with("-----BEGIN PUBLIC KEY-----"));
    auto jwk = nlohmann::json::parse(k.public_jwk, nullptr, false);
    FUZZ_CHECK(jwk.is_object());
    for (auto& [member, _] : jwk.items())
      FUZZ_CHECK(member == "kty" || member == "n" || member == "e" || member == "crv" || member == "x" ||
                 member == "y");
  }
  return 0;
}
