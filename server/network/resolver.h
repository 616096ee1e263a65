// Name resolution for the egress proxy: c-ares on a thread of its own, every
// lookup asynchronous with its own timeout, so one job's lookups never wait
// behind another's. A name is looked up exactly as checked: as a fully
// qualified name, never with the host's search list or ndots: /etc/hosts
// first (read at each lookup), then the nameservers of /etc/resolv.conf
// (read at start).
// Which job may have how many lookups in flight is the proxy's to bound.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/network/address.h"
#include "server/util/result.h"

namespace network {

// Each try of one nameserver waits this long; c-ares makes kLookupTries
// rounds over the nameservers (it doubles the wait each round).
constexpr int kLookupTryTimeoutMs = 2000;
constexpr int kLookupTries = 2;

class Resolver {
 public:
  // Called on the resolver's thread: hand the result to your own.
  using Done = std::function<void(util::Result<std::vector<Address>>)>;

  // Reads the host's resolver configuration; an error names what failed.
  static util::Result<std::unique_ptr<Resolver>> start();
  ~Resolver();  // ends every lookup in flight (Done gets an error) and joins
  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;

  // name: a checked host name (network::parse_authority's), without a
  // trailing dot. Every address it has (A and AAAA), or why none.
  void resolve(const std::string& name, Done done);

 private:
  struct Impl;
  explicit Resolver(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace network
