// JSON Web Key Sets (RFC 7517, RFC 7518 section 6) for the OAuth resource
// server: an issuer's signing keys, each checked by building it with OpenSSL
// (a PEM public key), and kept as the public JWK that cjose verifies with.
// Pure functions; any server thread. Never holds or accepts a private or
// symmetric key: an "oct" key or one with private members is skipped.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/util/result.h"

namespace transport::oauth {

// base64url without padding (RFC 7515 section 2); nullopt on any other byte.
std::optional<std::string> base64url_decode(std::string_view text);

struct Jwk {
  std::string kid;         // "" when the key has none
  std::string kty;         // "RSA" or "EC"
  std::string crv;         // EC: "P-256", "P-384" or "P-521"
  std::string alg;         // "" when the key does not pin one
  std::string pem;         // SubjectPublicKeyInfo, PEM: OpenSSL accepted the key
  std::string public_jwk;  // {"kty","n","e"} or {"kty","crv","x","y"}: the key and nothing else
};

// The public signing keys of a JWKS document. Keys for another use ("use":
// "enc"), of another type, or carrying private members are left out; a key
// of a supported type that cannot be built is an error naming its kid.
util::Result<std::vector<Jwk>> parse_jwks(std::string_view text);

}  // namespace transport::oauth
