// Tokens file parsing and constant-time token lookup.
#include "server/transport/auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <sys/stat.h>

#include <cerrno>
#include <sstream>

#include "server/util/fs.h"
#include "server/util/text.h"

namespace transport::http {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool valid_tenant(const std::string& t) {
  return !t.empty() && t.size() <= 64 &&
         t.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") == std::string::npos;
}

}  // namespace

util::Result<Auth> Auth::load(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return util::make_error(util::ErrorCode::kAuth, "tokens file: " + util::call_error("stat", path, errno));
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    return util::make_error(
        util::ErrorCode::kAuth, "tokens file " + path + " is readable or writable by group or others (mode " + [&] {
          std::ostringstream o;
          o << std::oct << (st.st_mode & 0777);
          return o.str();
        }() + "); chmod 600 it");
  auto text = util::read_file(path, 1 << 20);
  if (!text) return util::make_error(util::ErrorCode::kAuth, "tokens file " + path + ": " + text.error().message);
  return parse(*text, path);
}

util::Result<Auth> Auth::parse(std::string_view text, const std::string& source) {
  Auth a;
  std::istringstream in{std::string(text)};
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream fields(line);
    std::string tenant, hex, extra;
    if (!(fields >> tenant)) continue;
    auto where = source + ":" + std::to_string(n) + ": ";
    if (!(fields >> hex) || (fields >> extra))
      return util::make_error(util::ErrorCode::kAuth, where + "expected \"<tenant> <sha256 hex of the token>\"");
    if (!valid_tenant(tenant))
      return util::make_error(util::ErrorCode::kAuth, where + "tenant names are 1-64 of [a-z0-9_-]");
    // OAuth tenants are named oauth-...: a static tenant of that name would
    // be an OAuth user's, and read its data.
    if (tenant.rfind(kOAuthTenantPrefix, 0) == 0)
      return util::make_error(util::ErrorCode::kAuth, where + "tenant \"" + tenant + "\": names starting with \"" +
                                                          kOAuthTenantPrefix +
                                                          "\" are OAuth users' (--oauth); choose another");
    if (hex.size() != 64)
      return util::make_error(util::ErrorCode::kAuth, where + "the digest must be 64 hex digits (sha256)");
    Entry e{tenant, {}};
    for (size_t i = 0; i < 32; ++i) {
      int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
      if (hi < 0 || lo < 0)
        return util::make_error(util::ErrorCode::kAuth, where + "the digest must be 64 hex digits (sha256)");
      e.digest[i] = static_cast<unsigned char>(hi * 16 + lo);
    }
    a.entries_.push_back(std::move(e));
  }
  if (a.entries_.empty()) return util::make_error(util::ErrorCode::kAuth, source + ": no token in the file");
  return a;
}

std::optional<std::string> Auth::tenant_for(std::string_view token) const {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest);
  // Every entry is compared, whatever matched: the time does not tell which.
  const Entry* found = nullptr;
  for (const Entry& e : entries_) {
    bool same = CRYPTO_memcmp(e.digest.data(), digest, sizeof digest) == 0;
    if (same && !found) found = &e;
  }
  if (!found) return std::nullopt;
  return found->tenant;
}

std::optional<std::string> bearer_token(std::string_view h) {
  constexpr std::string_view kScheme = "Bearer ";
  if (h.size() <= kScheme.size()) return std::nullopt;
  for (size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(h[i])) != std::tolower(static_cast<unsigned char>(kScheme[i])))
      return std::nullopt;
  std::string_view token = h.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  if (token.empty() || token.size() > 4096) return std::nullopt;
  for (char c : token)
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f) return std::nullopt;
  return std::string(token);
}

std::string bearer_challenge(std::string_view description) {
  std::string text;
  for (char c : description.substr(0, 300))
    if (c >= 0x20 && c <= 0x7e && c != '"' && c != '\\') text += c;
  return R"(Bearer realm="throwbox", error="invalid_token", error_description=")" + text + "\"";
}

}  // namespace transport::http
