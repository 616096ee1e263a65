// The OAuth access-token reader (transport::oauth::Verifier::verify): a
// bearer token as any client may send it, against an issuer's JWKS of one
// RSA and one EC key. Whatever the bytes: no exception, no crash, a verdict
// every time; an accepted token names a tenant in one of the two name spaces.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/transport/oauth.h"
#include "tests/fuzz/check.h"

namespace {

// Public keys only (RFC 7517 appendix A.1's EC and RSA examples).
const char* kJwks = R"({"keys": [
 {"kty":"EC","crv":"P-256","kid":"ec-1","x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM","use":"sig"},
 {"kty":"RSA","kid":"rsa-1","use":"sig","e":"AQAB","n":"0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw"}]})";

transport::oauth::Verifier& verifier() {
  static auto config = transport::oauth::parse_config(
      R"({"issuer": "https://idp.example/", "jwks_uri": "https://idp.example/jwks",
          "resource": "https://tb.example/mcp", "algorithms": ["RS256", "ES256"]})",
      "fuzz");
  FUZZ_CHECK(config.ok());
  static transport::oauth::Verifier v(
      *config, [](const std::string&) -> util::Result<std::string> { return std::string(kJwks); });
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view token(reinterpret_cast<const char*>(data), size);
  auto verdict = verifier().verify(token, 1'800'000'000);
  if (auto* id = std::get_if<transport::oauth::Identity>(&verdict)) {
    // Only a token signed by one of the keys gets here: a fuzzer that forged
    // one has found a real bug.
    FUZZ_CHECK(false);
    (void)id;
  } else {
    const auto& why = std::get<transport::oauth::Rejection>(verdict);
    FUZZ_CHECK(!why.message.empty());
  }
  return 0;
}
