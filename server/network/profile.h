// What the policy says about egress, as the proxy reads it: a job names a
// profile and reaches only what the profile allows, through the server's
// proxy (proxy.h). The policy loader fills these (policy::NetworkProfile and
// policy::Network name the same types).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace network {

struct Profile {
  std::string name;
  std::string description;           // shown to the model in run_code's schema
  std::vector<std::string> allow;    // "host:port", "*.suffix:port" (parse_allow, address.h)
  uint64_t max_connections = 32;     // per job, refused requests included
  uint64_t max_bytes = 64ull << 20;  // per job, both directions, every connection
};

struct Settings {
  std::map<std::string, Profile> profiles;
  std::map<std::string, std::string> hosts;  // fixed resolutions: name -> address
  std::vector<std::string> allow_private;    // CIDRs of special-purpose ranges profiles may reach
};

}  // namespace network
