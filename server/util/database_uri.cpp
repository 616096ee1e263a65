// Database connection URIs (database_uri.h).
#include "server/util/database_uri.h"

#include <optional>
#include <utility>

namespace util {
namespace {

// "scheme://[userinfo@]host..." -> the userinfo's span, if any.
std::optional<std::pair<size_t, size_t>> userinfo(const std::string& uri) {
  size_t start = uri.find("://");
  if (start == std::string::npos) return std::nullopt;
  start += 3;
  size_t end = uri.find_first_of("/?#", start);
  if (end == std::string::npos) end = uri.size();
  size_t at = uri.rfind('@', end);
  if (at == std::string::npos || at < start) return std::nullopt;
  return std::make_pair(start, at);
}

// Whether the query string sets `key`.
bool query_sets(const std::string& uri, const std::string& key) {
  size_t q = uri.find('?');
  if (q == std::string::npos) return false;
  size_t i = q + 1;
  while (i < uri.size()) {
    size_t amp = uri.find('&', i);
    if (amp == std::string::npos) amp = uri.size();
    std::string pair = uri.substr(i, amp - i);
    if (pair.compare(0, key.size() + 1, key + "=") == 0) return true;
    i = amp + 1;
  }
  return false;
}

}  // namespace

bool is_database_uri(const std::string& where) {
  return where.rfind("postgresql://", 0) == 0 || where.rfind("postgres://", 0) == 0;
}

std::string redact_database_uri(const std::string& uri) {
  std::string out = uri;
  if (auto span = userinfo(uri)) {
    size_t colon = uri.find(':', span->first);
    if (colon != std::string::npos && colon < span->second)
      out = uri.substr(0, colon) + ":***" + uri.substr(span->second);
  }
  size_t q = out.find('?');
  if (q != std::string::npos) {
    std::string head = out.substr(0, q + 1), rest = out.substr(q + 1), kept;
    size_t i = 0;
    while (i <= rest.size()) {
      size_t amp = rest.find('&', i);
      if (amp == std::string::npos) amp = rest.size();
      std::string pair = rest.substr(i, amp - i);
      if (pair.rfind("password=", 0) == 0) pair = "password=***";
      if (!pair.empty()) kept += (kept.empty() ? "" : "&") + pair;
      i = amp + 1;
    }
    out = head + kept;
  }
  return out;
}

std::string database_uri_problem(const std::string& uri) {
  if (!is_database_uri(uri)) return "not a PostgreSQL connection URI (postgresql://[user@]host[:port]/dbname[?...])";
  auto span = userinfo(uri);
  if ((span && uri.find(':', span->first) < span->second) || query_sets(uri, "password"))
    return "carries a password, which a command line or policy file would show: leave it out and give it in "
           "libpq's password file (~/.pgpass, or PGPASSFILE) or PGPASSWORD in the server's environment";
  return "";
}

}  // namespace util
