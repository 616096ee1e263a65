// Request target normalisation (RFC 3986 6.2.2) and the rules' verdicts.
#include "server/network/request_rules.h"

#include <algorithm>
#include <cctype>

namespace network {
namespace {

constexpr size_t kTargetMax = 8192;

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool unreserved(unsigned char c) { return std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~'; }

// pchar (RFC 3986 3.3) less ';', '%' handled apart.
bool plain_path_char(unsigned char c) {
  if (unreserved(c)) return true;
  switch (c) {
    case '!':
    case '$':
    case '&':
    case '\'':
    case '(':
    case ')':
    case '*':
    case '+':
    case ',':
    case '=':
    case ':':
    case '@':
    case '/':
      return true;
    default:
      return false;
  }
}

util::Error refuse(const std::string& why) { return util::make_error(util::ErrorCode::kInvalidArgument, why); }

}  // namespace

util::Result<Target> normalise_target(std::string_view target) {
  if (target.empty() || target[0] != '/') return refuse("the request target is not a path (origin form)");
  if (target.size() > kTargetMax) return refuse("the request target is over 8 KiB");
  Target out;
  std::string_view path = target;
  if (size_t q = target.find('?'); q != std::string_view::npos) {
    path = target.substr(0, q);
    out.query = std::string(target.substr(q));
    for (unsigned char c : out.query)
      if (c < 0x21 || c > 0x7e) return refuse("the query holds a control, space or non-ASCII byte");
  }
  if (path.find('#') != std::string_view::npos) return refuse("the request target holds a fragment");
  // Decode what may be decoded; keep the rest escaped, in upper case.
  std::string decoded;
  decoded.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(path[i]);
    if (c == '%') {
      if (i + 2 >= path.size() || hex_value(path[i + 1]) < 0 || hex_value(path[i + 2]) < 0)
        return refuse("the path holds a '%' that is not an escape");
      const unsigned char v = static_cast<unsigned char>(hex_value(path[i + 1]) * 16 + hex_value(path[i + 2]));
      if (v == '/' || v == '\\') return refuse("the path holds an encoded slash");
      if (v < 0x20 || v == 0x7f) return refuse("the path holds an encoded control character");
      if (v == ';') return refuse("the path holds an encoded ';'");
      if (unreserved(v)) {
        decoded.push_back(static_cast<char>(v));
      } else {
        static constexpr char kHex[] = "0123456789ABCDEF";
        decoded += '%';
        decoded += kHex[v >> 4];
        decoded += kHex[v & 0xF];
      }
      i += 2;
      continue;
    }
    if (c == ';') return refuse("the path holds ';' (path parameters are not allowed)");
    if (c == '\\') return refuse("the path holds a backslash");
    if (!plain_path_char(c)) return refuse("the path holds a character that must be escaped");
    decoded.push_back(static_cast<char>(c));
  }
  // Segments: "." dropped, ".." removes the one before (never past the root), empty ones dropped.
  std::vector<std::string_view> segments;
  std::string_view rest(decoded);
  rest.remove_prefix(1);
  bool ends_in_dir = decoded.size() > 1 && decoded.back() == '/';
  while (true) {
    const size_t slash = rest.find('/');
    std::string_view seg = rest.substr(0, slash);
    const bool last = slash == std::string_view::npos;
    if (seg == "..") {
      if (segments.empty()) return refuse("the path climbs above the root");
      segments.pop_back();
      if (last) ends_in_dir = true;
    } else if (seg == ".") {
      if (last) ends_in_dir = true;
    } else if (!seg.empty()) {
      segments.push_back(seg);
    }
    if (last) break;
    rest.remove_prefix(slash + 1);
  }
  out.path = "/";
  for (size_t i = 0; i < segments.size(); ++i) {
    out.path += segments[i];
    if (i + 1 < segments.size()) out.path += '/';
  }
  if (ends_in_dir && !segments.empty()) out.path += '/';
  return out;
}

util::Status check_prefix(std::string_view prefix) {
  auto n = normalise_target(prefix);
  if (!n) return n.error();
  if (!n->query.empty()) return refuse("a path prefix has no query");
  if (n->path != prefix) return refuse("not in normal form (\"" + n->path + "\")");
  return util::ok_status();
}

bool under_prefix(std::string_view path, std::string_view prefix) {
  if (prefix.empty() || path.substr(0, prefix.size()) != prefix) return false;
  if (path.size() == prefix.size() || prefix.back() == '/') return true;
  return path[prefix.size()] == '/';
}

std::string refusal(const std::vector<RequestRule>& rules, std::string_view host, std::string_view method,
                    std::string_view path) {
  const RequestRule* rule = nullptr;
  for (auto& r : rules)
    if (r.host == host) rule = &r;
  if (!rule) return "";
  if (std::find(rule->methods.begin(), rule->methods.end(), method) == rule->methods.end())
    return "method " + std::string(method) + " is not allowed for " + std::string(host) + " by the network profile";
  for (auto& p : rule->paths)
    if (under_prefix(path, p)) return "";
  return "path " + std::string(path) + " is not under an allowed prefix for " + std::string(host);
}

}  // namespace network
