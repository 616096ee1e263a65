// An intercepted connection (intercept.h). Its steps, in order: 1 the
// host's TLS (verified), else 502 to the CONNECT 2 200 to the CONNECT 3 the
// job's TLS with the host's certificate from the server's CA, its server
// name the host's 4 a request head (at most kHeadMaxBytes) 5 parsed by the
// job's parser child and checked by the server 6 the profile's rules: 403
// with a one-line reason, the host never sees it 7 the head with the
// credential's header, then exactly Content-Length bytes of body 8 the
// response relayed as it comes, a parser following its framing 9 the next
// request on the same connection, or the end. Every byte is charged to the
// job's byte cap.
#include "server/network/intercept.h"

#include <chrono>
#include <limits>
#include <optional>

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include "server/network/head.h"
#include "server/network/request_rules.h"

namespace network {
namespace {

namespace asio = boost::asio;
namespace ssl = asio::ssl;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
constexpr auto kFirstRequestTimeout = std::chrono::seconds(10);
constexpr auto kIdleTimeout = std::chrono::seconds(60);  // between requests on a kept-alive connection
constexpr size_t kResponseHeadMaxBytes = 64 * 1024;
constexpr size_t kChunkBytes = 16 * 1024;
constexpr size_t kLoggedTextMax = 256;  // of a listed request's path and reason
// ALPN: HTTP/1.1 only, towards the job and towards the host.
constexpr unsigned char kAlpn[] = "\x08http/1.1";

int select_http11(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in, unsigned int inlen,
                  void*) {
  unsigned char* chosen = nullptr;
  unsigned char len = 0;
  if (SSL_select_next_proto(&chosen, &len, kAlpn, sizeof kAlpn - 1, in, inlen) != OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_NOACK;  // the client offered no HTTP/1.1: no ALPN, which means HTTP/1.1
  *out = chosen;
  *outlen = len;
  return SSL_TLSEXT_ERR_OK;
}

constexpr auto kTlsOptions = ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                             ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::no_compression;

std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, kLoggedTextMax)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return s.size() > kLoggedTextMax ? out + "..." : out;
}

const char* status_text(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 411:
      return "Length Required";
    default:
      return "Bad Gateway";
  }
}

bool closed(const error_code& ec) {
  return ec == asio::error::eof || ec == ssl::error::stream_truncated || ec == asio::error::connection_reset;
}

class Interception : public std::enable_shared_from_this<Interception> {
 public:
  Interception(std::shared_ptr<InterceptOwner> owner, tcp::socket& job, tcp::socket& host_socket, std::string host,
               uint16_t port, TlsContexts& tls, const Credential* credential, const std::vector<RequestRule>& rules)
      : owner_(std::move(owner)),
        job_socket_(job),
        up_(host_socket, tls.upstream()),
        host_(std::move(host)),
        port_(port),
        tls_(tls),
        credential_(credential),
        rules_(rules),
        timer_(job.get_executor()) {}

  // 1. The host's TLS, verified, before the job is told anything.
  void start() {
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t made = tls_.ca().leaves_made();
    auto leaf = tls_.ca().leaf_for(host_);
    if (!leaf) return owner_->answer_failed("no certificate for " + host_ + ": " + leaf.error().message);
    leaf_ = std::move(*leaf);
    if (tls_.ca().leaves_made() != made)
      spdlog::debug("proxy: certificate for {} made in {:.3f} ms", host_,
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    SSL* s = up_.native_handle();
    if (SSL_ctrl(s, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name, const_cast<char*>(host_.c_str())) != 1 ||
        SSL_set1_host(s, host_.c_str()) != 1)
      return owner_->answer_failed("TLS to " + where() + ": cannot name the host");
    SSL_set_hostflags(s, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    arm(kHandshakeTimeout,
        [](Interception& i) { i.owner_->answer_failed("TLS to " + i.where() + ": no handshake within 10 s"); });
    up_.async_handshake(ssl::stream_base::client, [self = shared_from_this()](error_code ec) {
      if (self->stop_if_ended()) return;
      self->disarm();
      if (ec) return self->owner_->answer_failed("TLS to " + self->where() + ": " + self->upstream_tls_error(ec));
      self->out_ = "HTTP/1.1 200 Connection established\r\n\r\n";
      asio::async_write(self->job_socket_, asio::buffer(self->out_), [self](error_code wec, size_t) {
        if (self->stop_if_ended()) return;
        if (wec) return self->owner_->end_connection("allowed", "");
        self->job_handshake();
      });
    });
  }

 private:
  std::string where() const { return host_ + ":" + std::to_string(port_); }

  std::string upstream_tls_error(const error_code& ec) {
    const long verify = SSL_get_verify_result(up_.native_handle());
    if (verify != X509_V_OK)
      return std::string("the host's certificate is not trusted (") + X509_verify_cert_error_string(verify) + ")";
    return ec.message();
  }

  // One timer for whatever is awaited; a wait's generation tells a stale expiry.
  template <class OnExpiry>
  void arm(std::chrono::seconds after, OnExpiry on_expiry) {
    const uint64_t gen = ++wait_;
    timer_.expires_after(after);
    timer_.async_wait([self = shared_from_this(), gen, on_expiry](error_code ec) {
      if (ec || gen != self->wait_ || self->owner_->ended()) return;
      on_expiry(*self);
    });
  }
  void disarm() {
    ++wait_;
    timer_.cancel();
  }
  bool stop_if_ended() {
    if (!owner_->ended()) return false;
    disarm();
    return true;
  }

  // 3. The job's TLS: the host's certificate, and a server name (when the
  // client sends one) that is the host's.
  void job_handshake() {
    job_.emplace(job_socket_, tls_.job());
    if (SSL_use_certificate(job_->native_handle(), leaf_.cert.get()) != 1 ||
        SSL_use_PrivateKey(job_->native_handle(), leaf_.key.get()) != 1)
      return owner_->end_connection("failed", "TLS with the job: cannot use the certificate for " + host_);
    arm(kHandshakeTimeout,
        [](Interception& i) { i.owner_->end_connection("failed", "TLS with the job: no handshake within 10 s"); });
    job_->async_handshake(ssl::stream_base::server, [self = shared_from_this()](error_code ec) {
      if (self->stop_if_ended()) return;
      self->disarm();
      if (ec)
        return self->owner_->end_connection(
            "failed", "TLS with the job failed (" + ec.message() +
                          "): its client must trust the server's CA, in the bundle SSL_CERT_FILE names");
      const char* sni = SSL_get_servername(self->job_->native_handle(), TLSEXT_NAMETYPE_host_name);
      if (sni != nullptr && !same_host(sni, self->host_))
        return self->owner_->end_connection("refused", "the TLS server name " + printable(sni) + " is not " +
                                                           self->host_ + ", the host the connection was opened to");
      self->read_request(true);
    });
  }

  static bool same_host(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
        return false;
    return true;
  }

  // 4. A request head, up to its blank line.
  void read_request(bool first) {
    if (first)
      arm(kFirstRequestTimeout, [](Interception& i) { i.owner_->end_connection("refused", "no request within 10 s"); });
    else
      arm(kIdleTimeout, [](Interception& i) { i.owner_->end_connection("allowed", ""); });
    asio::async_read_until(*job_, asio::dynamic_buffer(in_, kHeadMaxBytes), "\r\n\r\n",
                           [self = shared_from_this()](error_code ec, size_t n) {
                             if (self->stop_if_ended()) return;
                             self->disarm();
                             if (closed(ec)) return self->owner_->end_connection("allowed", "");
                             if (ec == asio::error::not_found)
                               return self->refuse_request(
                                   400, "", "",
                                   "the request head is longer than " + std::to_string(kHeadMaxBytes) + " bytes");
                             if (ec) return self->owner_->end_connection("allowed", "");
                             std::string head = self->in_.substr(0, n);
                             self->in_.erase(0, n);
                             // 5. Parsed in the job's parser child; the answer checked by the server.
                             self->owner_->parse_inner(std::move(head), [self](util::Result<InnerRequest> r) {
                               if (self->stop_if_ended()) return;
                               self->on_request(std::move(r));
                             });
                           });
  }

  // 6. The rules, then 7. the request on.
  void on_request(util::Result<InnerRequest> r) {
    if (!r) return refuse_request(400, "", "", "the request could not be parsed (" + r.error().message + ")");
    if (!r->ok) return refuse_request(r->status, r->method, r->path, r->reason);
    if (std::string why = refusal(rules_, host_, r->method, r->path); !why.empty())
      return refuse_request(403, r->method, r->path, why);
    req_ = std::move(*r);
    owner_->add_request({req_.method, printable(req_.path), 0, "allowed", ""});
    out_ = std::move(req_.forward);
    // The credential's header, last: the helper dropped the job's own.
    if (credential_ != nullptr) out_.insert(out_.size() - 2, credential_->header + ": " + credential_->value + "\r\n");
    body_left_ = req_.body_bytes;
    send(true, out_.data(), out_.size(), [](Interception& i) {
      i.out_.clear();
      i.send_body();
    });
  }

  // A request the proxy answers itself (refused before anything is sent).
  void refuse_request(int status, const std::string& method, const std::string& path, const std::string& reason) {
    owner_->add_request({method, printable(path), status, "refused", printable(reason)});
    answer_and_close(status, "refused", reason);
  }

  // The proxy's own answer, one line saying why; the connection ends after it
  // with that verdict.
  void answer_and_close(int status, const char* verdict, const std::string& reason) {
    const std::string body = "throwbox proxy: " + reason + "\n";
    out_ = "HTTP/1.1 " + std::to_string(status) + " " + status_text(status) +
           "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
    asio::async_write(*job_, asio::buffer(out_), [self = shared_from_this(), verdict, reason](error_code, size_t) {
      self->owner_->end_connection(verdict, printable(reason));
    });
  }

  // Exactly Content-Length bytes: what came after the head first.
  void send_body() {
    if (body_left_ == 0) return read_response();
    if (!in_.empty()) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(in_.size(), body_left_));
      out_ = in_.substr(0, n);
      in_.erase(0, n);
      body_left_ -= n;
      return send(true, out_.data(), out_.size(), [](Interception& i) { i.send_body(); });
    }
    const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk_.size(), body_left_));
    job_->async_read_some(asio::buffer(chunk_.data(), want), [self = shared_from_this()](error_code ec, size_t n) {
      if (self->stop_if_ended()) return;
      if (ec) return self->owner_->end_connection("allowed", "");
      self->body_left_ -= n;
      self->send(true, self->chunk_.data(), n, [](Interception& i) { i.send_body(); });
    });
  }

  // 8. The response, relayed as it comes; the parser finds where it ends.
  void read_response() {
    new_parser();
    read_up();
  }

  // A parser for the next response to req_ (after an interim one, the final).
  void new_parser() {
    parser_.emplace();
    parser_->header_limit(kResponseHeadMaxBytes);
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    parser_->eager(true);
    if (req_.method == "HEAD") parser_->skip(true);
    status_seen_ = false;
  }

  void read_up() {
    up_.async_read_some(asio::buffer(chunk_), [self = shared_from_this()](error_code ec, size_t n) {
      if (self->stop_if_ended()) return;
      if (closed(ec)) return self->upstream_closed();
      if (ec) return self->owner_->end_connection("failed", "reading from " + self->where() + ": " + ec.message());
      self->up_in_.append(self->chunk_.data(), n);
      self->feed();
    });
  }

  // Feeds what the host sent to the parser; sends the job what it took.
  void feed() {
    size_t used = 0;
    while (used < up_in_.size() && !parser_->is_done()) {
      parser_->get().body().data = scratch_.data();
      parser_->get().body().size = scratch_.size();
      error_code ec;
      const size_t n = parser_->put(asio::buffer(up_in_.data() + used, up_in_.size() - used), ec);
      used += n;
      if (ec == http::error::need_more) break;
      if (ec && ec != http::error::need_buffer)
        return owner_->end_connection("failed", "the response of " + where() + " is malformed (" + ec.message() + ")");
      if (ec == http::error::need_buffer && n == 0) break;
      note_status();
      // An interim response (100 Continue, 103) is relayed; the final one follows it.
      if (parser_->is_done() && interim()) new_parser();
    }
    out_ = up_in_.substr(0, used);
    up_in_.erase(0, used);
    const bool done = parser_->is_done();
    if (out_.empty()) return done ? response_done() : read_up();
    sent_any_ = true;
    send(false, out_.data(), out_.size(), [done](Interception& i) { done ? i.response_done() : i.read_up(); });
  }

  bool interim() const {
    const int s = parser_->get().result_int();
    return s >= 100 && s < 200 && s != 101;
  }

  void note_status() {
    if (status_seen_ || !parser_->is_header_done()) return;
    status_seen_ = true;
    if (!interim()) owner_->set_last_status(parser_->get().result_int());
  }

  void upstream_closed() {
    if (parser_->is_header_done() && parser_->need_eof()) {
      error_code ec;
      parser_->put_eof(ec);
      if (!ec) return owner_->end_connection("allowed", "");
    }
    if (!sent_any_) {
      const std::string reason = where() + " closed the connection without an answer";
      owner_->set_last_status(502, printable(reason));
      return answer_and_close(502, "failed", reason);
    }
    owner_->end_connection("failed", where() + " closed the connection before its response was complete");
  }

  // 9. The next request, when both sides keep the connection.
  void response_done() {
    sent_any_ = false;
    if (parser_->keep_alive() && !req_.close && up_in_.empty()) return read_request(false);
    owner_->end_connection("allowed", "");
  }

  // Bytes to the host (up) or the job, within the byte cap; then next.
  template <class Next>
  void send(bool up, const char* data, size_t n, Next next) {
    const uint64_t take = owner_->charge(n);
    owner_->count(up, take);
    auto done = [self = shared_from_this(), up, capped = take < n, next](error_code ec, size_t) {
      if (self->stop_if_ended()) return;
      if (ec)
        return self->owner_->end_connection(up ? "failed" : "allowed",
                                            up ? "sending to " + self->where() + ": " + ec.message() : "");
      if (capped) return self->owner_->end_connection("cut", self->owner_->byte_cap_reason());
      next(*self);
    };
    if (up)
      asio::async_write(up_, asio::buffer(data, take), done);
    else
      asio::async_write(*job_, asio::buffer(data, take), done);
  }

  std::shared_ptr<InterceptOwner> owner_;
  tcp::socket& job_socket_;
  ssl::stream<tcp::socket&> up_;
  std::optional<ssl::stream<tcp::socket&>> job_;
  EgressCa::Leaf leaf_;
  const std::string host_;
  const uint16_t port_;
  TlsContexts& tls_;
  const Credential* credential_;
  const std::vector<RequestRule>& rules_;
  asio::steady_timer timer_;
  uint64_t wait_ = 0;
  std::string in_;     // from the job: a head's bytes, and what followed it
  std::string up_in_;  // from the host, not yet parsed
  std::string out_;    // what is being written
  std::array<char, kChunkBytes> chunk_{};
  std::array<char, kChunkBytes> scratch_{};  // where the parser puts body bytes (already relayed raw)
  InnerRequest req_;
  uint64_t body_left_ = 0;
  std::optional<http::response_parser<http::buffer_body>> parser_;
  bool status_seen_ = false;
  bool sent_any_ = false;  // of the current response, to the job
};

}  // namespace

TlsContexts::TlsContexts(EgressCa& ca, ssl::context job, ssl::context upstream)
    : ca_(ca), job_(std::move(job)), upstream_(std::move(upstream)) {}

util::Result<std::unique_ptr<TlsContexts>> TlsContexts::make(EgressCa& ca) {
  ssl::context up(ssl::context::tls_client);
  error_code ec;
  up.set_options(kTlsOptions, ec);
  if (!ec) up.set_default_verify_paths(ec);
  if (!ec) up.set_verify_mode(ssl::verify_peer, ec);
  if (ec) return util::make_error(util::ErrorCode::kInternal, "TLS towards hosts: " + ec.message());
  if (SSL_CTX_set_alpn_protos(up.native_handle(), kAlpn, sizeof kAlpn - 1) != 0)
    return util::make_error(util::ErrorCode::kInternal, "TLS towards hosts: cannot set ALPN");
  // Towards jobs: each connection gets its host's certificate (SSL_use_certificate).
  ssl::context job(ssl::context::tls_server);
  job.set_options(kTlsOptions, ec);
  if (ec) return util::make_error(util::ErrorCode::kInternal, "TLS towards jobs: " + ec.message());
  SSL_CTX_set_alpn_select_cb(job.native_handle(), select_http11, nullptr);
  return std::make_unique<TlsContexts>(ca, std::move(job), std::move(up));
}

void intercept(std::shared_ptr<InterceptOwner> owner, tcp::socket& job, tcp::socket& host_socket,
               const std::string& host, uint16_t port, TlsContexts& tls, const Credential* credential,
               const std::vector<RequestRule>& rules) {
  std::make_shared<Interception>(std::move(owner), job, host_socket, host, port, tls, credential, rules)->start();
}

}  // namespace network
