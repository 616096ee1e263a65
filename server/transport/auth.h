// Bearer tokens for the HTTP transport: a tokens file maps the sha256 of each
// token to a tenant. The file must not be readable by group or others. Tokens
// themselves are never stored, logged or compared other than by digest, in
// constant time over every entry.
#pragma once
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/util/result.h"

namespace transport::http {

// Every OAuth user's tenant name starts with this (oauth.cpp tenant_of); a
// tokens file may not use it.
inline constexpr const char* kOAuthTenantPrefix = "oauth-";

class Auth {
 public:
  // Lines: "<tenant> <64 hex digits: sha256 of the token>", '#' comments and
  // blank lines ignored. Errors name the line.
  static util::Result<Auth> load(const std::string& path);
  static util::Result<Auth> parse(std::string_view text, const std::string& source);
  // The tenant of a bearer token, or nullopt.
  std::optional<std::string> tenant_for(std::string_view token) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string tenant;
    std::array<unsigned char, 32> digest;
  };
  std::vector<Entry> entries_;
};

// "Bearer <token>" -> token; nullopt for a missing or malformed header.
std::optional<std::string> bearer_token(std::string_view authorization);

// What a server with a tokens file and no --oauth tells a client that came
// without a valid token. Such a client finds no OAuth metadata, and may
// otherwise report only that its OAuth registration failed.
inline constexpr const char* kBearerTokenNeeded =
    "this server needs a bearer token (Authorization: Bearer <token>); it has no OAuth";

// The WWW-Authenticate value of a 401 without OAuth:
// Bearer realm="throwbox", error="invalid_token", error_description="<description>"
// (the description cut to 300 bytes of printable ASCII without '"' or '\').
std::string bearer_challenge(std::string_view description);

}  // namespace transport::http
