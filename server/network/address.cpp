// Addresses, ranges, authorities and allow rules (address.h).
#include "server/network/address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <cstring>

namespace network {
namespace {

using util::ErrorCode;
using util::make_error;

struct Range {
  const char* cidr;
  const char* name;
};

// IANA IPv4 Special-Purpose Address Registry, multicast and the reserved block.
constexpr Range kSpecialV4[] = {
    {"0.0.0.0/8", "\"this network\" 0.0.0.0/8"},
    {"10.0.0.0/8", "private 10.0.0.0/8"},
    {"100.64.0.0/10", "shared (CGNAT) 100.64.0.0/10"},
    {"127.0.0.0/8", "loopback 127.0.0.0/8"},
    {"169.254.0.0/16", "link-local 169.254.0.0/16 (cloud metadata)"},
    {"172.16.0.0/12", "private 172.16.0.0/12"},
    {"192.0.0.0/24", "IETF protocol assignments 192.0.0.0/24"},
    {"192.0.2.0/24", "documentation 192.0.2.0/24"},
    {"192.31.196.0/24", "AS112 192.31.196.0/24"},
    {"192.52.193.0/24", "AMT 192.52.193.0/24"},
    {"192.88.99.0/24", "6to4 relay anycast 192.88.99.0/24"},
    {"192.168.0.0/16", "private 192.168.0.0/16"},
    {"192.175.48.0/24", "AS112 direct delegation 192.175.48.0/24"},
    {"198.18.0.0/15", "benchmarking 198.18.0.0/15"},
    {"198.51.100.0/24", "documentation 198.51.100.0/24"},
    {"203.0.113.0/24", "documentation 203.0.113.0/24"},
    {"224.0.0.0/4", "multicast 224.0.0.0/4"},
    {"240.0.0.0/4", "reserved 240.0.0.0/4 (and broadcast)"},
};
// Inside 2000::/3 (global unicast); everything outside it is refused as a whole.
constexpr Range kSpecialV6[] = {
    {"2001::/23", "IETF protocol assignments 2001::/23 (Teredo included)"},
    {"2001:db8::/32", "documentation 2001:db8::/32"},
    {"2002::/16", "6to4 2002::/16"},
    {"3fff::/20", "documentation 3fff::/20"},
};
constexpr Range kOutsideGlobalV6[] = {
    {"::/128", "unspecified ::/128"},       {"::1/128", "loopback ::1/128"},
    {"64:ff9b::/96", "NAT64 64:ff9b::/96"}, {"64:ff9b:1::/48", "local NAT64 64:ff9b:1::/48"},
    {"100::/64", "discard 100::/64"},       {"5f00::/16", "SRv6 5f00::/16"},
    {"fc00::/7", "unique local fc00::/7"},  {"fe80::/10", "link-local fe80::/10"},
    {"fec0::/10", "site-local fec0::/10"},  {"ff00::/8", "multicast ff00::/8"},
    {"::/96", "IPv4-compatible ::/96"},
};

template <size_t N>
std::vector<std::pair<Cidr, const char*>> compile(const Range (&ranges)[N]) {
  std::vector<std::pair<Cidr, const char*>> out;
  for (auto& r : ranges) out.emplace_back(*parse_cidr(r.cidr), r.name);
  return out;
}

bool all_of_chars(std::string_view s, const char* set) { return s.find_first_not_of(set) == std::string_view::npos; }

util::Result<uint16_t> parse_port(std::string_view s) {
  if (s.empty() || s.size() > 5 || !all_of_chars(s, "0123456789") || (s.size() > 1 && s[0] == '0'))
    return make_error(ErrorCode::kInvalidArgument, "the port must be a number from 1 to 65535");
  unsigned v = 0;
  for (char c : s) v = v * 10 + static_cast<unsigned>(c - '0');
  if (v == 0 || v > 65535) return make_error(ErrorCode::kInvalidArgument, "the port must be a number from 1 to 65535");
  return static_cast<uint16_t>(v);
}

// A DNS name as the checks compare it; an error for anything else.
util::Result<std::string> normalise_name(std::string_view host) {
  std::string h(host);
  std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (!h.empty() && h.back() == '.') h.pop_back();
  if (h.empty() || h.size() > 253)
    return make_error(ErrorCode::kInvalidArgument, "the host name must be 1-253 characters");
  if (!all_of_chars(h, "abcdefghijklmnopqrstuvwxyz0123456789-."))
    return make_error(ErrorCode::kInvalidArgument, "the host name may hold only letters, digits, '-' and '.'");
  size_t start = 0;
  for (;;) {
    size_t dot = h.find('.', start);
    std::string_view label =
        std::string_view(h).substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-')
      return make_error(ErrorCode::kInvalidArgument, "the host name has an empty, over-long or '-'-edged label");
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  // inet_aton reads "127.1", "0x7f000001" and "2130706433" as addresses, and
  // getaddrinfo with it: such a "name" would reach an address unchecked.
  struct in_addr ignored {};
  if (::inet_aton(h.c_str(), &ignored) != 0)
    return make_error(ErrorCode::kInvalidArgument, "the host reads as an IPv4 address in a non-canonical form");
  return h;
}

}  // namespace

std::string Address::text() const {
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(v6 ? AF_INET6 : AF_INET, bytes.data(), buf, sizeof buf);
  return buf;
}

Address Address::unmapped() const {
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (!v6 || std::memcmp(bytes.data(), kMapped, 12) != 0) return *this;
  Address a;
  std::memcpy(a.bytes.data(), bytes.data() + 12, 4);
  return a;
}

std::optional<Address> parse_address(std::string_view text) {
  // inet_pton reads a C string: "1.2.3.4\0anything" would pass as 1.2.3.4.
  if (text.find('\0') != std::string_view::npos) return std::nullopt;
  std::string s(text);
  Address a;
  if (::inet_pton(AF_INET, s.c_str(), a.bytes.data()) == 1) return a;
  a.v6 = true;
  if (::inet_pton(AF_INET6, s.c_str(), a.bytes.data()) == 1) return a;
  return std::nullopt;
}

bool Cidr::contains(const Address& a) const {
  if (a.v6 != base.v6) return false;
  int bits = prefix;
  for (size_t i = 0; bits > 0; ++i, bits -= 8) {
    const uint8_t mask = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - bits));
    if ((a.bytes[i] & mask) != (base.bytes[i] & mask)) return false;
  }
  return true;
}

std::string Cidr::text() const { return base.text() + "/" + std::to_string(prefix); }

util::Result<Cidr> parse_cidr(std::string_view text) {
  const size_t slash = text.find('/');
  auto bad = [&] {
    return make_error(
        ErrorCode::kInvalidArgument,
        "\"" + std::string(text) + "\" is not a CIDR (an address, '/', a prefix length: 10.0.0.0/8, fd00::/8)");
  };
  if (slash == std::string_view::npos) return bad();
  auto addr = parse_address(text.substr(0, slash));
  std::string_view len = text.substr(slash + 1);
  if (!addr || len.empty() || len.size() > 3 || !all_of_chars(len, "0123456789")) return bad();
  int prefix = std::stoi(std::string(len));
  if (prefix > (addr->v6 ? 128 : 32)) return bad();
  Cidr c{*addr, prefix};
  // Host bits set ("10.0.0.1/8") is most likely a typo for another range.
  Cidr exact = c;
  for (int bit = prefix; bit < (addr->v6 ? 128 : 32); ++bit)
    exact.base.bytes[static_cast<size_t>(bit / 8)] &= static_cast<uint8_t>(~(0x80 >> (bit % 8)));
  if (!(exact.base == c.base))
    return make_error(ErrorCode::kInvalidArgument,
                      "\"" + std::string(text) + "\" has host bits set; the range is " + exact.text());
  return c;
}

std::optional<std::string> special_range(const Address& address) {
  static const auto v4 = compile(kSpecialV4);
  static const auto v6_in = compile(kSpecialV6);
  static const auto v6_out = compile(kOutsideGlobalV6);
  const Address a = address.unmapped();
  if (!a.v6) {
    for (auto& [cidr, name] : v4)
      if (cidr.contains(a)) return std::string(name);
    return std::nullopt;
  }
  for (auto& [cidr, name] : v6_out)
    if (cidr.contains(a)) return std::string(name);
  if ((a.bytes[0] & 0xe0) != 0x20) return std::string("not global unicast (outside 2000::/3)");
  for (auto& [cidr, name] : v6_in)
    if (cidr.contains(a)) return std::string(name);
  return std::nullopt;
}

std::string Authority::text() const {
  return (literal && host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

util::Result<Authority> parse_authority(std::string_view text, std::optional<uint16_t> default_port) {
  Authority out;
  std::string_view host, port;
  if (text.find('@') != std::string_view::npos)
    return make_error(ErrorCode::kInvalidArgument, "credentials in the authority are not allowed");
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos)
      return make_error(ErrorCode::kInvalidArgument, "an IPv6 literal lacks its ']'");
    host = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return make_error(ErrorCode::kInvalidArgument, "unexpected text after the IPv6 literal");
      port = rest.substr(1);
      if (port.empty()) return make_error(ErrorCode::kInvalidArgument, "the port is empty");
    }
    auto a = parse_address(host);
    if (!a || !a->v6) return make_error(ErrorCode::kInvalidArgument, "not an IPv6 address between '[' and ']'");
    out.host = a->text();
    out.literal = true;
  } else {
    const size_t colon = text.rfind(':');
    host = colon == std::string_view::npos ? text : text.substr(0, colon);
    if (colon != std::string_view::npos) {
      port = text.substr(colon + 1);
      if (port.empty()) return make_error(ErrorCode::kInvalidArgument, "the port is empty");
    }
    if (host.find(':') != std::string_view::npos)
      return make_error(ErrorCode::kInvalidArgument, "an IPv6 literal must be written in brackets");
    if (auto a = parse_address(host)) {
      out.host = a->text();
      out.literal = true;
    } else {
      auto name = normalise_name(host);
      if (!name) return name.error();
      out.host = *name;
    }
  }
  if (port.empty()) {
    if (!default_port) return make_error(ErrorCode::kInvalidArgument, "the port is required (host:port)");
    out.port = *default_port;
  } else {
    auto p = parse_port(port);
    if (!p) return p.error();
    out.port = *p;
  }
  return out;
}

util::Result<AllowRule> parse_allow(std::string_view entry) {
  AllowRule rule;
  std::string_view rest = entry;
  if (rest.rfind("*.", 0) == 0) {
    rule.wildcard = true;
    rest.remove_prefix(2);
  }
  auto a = parse_authority(rest, std::nullopt);
  if (!a) return a.error();
  if (rule.wildcard && a->literal) return make_error(ErrorCode::kInvalidArgument, "\"*.\" needs a DNS name after it");
  rule.host = a->host;
  rule.literal = a->literal;
  rule.port = a->port;
  return rule;
}

bool allows(const std::vector<AllowRule>& rules, const Authority& a) {
  for (auto& r : rules) {
    if (r.port != a.port || r.literal != a.literal) continue;
    if (!r.wildcard && r.host == a.host) return true;
    if (r.wildcard && a.host.size() > r.host.size() + 1 &&
        a.host.compare(a.host.size() - r.host.size(), r.host.size(), r.host) == 0 &&
        a.host[a.host.size() - r.host.size() - 1] == '.')
      return true;
  }
  return false;
}

}  // namespace network
