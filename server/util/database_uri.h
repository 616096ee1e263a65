// PostgreSQL connection URIs as throwbox takes them (serve --database, the
// policy's server.database): recognised, refused when they carry a password,
// and shown without one.
#pragma once
#include <string>

namespace util {

// True when `where` is a libpq connection URI (postgresql://... or postgres://...).
bool is_database_uri(const std::string& where);
// Why `uri` may not be used as given ("" when it may): not a PostgreSQL URI,
// or a password in it, which a command line or a policy file would show;
// libpq's password file or environment carries one instead.
std::string database_uri_problem(const std::string& uri);
// `uri` with its password (user:password@, password=) replaced by "***".
std::string redact_database_uri(const std::string& uri);

}  // namespace util
