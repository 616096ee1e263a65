// What a job may reach (server/network/address.h) and how a job's network
// reaches the broker: strict addresses and names, so a resolver can never
// read a checked "name" as another destination; the special-purpose ranges
// at their edges; allow rules; the warm loader's proxy variables; the
// listener descriptor on the runner's stdout (LineReader).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/broker/job_spec.h"
#include "server/broker/runner_protocol.h"
#include "server/network/address.h"
#include "server/policy/policy.h"
#include "server/sandbox/spec.h"
#include "server/util/clock.h"
#include "server/util/fd.h"
#include "server/util/fd_passing.h"
#include "tests/unit/temp_dir.h"

using network::Address;
using nlohmann::json;

namespace {

Address addr(const char* text) {
  auto a = network::parse_address(text);
  REQUIRE_MESSAGE(a.has_value(), text);
  return *a;
}

Address v4(uint32_t host_order) {
  Address a;
  a.bytes[0] = static_cast<uint8_t>(host_order >> 24);
  a.bytes[1] = static_cast<uint8_t>(host_order >> 16);
  a.bytes[2] = static_cast<uint8_t>(host_order >> 8);
  a.bytes[3] = static_cast<uint8_t>(host_order);
  return a;
}

uint32_t v4_value(const Address& a) {
  return static_cast<uint32_t>(a.bytes[0]) << 24 | static_cast<uint32_t>(a.bytes[1]) << 16 |
         static_cast<uint32_t>(a.bytes[2]) << 8 | a.bytes[3];
}

// The range's name, or "" for a global address.
std::string range_of(const char* text) { return network::special_range(addr(text)).value_or(""); }

template <class T>
std::string error_of(const util::Result<T>& r) {
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == util::ErrorCode::kInvalidArgument);
  return r.error().message;
}

network::Authority authority(std::string_view text, std::optional<uint16_t> default_port = std::nullopt) {
  auto a = network::parse_authority(text, default_port);
  REQUIRE_MESSAGE(a.ok(), (std::string(text) + ": " + (a.ok() ? "" : a.error().message)));
  return *a;
}

std::vector<network::AllowRule> rules(std::initializer_list<const char*> entries) {
  std::vector<network::AllowRule> out;
  for (const char* e : entries) {
    auto r = network::parse_allow(e);
    REQUIRE_MESSAGE(r.ok(), e);
    out.push_back(*r);
  }
  return out;
}

// The IANA IPv4 special-purpose registry, multicast and 240/4, written out
// independently of address.cpp's table: each must be flagged edge to edge.
constexpr const char* kSpecialV4Ranges[] = {
    "0.0.0.0/8",       "10.0.0.0/8",    "100.64.0.0/10",   "127.0.0.0/8",     "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24",    "192.0.2.0/24",  "192.31.196.0/24", "192.52.193.0/24", "192.88.99.0/24", "192.168.0.0/16",
    "192.175.48.0/24", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",  "224.0.0.0/4",    "240.0.0.0/4",
};

bool in_listed_v4_range(const Address& a) {
  for (const char* c : kSpecialV4Ranges)
    if (network::parse_cidr(c)->contains(a)) return true;
  return false;
}

json policy_doc() {
  return json{{"version", 1},
              {"runtimes",
               {{"sh", {{"command", json::array({"/bin/sh"})}, {"code_file", "main.sh"}}},
                {"py", {{"command", json::array({"/bin/sh"})}, {"code_file", "main.py"}, {"loader", "python"}}}}},
              {"sandbox", {{"readonly_paths", json::array({"/usr"})}}}};
}

policy::Policy parse_policy(const json& doc) {
  auto p = policy::parse(doc, "test.json");
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
  return *p;
}

broker::SpecHost test_host() { return broker::spec_host("/state", json{{"mode", "none"}}, "", {96, 8000, 16, 1600}); }

broker::JobRequest request(std::string network) {
  broker::JobRequest r;
  r.tenant = "alice";
  r.runtime = "sh";
  r.code = "echo hi";
  r.network = std::move(network);
  return r;
}

struct TempDir : unit::TempDir {
  TempDir() : unit::TempDir("network") {}
};

// Sends `line` with `fd` attached (SCM_RIGHTS), as a runner hands over a listener.
void send_with_fd(int sock, const std::string& line, int fd) {
  REQUIRE(util::send_with_fd(sock, line.data(), line.size(), fd) == static_cast<ssize_t>(line.size()));
}

int64_t soon() { return util::now_ms() + 5000; }

}  // namespace

TEST_CASE("parse_address: strict dotted quads and IPv6, nothing inet_aton would also read") {
  CHECK(addr("192.0.2.1").v6 == false);
  CHECK(addr("192.0.2.1").bytes[3] == 1);
  CHECK(addr("2001:db8::1").v6);
  CHECK(addr("::").v6);
  for (const char* bad : {"127.1", "0x7f.0.0.1", "2130706433", "1.2.3.4.5", "", "010.0.0.1", "1.2.3.256", " 1.2.3.4",
                          "1.2.3.4 ", "[::1]", "fe80::1%eth0", "::g", "1.2.3.4/32"})
    CHECK_MESSAGE(!network::parse_address(bad).has_value(), "accepted \"", bad, "\"");
}

TEST_CASE("parse_address: a NUL inside the text is no address (inet_pton stops reading at it)") {
  using namespace std::string_view_literals;
  CHECK_FALSE(network::parse_address("1.2.3.4\0evil.example"sv).has_value());
  CHECK_FALSE(network::parse_address("::\0"
                                     "7\x04"
                                     "ffff:169.254.169.254"sv)
                  .has_value());  // the fuzzer's finding
  CHECK_FALSE(network::parse_address("::1\0"sv).has_value());
  CHECK_FALSE(network::parse_authority("127.0.0.1\0.evil.example:80"sv, std::nullopt).ok());
  CHECK_FALSE(network::parse_authority("[::1\0.evil.example]:80"sv, std::nullopt).ok());
  CHECK_FALSE(network::parse_cidr("10.0.0.0\0junk/8"sv).ok());
  CHECK_FALSE(network::parse_allow("198.51.100.7\0x:80"sv).ok());
}

TEST_CASE("Address::text is canonical; an IPv4-mapped address stays IPv6 until unmapped()") {
  CHECK(addr("2001:DB8:0:0:0:0:0:1").text() == "2001:db8::1");
  CHECK(addr("10.0.0.1").text() == "10.0.0.1");
  const Address mapped = addr("::ffff:10.0.0.1");
  CHECK(mapped.v6);
  CHECK(mapped.text() == "::ffff:10.0.0.1");
  CHECK_FALSE(mapped.unmapped().v6);
  CHECK(mapped.unmapped() == addr("10.0.0.1"));
  CHECK(mapped.unmapped().text() == "10.0.0.1");
  CHECK(addr("::ffff:0:10.0.0.1").unmapped().v6);  // IPv4-translated, not mapped
  CHECK(addr("2001:db8::1").unmapped() == addr("2001:db8::1"));
  CHECK(addr("10.0.0.1").unmapped() == addr("10.0.0.1"));
}

TEST_CASE("parse_cidr: a base without host bits and a prefix in range") {
  for (const char* good : {"10.0.0.0/8", "fd00::/8", "0.0.0.0/0", "::/0", "192.0.2.7/32", "2001:db8::1/128"}) {
    auto c = network::parse_cidr(good);
    REQUIRE_MESSAGE(c.ok(), good);
    CHECK(c->text() == good);
  }
  CHECK(network::parse_cidr("10.0.0.0/8")->prefix == 8);
  const std::string host_bits = error_of(network::parse_cidr("10.0.0.1/8"));
  CHECK(host_bits.find("host bits") != std::string::npos);
  CHECK(host_bits.find("10.0.0.0/8") != std::string::npos);
  CHECK(error_of(network::parse_cidr("fd00::1/8")).find("fd00::/8") != std::string::npos);
  for (const char* bad : {"/8", "10.0.0.0", "10.0.0.0/33", "::/129", "10.0.0.0/-1", "10.0.0.0/8x", "10.0.0.0/",
                          "10.0.0.0/+8", "10.0.0.0/ 8", "10.0.0.0/8/8", "10.1/8", "10.0.0.0/1000"})
    CHECK_MESSAGE(!network::parse_cidr(bad).ok(), "accepted \"", bad, "\"");
}

TEST_CASE("Cidr::contains: inclusive at both ends, never across families") {
  const network::Cidr ten = *network::parse_cidr("10.0.0.0/8");
  CHECK(ten.contains(addr("10.0.0.0")));
  CHECK(ten.contains(addr("10.255.255.255")));
  CHECK_FALSE(ten.contains(addr("11.0.0.0")));
  CHECK_FALSE(ten.contains(addr("9.255.255.255")));
  const network::Cidr odd = *network::parse_cidr("100.64.0.0/10");  // a prefix not on a byte boundary
  CHECK(odd.contains(addr("100.127.255.255")));
  CHECK_FALSE(odd.contains(addr("100.128.0.0")));
  CHECK_FALSE(odd.contains(addr("100.63.255.255")));
  const network::Cidr all_v6 = *network::parse_cidr("::/0");
  CHECK(all_v6.contains(addr("2001:db8::1")));
  CHECK_FALSE(all_v6.contains(addr("10.0.0.1")));
  CHECK_FALSE(network::parse_cidr("::ffff:0.0.0.0/96")->contains(addr("10.0.0.1")));
  CHECK_FALSE(network::parse_cidr("0.0.0.0/0")->contains(addr("::ffff:10.0.0.1")));
  CHECK(network::parse_cidr("fd00::/8")->contains(addr("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")));
  CHECK_FALSE(network::parse_cidr("fd00::/8")->contains(addr("fe00::")));
}

TEST_CASE("special_range: every IPv4 special-purpose range is flagged edge to edge, and nothing next to it") {
  for (const char* text : kSpecialV4Ranges) {
    CAPTURE(text);
    const network::Cidr c = *network::parse_cidr(text);
    const uint32_t first = v4_value(c.base);
    const uint32_t last = first | (c.prefix == 0 ? 0xffffffffu : (0xffffffffu >> c.prefix));
    for (uint32_t edge : {first, last}) {
      auto range = network::special_range(v4(edge));
      REQUIRE_MESSAGE(range.has_value(), v4(edge).text());
      CHECK_MESSAGE(range->find(text) != std::string::npos, v4(edge).text(), " is in ", *range);
    }
    if (first > 0) {
      const Address below = v4(first - 1);
      CHECK_MESSAGE(network::special_range(below).has_value() == in_listed_v4_range(below), below.text());
    }
    if (last < 0xffffffffu) {
      const Address above = v4(last + 1);
      CHECK_MESSAGE(network::special_range(above).has_value() == in_listed_v4_range(above), above.text());
    }
  }
}

TEST_CASE("special_range: IPv4 examples at the edges, and public addresses") {
  CHECK(range_of("9.255.255.255").empty());
  CHECK(range_of("10.0.0.0") == "private 10.0.0.0/8");
  CHECK(range_of("11.0.0.0").empty());
  CHECK(range_of("100.63.255.255").empty());
  CHECK(range_of("100.64.0.0").find("CGNAT") != std::string::npos);
  CHECK(range_of("100.127.255.255").find("CGNAT") != std::string::npos);
  CHECK(range_of("100.128.0.0").empty());
  CHECK(range_of("169.254.169.254").find("link-local") != std::string::npos);
  CHECK(range_of("169.254.169.254").find("metadata") != std::string::npos);
  CHECK(range_of("198.17.255.255").empty());
  CHECK(range_of("198.18.0.0").find("benchmarking") != std::string::npos);
  CHECK(range_of("198.19.255.255").find("benchmarking") != std::string::npos);
  CHECK(range_of("198.20.0.0").empty());
  CHECK(range_of("255.255.255.255").find("reserved") != std::string::npos);
  CHECK(range_of("224.0.0.1").find("multicast") != std::string::npos);
  CHECK(range_of("239.255.255.255").find("multicast") != std::string::npos);
  CHECK(range_of("240.0.0.0").find("reserved") != std::string::npos);
  CHECK(range_of("127.0.0.1").find("loopback") != std::string::npos);
  CHECK(range_of("0.0.0.0").find("this network") != std::string::npos);
  for (const char* global : {"1.1.1.1", "8.8.8.8", "93.184.216.34", "172.15.255.255", "172.32.0.0", "192.167.255.255",
                             "192.169.0.0", "223.255.255.255"})
    CHECK_MESSAGE(range_of(global).empty(), global, " flagged as ", range_of(global));
}

TEST_CASE("special_range: IPv6 outside 2000::/3 and the registry's ranges inside it") {
  for (const char* special :
       {"::1",          "::",          "fe80::1", "fc00::1", "fd12::1",          "ff02::1", "64:ff9b::1.2.3.4",
        "64:ff9b:1::1", "2001:db8::1", "2002::1", "2001::1", "2001:1ff:ffff::1", "100::1",  "::1.2.3.4",
        "3fff::1",      "3fff:fff::1", "5f00::1", "fec0::1", "::ffff:0:1.2.3.4", "4000::1", "1fff:ffff::1"})
    CHECK_MESSAGE(!range_of(special).empty(), special, " is not flagged");
  CHECK(range_of("2001::1").find("Teredo") != std::string::npos);
  CHECK(range_of("::1.2.3.4").find("IPv4-compatible") != std::string::npos);
  CHECK(range_of("64:ff9b::1.2.3.4").find("NAT64") != std::string::npos);
  for (const char* global : {"2606:4700::1111", "2a00:1450::1", "2001:200::1", "3fff:1000::1", "2003::1"})
    CHECK_MESSAGE(range_of(global).empty(), global, " flagged as ", range_of(global));
}

TEST_CASE("special_range: an IPv4-mapped address is judged as its IPv4 address") {
  for (const char* mapped : {"::ffff:127.0.0.1", "::ffff:169.254.169.254", "::ffff:10.1.2.3"}) {
    CAPTURE(mapped);
    const Address a = addr(mapped);
    REQUIRE(network::special_range(a).has_value());
    CHECK(network::special_range(a) == network::special_range(a.unmapped()));
  }
  CHECK(range_of("::ffff:10.1.2.3") == "private 10.0.0.0/8");
  CHECK(range_of("::ffff:169.254.169.254").find("metadata") != std::string::npos);
  CHECK(range_of("::ffff:8.8.8.8").empty());
}

TEST_CASE("parse_authority: names are lower case LDH, without a trailing dot") {
  network::Authority a = authority("example.com:443");
  CHECK(a.host == "example.com");
  CHECK(a.port == 443);
  CHECK_FALSE(a.literal);
  a = authority("EXAMPLE.com.:443");
  CHECK(a.host == "example.com");
  CHECK(a.port == 443);
  a = authority("xn--bcher-kva.example:443");
  CHECK(a.host == "xn--bcher-kva.example");
  CHECK(authority("a:1").host == "a");
  CHECK(authority("1.2.3.4.5:80").host == "1.2.3.4.5");  // five parts: inet_aton reads no address
  const std::string label63(63, 'a');
  CHECK(authority(label63 + ".com:1").host == label63 + ".com");
  // 253 characters, the most a name may have, with or without its root dot.
  const std::string name253 = label63 + "." + label63 + "." + label63 + "." + std::string(61, 'b');
  REQUIRE(name253.size() == 253);
  CHECK(authority(name253 + ":1").host == name253);
  CHECK(authority(name253 + ".:1").host == name253);

  CHECK(error_of(network::parse_authority("-a.com:1", std::nullopt)).find("label") != std::string::npos);
  CHECK(error_of(network::parse_authority("a-.com:1", std::nullopt)).find("label") != std::string::npos);
  CHECK(error_of(network::parse_authority("a..b:1", std::nullopt)).find("label") != std::string::npos);
  CHECK(error_of(network::parse_authority(".a:1", std::nullopt)).find("label") != std::string::npos);
  CHECK(error_of(network::parse_authority(std::string(64, 'a') + ".com:1", std::nullopt)).find("label") !=
        std::string::npos);
  CHECK(error_of(network::parse_authority(name253 + "b:1", std::nullopt)).find("1-253") != std::string::npos);
  CHECK(error_of(network::parse_authority(".:1", std::nullopt)).find("1-253") != std::string::npos);
  for (const char* bad :
       {"a_b.com:1", "a b.com:1", "a*.com:1", "*.a.com:1", "a/b:1", "a\\b:1", "caf\xc3\xa9.com:1", "a%2eb:1", ":80"})
    CHECK_MESSAGE(!network::parse_authority(bad, std::nullopt).ok(), "accepted \"", bad, "\"");
  CHECK_FALSE(network::parse_authority(std::string("a\0b.com:1", 9), std::nullopt).ok());
}

TEST_CASE("parse_authority: the port") {
  CHECK(error_of(network::parse_authority("example.com", std::nullopt)).find("port is required") != std::string::npos);
  network::Authority a = authority("example.com", 80);
  CHECK(a.host == "example.com");
  CHECK(a.port == 80);
  CHECK(authority("example.com:8080", 80).port == 8080);
  CHECK(authority("example.com:65535").port == 65535);
  CHECK(authority("example.com:1").port == 1);
  for (const char* port : {"0", "65536", "080", "", "+1", "1e3", "-1", "99999", "123456", " 80", "0x50"}) {
    const std::string text = std::string("example.com:") + port;
    CHECK_MESSAGE(!network::parse_authority(text, std::nullopt).ok(), "accepted \"", text, "\"");
    CHECK_MESSAGE(!network::parse_authority(text, 80).ok(), "accepted \"", text, "\" with a default port");
  }
  CHECK_FALSE(network::parse_authority("[::1]:", 80).ok());
  CHECK(authority("[::1]", 443).port == 443);
}

TEST_CASE("parse_authority: address literals, IPv6 only in brackets") {
  network::Authority a = authority("[::1]:80");
  CHECK(a.host == "::1");
  CHECK(a.port == 80);
  CHECK(a.literal);
  a = authority("127.0.0.1:80");
  CHECK(a.host == "127.0.0.1");
  CHECK(a.literal);
  CHECK(authority("[2001:DB8:0::1]:443").host == "2001:db8::1");
  CHECK(authority("[::ffff:10.0.0.1]:80").host == "::ffff:10.0.0.1");
  CHECK(error_of(network::parse_authority("::1:80", std::nullopt)).find("brackets") != std::string::npos);
  CHECK(error_of(network::parse_authority("::1", 80)).find("brackets") != std::string::npos);
  CHECK_FALSE(network::parse_authority("[::1", std::nullopt).ok());
  CHECK_FALSE(network::parse_authority("[::1]x", std::nullopt).ok());
  CHECK_FALSE(network::parse_authority("[::1]x", 80).ok());
  CHECK_FALSE(network::parse_authority("[::1]]:80", std::nullopt).ok());
  CHECK_FALSE(network::parse_authority("[1.2.3.4]:80", std::nullopt).ok());
  CHECK_FALSE(network::parse_authority("[]:80", std::nullopt).ok());
  CHECK_FALSE(network::parse_authority("[fe80::1%25eth0]:80", std::nullopt).ok());
  CHECK(error_of(network::parse_authority("user@host:80", std::nullopt)).find("credentials") != std::string::npos);
  CHECK_FALSE(network::parse_authority("user:pw@example.com:80", 80).ok());
  CHECK_FALSE(network::parse_authority("[::1]@x:80", std::nullopt).ok());
}

TEST_CASE("parse_authority: an IPv4 address in a form other than the dotted quad is no name") {
  // getaddrinfo reads these as addresses (inet_aton): as "names" they would
  // reach 127.0.0.1 without the address checks seeing it.
  for (const char* bad : {"127.1:80", "0x7f000001:80", "2130706433:80", "0x7f.0.0.1:80", "0177.0.0.1:80", "127.0.1:80",
                          "010.0.0.1:80", "0X7F.1:80", "127.0.0.1.:80", "127.1.:80", "1.0x2:80"}) {
    CAPTURE(bad);
    auto a = network::parse_authority(bad, std::nullopt);
    REQUIRE_FALSE(a.ok());
    CHECK(a.error().message.find("IPv4") != std::string::npos);
  }
}

TEST_CASE("Authority::text: host:port, IPv6 in brackets, and it parses back") {
  for (const char* text : {"[2001:db8::1]:443", "example.com:443", "198.51.100.7:80", "[::ffff:10.0.0.1]:80"}) {
    CAPTURE(text);
    const network::Authority a = authority(text);
    CHECK(a.text() == text);
    const network::Authority back = authority(a.text());
    CHECK(back.host == a.host);
    CHECK(back.port == a.port);
    CHECK(back.literal == a.literal);
  }
  CHECK(authority("[2001:DB8::0001]:443").text() == "[2001:db8::1]:443");
  CHECK(authority("Example.COM.", 80).text() == "example.com:80");
}

TEST_CASE("allow rules: a wildcard covers names under its suffix, not the suffix or look-alikes") {
  const auto wild = rules({"*.example.com:443"});
  CHECK(wild[0].wildcard);
  CHECK(wild[0].host == "example.com");
  CHECK(network::allows(wild, authority("a.example.com:443")));
  CHECK(network::allows(wild, authority("a.b.example.com:443")));
  CHECK(network::allows(wild, authority("A.Example.COM.:443")));
  CHECK_FALSE(network::allows(wild, authority("example.com:443")));
  CHECK_FALSE(network::allows(wild, authority("badexample.com:443")));
  CHECK_FALSE(network::allows(wild, authority("a.example.com:80")));
  CHECK_FALSE(network::allows(wild, authority("a.example.com.evil.net:443")));
  CHECK_FALSE(network::allows(wild, authority("example.com.a:443")));

  const auto exact = rules({"example.com:443"});
  CHECK_FALSE(exact[0].wildcard);
  CHECK(network::allows(exact, authority("example.com:443")));
  CHECK(network::allows(exact, authority("EXAMPLE.com.:443")));
  CHECK_FALSE(network::allows(exact, authority("a.example.com:443")));
  CHECK_FALSE(network::allows(exact, authority("example.com:444")));
  CHECK_FALSE(network::allows({}, authority("example.com:443")));
  CHECK(network::allows(rules({"other.org:80", "example.com:443"}), authority("example.com:443")));
}

TEST_CASE("allow rules: a literal rule matches only that literal; names and literals never meet") {
  const auto literal = rules({"198.51.100.7:80"});
  CHECK(literal[0].literal);
  CHECK(network::allows(literal, authority("198.51.100.7:80")));
  CHECK_FALSE(network::allows(literal, authority("198.51.100.7:81")));
  CHECK_FALSE(network::allows(literal, authority("198.51.100.8:80")));
  CHECK_FALSE(network::allows(literal, authority("[::ffff:198.51.100.7]:80")));
  // The same text as a name: only a hand-made Authority can be one.
  CHECK_FALSE(network::allows(literal, network::Authority{"198.51.100.7", 80, false}));
  CHECK(network::allows(rules({"[2001:DB8::7]:443"}), authority("[2001:db8:0::7]:443")));

  const auto names = rules({"example.com:80", "*.example.com:80"});
  CHECK_FALSE(network::allows(names, authority("198.51.100.7:80")));
  CHECK_FALSE(network::allows(names, network::Authority{"example.com", 80, true}));
  CHECK_FALSE(network::allows(names, network::Authority{"a.example.com", 80, true}));

  CHECK(error_of(network::parse_allow("*.1.2.3.4:80")).find("DNS name") != std::string::npos);
  CHECK_FALSE(network::parse_allow("*.[::1]:80").ok());
  CHECK_FALSE(network::parse_allow("*.:80").ok());
  CHECK_FALSE(network::parse_allow("*:80").ok());
  CHECK_FALSE(network::parse_allow("**.example.com:80").ok());
  CHECK_FALSE(network::parse_allow("*.*.example.com:80").ok());
  CHECK_FALSE(network::parse_allow("a.*.example.com:80").ok());
  CHECK_FALSE(network::parse_allow("*.example.com").ok());  // a rule always names its port
  CHECK_FALSE(network::parse_allow("*.127.1:80").ok());
}

TEST_CASE("the python loader of a warm sandbox carries the proxy variables and compiles") {
  REQUIRE(::access("/usr/bin/python3", X_OK) == 0);
  const policy::Policy p = parse_policy(policy_doc());
  const sandbox::LaunchSpec spec = broker::build_warm_spec(p, test_host(), *p.find_runtime("py"), "w1");
  REQUIRE(spec.warm == sandbox::Warm::preload);
  REQUIRE(spec.argv.size() == 4);
  REQUIRE(spec.argv[1] == "-c");
  const std::string& loader = spec.argv[2];
  CHECK(loader.find("def _throwbox_loader():") == 0);
  CHECK(loader.find("__THROWBOX_PROXY_ENV__") == std::string::npos);
  CHECK(loader.find("__THROWBOX_CA_ENV__") == std::string::npos);
  CHECK(loader.find("os.environ.update({") != std::string::npos);
  auto check_vars = [&](const auto& vars) {
    for (const char* var : vars) {
      const std::string v(var);
      const size_t eq = v.find('=');
      REQUIRE(eq != std::string::npos);
      const std::string item = "'" + v.substr(0, eq) + "': '" + v.substr(eq + 1) + "'";
      CHECK_MESSAGE(loader.find(item) != std::string::npos, "missing ", item);
    }
  };
  check_vars(sandbox::kProxyEnv);
  check_vars(sandbox::kCaBundleEnv);

  TempDir dir;
  const std::string file = dir.path + "/loader.py";
  std::ofstream(file) << loader;
  const std::string cmd = "/usr/bin/python3 -c \"import ast,sys; ast.parse(open(sys.argv[1]).read())\" " + file;
  CHECK(std::system(cmd.c_str()) == 0);
  // The check itself refuses what does not parse.
  std::ofstream(file) << "os.environ.update({'A': 'b',)\n";
  CHECK(std::system((cmd + " 2>/dev/null").c_str()) != 0);
}

TEST_CASE("build_job_spec: a request's network names one of the policy's profiles") {
  json doc = policy_doc();
  doc["network"] = {{"profiles",
                     {{"web", {{"allow", json::array({"example.com:443", "*.pypi.org:443"})}}},
                      {"docs", {{"allow", json::array({"docs.example.com:443"})}}}}}};
  const policy::Policy p = parse_policy(doc);
  auto spec = broker::build_job_spec(p, test_host(), request("web"), {}, "job1");
  REQUIRE_MESSAGE(spec.ok(), (spec.ok() ? "" : spec.error().message));
  CHECK(spec->network);
  auto back = sandbox::spec_from_json(sandbox::to_json(*spec));
  REQUIRE(back.ok());
  CHECK(back->network);
  auto none = broker::build_job_spec(p, test_host(), request(""), {}, "job2");
  REQUIRE(none.ok());
  CHECK_FALSE(none->network);
  CHECK(error_of(broker::build_job_spec(p, test_host(), request("ftp"), {}, "job3")) ==
        "network: \"ftp\" is not a profile of this server; profiles: docs, web");

  const policy::Policy bare = parse_policy(policy_doc());
  CHECK(error_of(broker::build_job_spec(bare, test_host(), request("web"), {}, "job4")) ==
        "network: this server's policy has no network profiles; jobs have no network");
}

TEST_CASE("LineReader: the listener line brings its descriptor, once") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  util::UniqueFd reader_end(sv[0]), runner_end(sv[1]);
  util::Pipe pipe;
  REQUIRE(util::make_pipe(pipe));

  send_with_fd(runner_end.get(), std::string(broker::kListenerLine) + "\n", pipe.write.get());
  pipe.write.reset();  // only the descriptor in flight is left
  const std::string progress = R"({"progress":{"cpu_ms":1}})";
  REQUIRE(util::write_all(runner_end.get(), (progress + "\n").data(), progress.size() + 1));

  broker::LineReader lines(reader_end.get());
  broker::NextLine got = lines.next(soon(), 1 << 16);
  REQUIRE(got.end == broker::LineEnd::kLine);
  CHECK(got.line == broker::kListenerLine);
  util::UniqueFd passed = lines.take_fd();
  REQUIRE(passed.valid());
  CHECK((::fcntl(passed.get(), F_GETFD) & FD_CLOEXEC) != 0);
  REQUIRE(::write(passed.get(), "x", 1) == 1);
  passed.reset();  // the last write end: the read end sees EOF after "x"
  char buf[4] = {};
  CHECK(::read(pipe.read.get(), buf, sizeof buf) == 1);
  CHECK(buf[0] == 'x');
  CHECK(::read(pipe.read.get(), buf, sizeof buf) == 0);
  CHECK_FALSE(lines.take_fd().valid());

  got = lines.next(soon(), 1 << 16);
  REQUIRE(got.end == broker::LineEnd::kLine);
  CHECK(got.line == progress);
  CHECK_FALSE(lines.take_fd().valid());
  runner_end.reset();
  CHECK(lines.next(soon(), 1 << 16).end == broker::LineEnd::kEof);
}

TEST_CASE("LineReader: a plain pipe is read too (recvmsg's ENOTSOCK)") {
  util::Pipe pipe;
  REQUIRE(util::make_pipe(pipe));
  const std::string text = "{\"warm\":\"ready\"}\nsecond\nunterminated";
  REQUIRE(util::write_all(pipe.write.get(), text.data(), text.size()));
  pipe.write.reset();
  broker::LineReader lines(pipe.read.get());
  broker::NextLine got = lines.next(soon(), 1 << 16);
  REQUIRE(got.end == broker::LineEnd::kLine);
  CHECK(got.line == "{\"warm\":\"ready\"}");
  got = lines.next(soon(), 1 << 16);
  REQUIRE(got.end == broker::LineEnd::kLine);
  CHECK(got.line == "second");
  CHECK(lines.next(soon(), 1 << 16).end == broker::LineEnd::kEof);
  CHECK(lines.take_rest() == "unterminated");
  CHECK_FALSE(lines.take_fd().valid());
}

TEST_CASE("spec JSON: a warm spec has no network; a claim carries it") {
  const policy::Policy p = parse_policy(policy_doc());
  sandbox::LaunchSpec warm = broker::build_warm_spec(p, test_host(), *p.find_runtime("py"), "w1");
  REQUIRE(sandbox::spec_from_json(sandbox::to_json(warm)).ok());
  warm.network = true;
  auto refused = sandbox::spec_from_json(sandbox::to_json(warm));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == util::ErrorCode::kSpec);
  CHECK(refused.error().message == "a warm spec has no network (a job's claim brings it)");

  for (bool network : {true, false}) {
    CAPTURE(network);
    sandbox::Claim c;
    c.job_id = "j1";
    c.code = "print(1)";
    c.timeout_ms = 1000;
    c.network = network;
    auto back = sandbox::claim_from_json(json::parse(sandbox::to_json(c).dump()));
    REQUIRE(back.ok());
    CHECK(back->network == network);
    CHECK(back->job_id == "j1");
  }
  json old_claim = sandbox::to_json(sandbox::Claim{"j1", "", {}, 1000, false, true});
  old_claim.erase("network");
  auto old = sandbox::claim_from_json(old_claim);
  REQUIRE(old.ok());
  CHECK_FALSE(old->network);  // absent: no network
}
