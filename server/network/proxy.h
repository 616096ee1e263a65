// The egress proxy: one per server, on one thread of its own (Boost.Asio),
// shared by every job with a network profile and accounting per job. A job's
// listener is made inside its network namespace by the sandbox's pid 1 and
// handed over (SCM_RIGHTS); the proxy accepts on it, so only the job's own
// processes can reach it, and every connection it accepts is that job's.
//
// It speaks HTTP CONNECT and absolute-form http:// requests (the job's
// parser helper child parses the request head, head.h), checks host and port against the job's
// profile, resolves the name itself (network.hosts, else the host's
// resolver, resolver.h: the name exactly, at most four lookups of a job at
// once), refuses any resolved address in a special-purpose range that
// network.allow_private does not name, connects to the very address it
// checked, and relays within the profile's connection and byte caps and the
// job's deadline. Payload is never logged or kept: only the per-connection
// record below.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/helper/client.h"
#include "server/network/address.h"
#include "server/network/egress_ca.h"
#include "server/network/head.h"
#include "server/network/intercept.h"
#include "server/network/resolver.h"
#include "server/network/profile.h"
#include "server/util/fd.h"
#include "server/util/result.h"

namespace network {

// One connection a job made to the proxy.
struct Connection {
  std::string host;
  uint16_t port = 0;
  std::string address;      // what the proxy connected to; "" when refused before resolving
  uint64_t bytes_up = 0;    // job -> destination
  uint64_t bytes_down = 0;  // destination -> job
  std::string verdict;      // allowed | refused | failed | cut
  std::string reason;       // "" for allowed
  // A host with a credential or rules (profile.h): its TLS ended by the
  // proxy, each request checked and listed (intercept.h).
  bool intercepted = false;
  std::vector<InterceptedRequest> requests;
  uint64_t requests_not_listed = 0;
};

struct Report {
  std::string profile;
  std::vector<Connection> connections;  // the first kLoggedConnectionsMax, in order
  uint64_t connections_not_listed = 0;  // beyond them
};
nlohmann::json to_json(const Report& report);
Report report_from_json(const nlohmann::json& j);

constexpr size_t kLoggedConnectionsMax = 256;

// A job's share of the proxy. serve and finish are thread-safe.
class Session {
 public:
  virtual ~Session() = default;
  // Accept on the job's listener from now on (the proxy owns the descriptor).
  virtual void serve(util::UniqueFd listener) = 0;
  // The job ended: close the listener and every tunnel; the job's record.
  // (Tunnels pid 1's notice cut, job_end.h, are recorded cut by the job's end.)
  virtual Report finish() = 0;
};

class Proxy {
 public:
  // parsers: the parser helper every session's request heads go through.
  // ca: the server's CA for intercepted hosts (null: a profile that
  // intercepts is refused).
  static util::Result<std::unique_ptr<Proxy>> start(const Settings& policy, helper::Parsers& parsers, EgressCa* ca);
  ~Proxy();
  Proxy(const Proxy&) = delete;
  Proxy& operator=(const Proxy&) = delete;
  // A reload's network section, for the sessions opened from now on (open
  // ones keep theirs). An error changes nothing.
  util::Status update(const Settings& policy);
  // deadline_ms (CLOCK_MONOTONIC): every tunnel is cut then, whatever the job does.
  util::Result<std::shared_ptr<Session>> open(const std::string& job_id, const std::string& profile,
                                              int64_t deadline_ms);

 private:
  struct Impl;
  explicit Proxy(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace network
