// The egress proxy's certificate authority: the certificates it shows a job
// when it ends the job's TLS to an intercepted host. Made at first start in
// the state directory (egress-ca.pem, and egress-ca-key.pem at 0600, never
// in a sandbox); its certificate, and only that, goes into the CA bundle of
// jobs whose profile intercepts. A host's certificate (its name the only
// subject alternative name, valid for a week, signed by the CA) is made on
// first use and kept for the server's life, renewed a day before it ends.
// Thread-safe.
#pragma once
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "server/util/result.h"

struct evp_pkey_st;
struct x509_st;

namespace network {

class EgressCa {
 public:
  static constexpr const char* kCertFile = "egress-ca.pem";
  static constexpr const char* kKeyFile = "egress-ca-key.pem";
  // Copied into sandboxes (sandbox::kCaBundlePath).
  static constexpr const char* kBundleFile = "egress-ca-bundle.pem";

  // The CA in state_dir, made when there is none (a certificate without its
  // key, or a key others may read, is an error naming the file).
  static util::Result<std::unique_ptr<EgressCa>> open(const std::string& state_dir);

  // The CA certificate, PEM.
  const std::string& ca_pem() const { return ca_pem_; }

  // Writes <state_dir>/egress-ca-bundle.pem (0644): the system's CAs (the
  // file OpenSSL's default paths name, or SSL_CERT_FILE) and this CA. Its
  // path; a system file that cannot be read leaves this CA alone in it and
  // says so in `warning`.
  util::Result<std::string> write_bundle(const std::string& state_dir, std::string& warning) const;

  struct Leaf {
    std::shared_ptr<x509_st> cert;
    std::shared_ptr<evp_pkey_st> key;  // the same for every host of this server
    std::string pem;                   // the certificate, PEM
  };
  // The certificate for `host` (a DNS name, lower case), made on first use.
  util::Result<Leaf> leaf_for(const std::string& host);
  // How many leaves were made (not taken from the cache): for tests and benchmarks.
  uint64_t leaves_made() const;

  EgressCa(std::shared_ptr<x509_st> ca, std::shared_ptr<evp_pkey_st> ca_key, std::string ca_pem,
           std::shared_ptr<evp_pkey_st> leaf_key);

 private:
  util::Result<Leaf> make_leaf(const std::string& host) const;

  const std::shared_ptr<x509_st> ca_;
  const std::shared_ptr<evp_pkey_st> ca_key_;
  const std::string ca_pem_;
  const std::shared_ptr<evp_pkey_st> leaf_key_;
  mutable std::mutex mu_;
  struct Cached {
    Leaf leaf;
    std::chrono::system_clock::time_point renew_at;
  };
  std::map<std::string, Cached> leaves_;  // guarded by mu_
  uint64_t made_ = 0;                     // guarded by mu_
};

}  // namespace network
