// What the policy says about egress, as the proxy reads it: a job names a
// profile and reaches only what the profile allows, through the server's
// proxy (proxy.h). The policy loader fills these (policy::NetworkProfile and
// policy::Network name the same types).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "server/network/request_rules.h"

namespace network {

// A header the proxy sets on every request a job sends to host:port (the
// job's own header of that name is dropped). The value is read by the
// server from value_file and never enters a sandbox.
struct Credential {
  std::string host;  // a DNS name in lower case, allowed by the profile
  uint16_t port = 443;
  std::string header;  // a field name
  std::string value_file;
  std::string value_prefix;   // put before the file's text ("Bearer ")
  std::string value;          // value_prefix and the file's text: the server's only, never in effective_json
  std::string value_problem;  // why value_file could not be read (doctor's load only; else it is an error)
};

struct Profile {
  std::string name;
  std::string description;           // shown to the model in run_code's schema
  std::vector<std::string> allow;    // "host:port", "*.suffix:port" (parse_allow, address.h)
  uint64_t max_connections = 32;     // per job, refused requests included
  uint64_t max_bytes = 64ull << 20;  // per job, both directions, every connection
  // Hosts with a credential or rules are intercepted: the proxy ends the
  // job's TLS with a certificate of its own CA and checks each request.
  std::vector<Credential> credentials;
  std::vector<RequestRule> rules;
  bool intercepts() const { return !credentials.empty() || !rules.empty(); }
};

struct Settings {
  std::map<std::string, Profile> profiles;
  std::map<std::string, std::string> hosts;  // fixed resolutions: name -> address
  std::vector<std::string> allow_private;    // CIDRs of special-purpose ranges profiles may reach
};

}  // namespace network
