// What an intercepted request may be (a profile's rules): its method from a
// list, its path under one of a list of prefixes. The path is matched as the
// destination will read it: the request target normalised first (its query
// left aside, percent-encoded unreserved characters decoded, other escapes
// in upper case, dot segments resolved, empty segments removed), and what
// cannot be normalised safely is refused: an encoded slash or backslash, a
// NUL or control character, a ';' (path parameters some servers strip), a
// climb above the root. The request sent on carries the normalised path, so
// the destination gets exactly what was checked. Pure; any thread.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "server/util/result.h"

namespace network {

struct RequestRule {
  std::string host;                  // lower case, as the profile's allow list names it
  std::vector<std::string> methods;  // upper case; empty: none
  std::vector<std::string> paths;    // normalised prefixes, each starting with '/'
};

struct Target {
  std::string path;   // normalised
  std::string query;  // with its '?', or ""
};

// The origin-form request target ("/a/b?c") normalised, or why it is refused.
util::Result<Target> normalise_target(std::string_view target);

// A prefix as a profile may list it: normalised already, or why not.
util::Status check_prefix(std::string_view prefix);

// Whether `path` (normalised) is `prefix` or below it: "/v1/reports/" covers
// "/v1/reports/x" only; "/v1/reports" covers "/v1/reports" and
// "/v1/reports/x", never "/v1/reportsx".
bool under_prefix(std::string_view path, std::string_view prefix);

// "" when the rules let `method` `path` to `host` through; else the reason,
// one line the job may print. No rule for the host: allowed (only the
// credential is added).
std::string refusal(const std::vector<RequestRule>& rules, std::string_view host, std::string_view method,
                    std::string_view path);

}  // namespace network
