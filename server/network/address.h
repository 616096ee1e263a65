// What a job may reach: request authorities ("host:port"), a profile's allow
// rules, addresses and the special-purpose ranges no profile reaches unless
// the policy's network.allow_private names them. Pure functions, no I/O.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/util/result.h"

namespace network {

// An IPv4 or IPv6 address; IPv4 in the first 4 bytes.
struct Address {
  bool v6 = false;
  std::array<uint8_t, 16> bytes{};
  std::string text() const;
  // ::ffff:a.b.c.d as a.b.c.d; any other address as itself.
  Address unmapped() const;
  bool operator==(const Address&) const = default;
};
// Strict: dotted-quad IPv4 (inet_pton, no "0x7f" or "2130706433") or IPv6.
std::optional<Address> parse_address(std::string_view text);

struct Cidr {
  Address base;
  int prefix = 0;
  bool contains(const Address& a) const;
  std::string text() const;
};
util::Result<Cidr> parse_cidr(std::string_view text);

// The special-purpose range `a` lies in, named for a message ("link-local
// 169.254.0.0/16 (cloud metadata)"), or nullopt for a global address. IPv4
// per the IANA IPv4 special-purpose registry plus multicast and the reserved
// 240/4; IPv6: anything outside 2000::/3 and the registry's ranges inside it.
// An IPv4-mapped address is judged as its IPv4 address.
std::optional<std::string> special_range(const Address& a);

// A request's destination. host is lower case without a trailing dot; for a
// literal it is the address's canonical text (IPv6 without brackets).
struct Authority {
  std::string host;
  uint16_t port = 0;
  bool literal = false;
  std::string text() const;  // host:port, [v6]:port
};
// "host:port", "[v6]:port"; with default_port the port may be left out. A
// name is 1-253 characters of LDH labels (1-63 each); a name that inet_aton
// would read as an address ("127.1", "0x7f.1", "2130706433") is refused, so a
// resolver can never turn a "name" into an address the check did not see.
util::Result<Authority> parse_authority(std::string_view text, std::optional<uint16_t> default_port);

// One entry of a profile's allow list: "host:port", "*.suffix:port" (any
// name under suffix, not suffix itself), or an address literal and port.
struct AllowRule {
  std::string host;  // the suffix for a wildcard, without "*."
  bool wildcard = false;
  bool literal = false;
  uint16_t port = 0;
};
util::Result<AllowRule> parse_allow(std::string_view entry);
bool allows(const std::vector<AllowRule>& rules, const Authority& a);

}  // namespace network
