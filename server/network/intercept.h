// An intercepted connection (the proxy's side of a CONNECT to a host with a
// credential or rules, profile.h): the proxy ends the job's TLS with a
// certificate of its own CA (egress_ca.h), opens its own TLS to the host
// (verified against the system's trust store and the host name), and then,
// one request at a time on the job's connection (HTTP/1.1, keep-alive):
// reads the request head, has the job's parser helper child parse it
// (inner_head.h), checks it against the profile's rules (request_rules.h),
// sets the credential's header, sends head and body on, and relays the
// response, whose framing a parser follows so the next request can come on
// the same connection. A redirect is passed back; nothing is followed.
// Everything runs on the proxy's io thread.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

#include "server/network/egress_ca.h"
#include "server/network/inner_head.h"
#include "server/network/profile.h"
#include "server/util/result.h"

namespace network {

// One request on an intercepted connection, as the job's record lists it:
// the path without its query, never headers or bodies.
struct InterceptedRequest {
  std::string method;
  std::string path;
  int status = 0;       // what the job was answered (the host's, or the proxy's refusal); 0: no answer
  std::string verdict;  // allowed | refused | failed
  std::string reason;   // "" for allowed
};

// The TLS contexts every intercepted connection of a proxy uses: towards
// jobs, one whose connections each get their host's certificate (made on
// first use, egress_ca.h); towards hosts, one that verifies against the
// system's trust store (OpenSSL's default paths, which SSL_CERT_FILE and
// SSL_CERT_DIR may name).
class TlsContexts {
 public:
  static util::Result<std::unique_ptr<TlsContexts>> make(EgressCa& ca);
  boost::asio::ssl::context& job() { return job_; }
  boost::asio::ssl::context& upstream() { return upstream_; }
  EgressCa& ca() { return ca_; }

  TlsContexts(EgressCa& ca, boost::asio::ssl::context job, boost::asio::ssl::context upstream);

 private:
  EgressCa& ca_;
  boost::asio::ssl::context job_;
  boost::asio::ssl::context upstream_;
};

// What an intercepted connection needs of the tunnel that opened it.
class InterceptOwner {
 public:
  virtual ~InterceptOwner() = default;
  virtual bool ended() const = 0;
  // How many of n bytes may pass within the job's byte cap.
  virtual uint64_t charge(uint64_t n) = 0;
  virtual void count(bool up, uint64_t n) = 0;
  // The job's parser child on a request head; the answer checked (inner_from_json).
  virtual void parse_inner(std::string head, std::function<void(util::Result<InnerRequest>)> done) = 0;
  virtual void add_request(InterceptedRequest request) = 0;
  // The last request's status, once the host answered it; with a failure,
  // the proxy's own answer (502) and why the host gave none.
  virtual void set_last_status(int status, const std::string& failure = "") = 0;
  // Closes both sides; the connection's record says verdict and reason.
  virtual void end_connection(const char* verdict, const std::string& reason) = 0;
  // Answers the job's CONNECT with 502 and the reason, then closes.
  virtual void answer_failed(const std::string& reason) = 0;
  virtual std::string byte_cap_reason() const = 0;
};

// Starts an intercepted connection on the tunnel's two connected sockets
// (the job's, after its CONNECT head was read and nothing more; the host's,
// connected to the checked address). It answers the CONNECT itself: 502
// with the reason when the host's TLS fails, else 200 and the job's TLS.
// The sockets stay the owner's: closing them ends everything.
void intercept(std::shared_ptr<InterceptOwner> owner, boost::asio::ip::tcp::socket& job,
               boost::asio::ip::tcp::socket& host_socket, const std::string& host, uint16_t port, TlsContexts& tls,
               const Credential* credential, const std::vector<RequestRule>& rules);

}  // namespace network
