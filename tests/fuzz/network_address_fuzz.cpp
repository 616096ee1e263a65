// What a job may reach (server/network/address.cpp) on any text: nothing
// throws, and whatever is accepted is what the checks think it is: an
// authority reads back as itself, a name is one no resolver reads as an
// address, a CIDR has no host bits, an address is only address characters and
// an IPv4-mapped one is judged as its IPv4 address.
// Input: one byte choosing the function (bits 0-1: parse_authority,
// parse_allow, parse_cidr, parse_address; bit 2: parse_authority with the
// default port 80), then the text.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

#include "server/network/address.h"
#include "tests/fuzz/check.h"

namespace {

using network::Address;

bool only_chars(std::string_view s, std::string_view set) { return s.find_first_not_of(set) == std::string_view::npos; }

// The IPv4-mapped form of an IPv4 address (::ffff:a.b.c.d).
Address mapped(const Address& v4) {
  Address m;
  m.v6 = true;
  m.bytes[10] = m.bytes[11] = 0xff;
  for (size_t i = 0; i < 4; ++i) m.bytes[12 + i] = v4.bytes[i];
  return m;
}

void check_address(const Address& a) {
  auto again = network::parse_address(a.text());
  FUZZ_CHECK(again.has_value());
  FUZZ_CHECK(*again == a);
  const auto range = network::special_range(a);
  const Address plain = a.unmapped();
  FUZZ_CHECK(plain.v6 == (a.v6 && plain == a));
  FUZZ_CHECK(range.has_value() == network::special_range(plain).has_value());
  if (!a.v6) FUZZ_CHECK(network::special_range(mapped(a)) == range);
  if (range) FUZZ_CHECK(!range->empty());
}

// A name as the checks compare it, and one a resolver can only look up.
void check_name(const std::string& host) {
  FUZZ_CHECK(!host.empty() && host.size() <= 253);
  FUZZ_CHECK(only_chars(host, "abcdefghijklmnopqrstuvwxyz0123456789.-"));
  size_t start = 0;
  for (;;) {
    const size_t dot = host.find('.', start);
    const std::string label = host.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    FUZZ_CHECK(!label.empty() && label.size() <= 63 && label.front() != '-' && label.back() != '-');
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  struct in_addr ignored {};
  FUZZ_CHECK(::inet_aton(host.c_str(), &ignored) == 0);
  FUZZ_CHECK(!network::parse_address(host).has_value());
}

void check_authority(std::string_view text, std::optional<uint16_t> default_port) {
  auto a = network::parse_authority(text, default_port);
  if (!a) {
    FUZZ_CHECK(!a.error().message.empty());
    return;
  }
  FUZZ_CHECK(a->port != 0);
  if (a->literal) {
    auto address = network::parse_address(a->host);
    FUZZ_CHECK(address.has_value());
    FUZZ_CHECK(address->text() == a->host);
    check_address(*address);
  } else {
    check_name(a->host);
  }
  auto back = network::parse_authority(a->text(), std::nullopt);
  FUZZ_CHECK(back.ok());
  FUZZ_CHECK(back->host == a->host && back->port == a->port && back->literal == a->literal);
  if (!default_port) {
    // A default port only fills in a missing one.
    auto with_default = network::parse_authority(text, 80);
    FUZZ_CHECK(with_default.ok());
    FUZZ_CHECK(with_default->host == a->host && with_default->port == a->port);
  }
}

void check_allow(std::string_view text) {
  auto rule = network::parse_allow(text);
  if (!rule) {
    FUZZ_CHECK(!rule.error().message.empty());
    return;
  }
  FUZZ_CHECK(rule->port != 0);
  const std::string port = ":" + std::to_string(rule->port);
  if (rule->literal) {
    FUZZ_CHECK(!rule->wildcard);
    FUZZ_CHECK(network::parse_address(rule->host).has_value());
  } else {
    check_name(rule->host);
  }
  const std::string host =
      rule->literal && rule->host.find(':') != std::string::npos ? "[" + rule->host + "]" : rule->host;
  auto itself = network::parse_authority(host + port, std::nullopt);
  FUZZ_CHECK(itself.ok());
  FUZZ_CHECK(network::allows({*rule}, *itself) == !rule->wildcard);
  if (rule->wildcard) {
    // One label more is under the suffix, unless the name grows too long.
    auto under = network::parse_authority("a." + rule->host + port, std::nullopt);
    if (under) FUZZ_CHECK(network::allows({*rule}, *under));
    auto other_port =
        network::parse_authority("a." + rule->host + ":" + std::to_string(rule->port % 65535 + 1), std::nullopt);
    if (other_port) FUZZ_CHECK(!network::allows({*rule}, *other_port));
  }
}

void check_cidr(std::string_view text) {
  auto c = network::parse_cidr(text);
  if (!c) {
    FUZZ_CHECK(!c.error().message.empty());
    return;
  }
  const int bits = c->base.v6 ? 128 : 32;
  FUZZ_CHECK(c->prefix >= 0 && c->prefix <= bits);
  for (int bit = c->prefix; bit < bits; ++bit)
    FUZZ_CHECK((c->base.bytes[static_cast<size_t>(bit / 8)] & (0x80 >> (bit % 8))) == 0);
  FUZZ_CHECK(c->contains(c->base));
  Address last = c->base;
  for (int bit = c->prefix; bit < bits; ++bit)
    last.bytes[static_cast<size_t>(bit / 8)] |= static_cast<uint8_t>(0x80 >> (bit % 8));
  FUZZ_CHECK(c->contains(last));
  if (!c->base.v6) FUZZ_CHECK(!c->contains(mapped(c->base)));
  auto again = network::parse_cidr(c->text());
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->base == c->base && again->prefix == c->prefix);
  check_address(c->base);
  check_address(last);
}

void check_parse_address(std::string_view text) {
  auto a = network::parse_address(text);
  if (!a) return;
  // Strict: the text is an address and nothing else.
  FUZZ_CHECK(only_chars(text, "0123456789abcdefABCDEF.:"));
  if (!a->v6) {
    // The resolver's reading (inet_aton) of a dotted quad is the same address.
    struct in_addr resolved {};
    FUZZ_CHECK(::inet_aton(std::string(text).c_str(), &resolved) != 0);
    FUZZ_CHECK(std::memcmp(&resolved, a->bytes.data(), 4) == 0);
  }
  check_address(*a);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t op = data[0];
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (op & 3) {
      case 0:
        check_authority(text, op & 4 ? std::optional<uint16_t>(80) : std::nullopt);
        break;
      case 1:
        check_allow(text);
        break;
      case 2:
        check_cidr(text);
        break;
      case 3:
        check_parse_address(text);
        break;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "threw: %s\n", e.what());
    FUZZ_CHECK(!"a network parser threw");
  }
  return 0;
}
