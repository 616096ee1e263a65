// The egress proxy (proxy.h). Everything of a session and its tunnels is
// touched on the proxy's one io thread only; Session::serve and finish post
// to it. A tunnel's steps, in order: 1 read the request head (to its blank
// line) 2 the job's parser helper child parses it, the server checks the
// answer 3 caps 4 the profile 5 resolve 6 every address checked 7 connect to
// the checked address 8 answer (CONNECT) or forward the head (absolute-form)
// 9 relay both ways within the byte cap 10 end: allowed, refused (403/400
// with a one-line reason), failed (502) or cut.
#include "server/network/proxy.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>

#include "server/helper/wire.h"
#include "server/network/intercept.h"
#include "server/sandbox/job_end.h"

namespace network {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using sandbox::kJobEndNotice;
using sandbox::kJobEndSourcePort;

constexpr auto kHeadTimeout = std::chrono::seconds(10);     // a client that never finishes its request
constexpr auto kConnectTimeout = std::chrono::seconds(10);  // resolving and connecting
constexpr size_t kRelayChunkBytes = 16 * 1024;
// Connections beyond the cap are answered 403 (the program learns why); after
// this many more the listener is closed, so a loop of connects costs nothing.
constexpr uint64_t kRefusalsPastCapMax = 64;
constexpr size_t kReasonPhraseMax = 300;  // of a reason, in the status line
// A request head's parse by the job's parser child; microseconds here. Past
// it the child is killed, and the job's later requests are refused.
constexpr auto kHeadParseTimeout = std::chrono::seconds(2);
constexpr const char* kJobEnded = "the job ended";
// Intercepted requests listed in a job's record, per connection and in all;
// beyond them they are counted (requests_not_listed).
constexpr size_t kListedRequestsPerConnectionMax = 64;
constexpr uint64_t kListedRequestsMax = 1024;

struct Rules {
  std::map<std::string, Address> hosts;
  std::vector<Cidr> allow_private;
  struct Profile {
    network::Profile policy;
    std::vector<AllowRule> allow;
  };
  std::map<std::string, Profile> profiles;
};

// A reason as a status line's reason phrase (RFC 9112 4: HTAB, SP, VCHAR):
// printable ASCII only, bounded.
std::string reason_phrase(const std::string& reason) {
  std::string out;
  for (char c : reason.substr(0, kReasonPhraseMax)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return reason.size() > kReasonPhraseMax ? out + "..." : out;
}

class Tunnel;

// Whether the profile reads requests to host: a credential or a rule names it.
bool intercepts(const Profile& p, const std::string& host) {
  return std::any_of(p.credentials.begin(), p.credentials.end(), [&](const Credential& c) { return c.host == host; }) ||
         std::any_of(p.rules.begin(), p.rules.end(), [&](const RequestRule& r) { return r.host == host; });
}

const Credential* credential_for(const Profile& p, const std::string& host, uint16_t port) {
  for (const Credential& c : p.credentials)
    if (c.host == host && c.port == port) return &c;
  return nullptr;
}

// Lookups of one job in flight at once; its further ones wait for a slot
// (within their own connect timeout), so no job holds more of the resolver.
constexpr size_t kLookupsPerJobMax = 4;

class SessionImpl final : public Session, public std::enable_shared_from_this<SessionImpl> {
 public:
  // rules: what the job started under, kept to its end whatever a reload does.
  // parser: the job's own parser helper child, for its request heads.
  SessionImpl(asio::io_context& io, Resolver& resolver, TlsContexts* tls, std::shared_ptr<const Rules> rules,
              const Rules::Profile& profile, std::string job_id, int64_t deadline_ms, helper::Child parser)
      : io_(io),
        resolver_(resolver),
        tls_(tls),
        held_rules_(std::move(rules)),
        rules_(*held_rules_),
        profile_(profile),
        job_id_(std::move(job_id)),
        acceptor_(io),
        deadline_(io),
        parser_(std::move(parser)),
        parser_sock_(io),
        parser_timer_(io) {
    error_code ec;
    if (const int fd = ::dup(parser_.socket()); fd >= 0) parser_sock_.assign(asio::local::stream_protocol(), fd, ec);
    report_.profile = profile.policy.name;
    deadline_.expires_at(std::chrono::steady_clock::time_point(std::chrono::milliseconds(deadline_ms)));
  }

  void serve(util::UniqueFd listener) override;
  Report finish() override;

  // The io thread's side.
  void arm_deadline();
  void accept_next();
  void cut_all(const std::string& reason);
  // pid 1's notice came on `notice`: the program has ended.
  void job_ended(const std::shared_ptr<Tunnel>& notice);
  void queue_lookup(std::shared_ptr<Tunnel> t);
  void lookup_ended();
  // A message to the parser child (a request head, or a request inside an
  // intercepted connection); its answer's document and bytes to `done`, or
  // the child's failure. One at a time, in arrival order.
  using ParseDone = std::function<void(util::Result<std::pair<nlohmann::json, std::string>>)>;
  void parse(helper::Message request, ParseDone done);
  // Whether one more intercepted request may be listed in the job's record.
  bool list_request() {
    if (requests_listed_ >= kListedRequestsMax) return false;
    ++requests_listed_;
    return true;
  }
  // How many of n bytes may still pass within the job's byte cap.
  uint64_t charge(uint64_t n) {
    const uint64_t take = std::min<uint64_t>(n, profile_.policy.max_bytes - bytes_);
    bytes_ += take;
    return take;
  }
  size_t open_slot() {
    if (report_.connections.size() >= kLoggedConnectionsMax) {
      ++report_.connections_not_listed;
      return SIZE_MAX;
    }
    report_.connections.emplace_back();
    return report_.connections.size() - 1;
  }
  Connection& slot(size_t i, Connection& scratch) { return i == SIZE_MAX ? scratch : report_.connections[i]; }

  asio::io_context& io_;
  Resolver& resolver_;
  TlsContexts* const tls_;  // null: this server cannot intercept
  const std::shared_ptr<const Rules> held_rules_;
  const Rules& rules_;
  const Rules::Profile& profile_;
  const std::string job_id_;
  tcp::acceptor acceptor_;
  asio::steady_timer deadline_;
  std::vector<std::weak_ptr<Tunnel>> tunnels_;
  // pid 1's connections (from the privileged port only it can bind): not
  // the job's, left out of the record whether or not their notice was read
  // (the job's deadline may cut one first). Their slots, in accept order.
  std::vector<size_t> pid1_slots_;
  size_t lookups_in_flight_ = 0;
  std::deque<std::shared_ptr<Tunnel>> lookup_waiters_;
  // The parser child and what waits for it.
  void parse_next();
  void parser_failed(const std::string& why);
  helper::Child parser_;
  asio::local::stream_protocol::socket parser_sock_;
  asio::steady_timer parser_timer_;
  std::deque<std::pair<helper::Message, ParseDone>> heads_;
  bool parsing_ = false;
  std::string parser_failure_;  // once the child failed, every later head gets this
  std::string parse_out_, parse_header_, parse_meta_;
  Report report_;
  uint64_t accepted_ = 0;
  uint64_t bytes_ = 0;
  uint64_t requests_listed_ = 0;
  bool finished_ = false;
};

class Tunnel : public InterceptOwner, public std::enable_shared_from_this<Tunnel> {
 public:
  Tunnel(std::shared_ptr<SessionImpl> s, tcp::socket client)
      : s_(std::move(s)),
        client_(std::move(client)),
        upstream_(s_->io_),
        timer_(s_->io_),
        slot_(s_->open_slot()),
        ordinal_(s_->accepted_) {
    if (from_pid1()) s_->pid1_slots_.push_back(slot_);
  }

  void start() { read_head(); }

  // Closes both sides; the record says why unless the tunnel had already
  // ended. One that had not yet named a destination was never let through:
  // a refusal, as when its job closes it first (which of the two the proxy
  // sees first is a race the record does not show).
  void cut(const std::string& reason) {
    if (dest_.port == 0) return end("refused", "no complete request before " + reason);
    end("cut", reason);
  }
  size_t slot() const { return slot_; }
  // At the job's end: a tunnel the job closed itself while its destination
  // had not yet is the job's own ending (allowed); any other is cut by it.
  void end_with_job() {
    if (relaying_ && !job_side_held()) return end("allowed", "");
    cut(kJobEnded);
  }
  // Whether the job's side of the connection is still held: the proxy has
  // not seen it close (its TCP state, not what the relay has read so far).
  bool job_side_held() const {
    struct tcp_info info {};
    socklen_t len = sizeof info;
    if (::getsockopt(const_cast<tcp::socket&>(client_).native_handle(), IPPROTO_TCP, TCP_INFO, &info, &len) != 0)
      return false;
    return info.tcpi_state == TCP_ESTABLISHED || info.tcpi_state == TCP_FIN_WAIT1 || info.tcpi_state == TCP_FIN_WAIT2;
  }
  // The intercepted connection's side (intercept.h).
  bool ended() const override { return done_; }
  uint64_t charge(uint64_t n) override { return s_->charge(n); }
  void count(bool up, uint64_t n) override { (up ? rec().bytes_up : rec().bytes_down) += n; }
  void parse_inner(std::string head, std::function<void(util::Result<InnerRequest>)> done) override {
    helper::Message request;
    request.kind = helper::Kind::kInnerRequest;
    const Credential* credential = credential_for(profile(), dest_.host, dest_.port);
    const std::string header = credential ? credential->header : "";
    request.meta = {{"authority", dest_.text()}, {"credential_header", header}};
    request.bytes = std::move(head);
    s_->parse(std::move(request), [dest = dest_, header, done = std::move(done)](auto answer) {
      if (!answer) return done(answer.error());
      done(inner_from_json(answer->first, std::move(answer->second), dest, header));
    });
  }
  void add_request(InterceptedRequest request) override {
    if (slot_ != SIZE_MAX && rec().requests.size() < kListedRequestsPerConnectionMax && s_->list_request())
      rec().requests.push_back(std::move(request));
    else
      ++rec().requests_not_listed;
  }
  void set_last_status(int status, const std::string& failure) override {
    if (rec().requests.empty() || rec().requests.back().status != 0) return;
    rec().requests.back().status = status;
    if (!failure.empty()) {
      rec().requests.back().verdict = "failed";
      rec().requests.back().reason = failure;
    }
  }
  void end_connection(const char* verdict, const std::string& reason) override { end(verdict, reason); }
  void answer_failed(const std::string& reason) override { failed(reason); }
  std::string byte_cap_reason() const override {
    return "byte cap reached: profile " + profile().name + " allows " + std::to_string(profile().max_bytes) +
           " bytes per job";
  }

  // pid 1's notice is answered once every held tunnel is cut; then closed.
  void acknowledge_end() {
    done_ = true;
    timer_.cancel();
    out_ = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    asio::async_write(client_, asio::buffer(out_), [self = shared_from_this()](error_code, size_t) {
      error_code e;
      self->client_.close(e);
    });
  }

 private:
  Connection& rec() { return s_->slot(slot_, scratch_); }
  const Profile& profile() const { return s_->profile_.policy; }

  void end(const char* verdict, const std::string& reason) {
    if (!done_) {
      done_ = true;
      rec().verdict = verdict;
      rec().reason = reason;
    }
    error_code ignored;
    client_.close(ignored);
    upstream_.close(ignored);
    timer_.cancel();
  }

  // A response the program can print, then the connection is closed. The
  // reason is the status line's reason phrase too: clients that show only
  // the status of a failed CONNECT (Python's "Tunnel connection failed: 403
  // ...", curl -v) show why.
  void answer(int status, const char* text, const char* verdict, const std::string& reason) {
    if (done_) return;
    done_ = true;
    rec().verdict = verdict;
    rec().reason = reason;
    const std::string body = "throwbox proxy: " + reason + "\n";
    out_ = "HTTP/1.1 " + std::to_string(status) + " " + text + " (" + reason_phrase(reason) +
           ")\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
    error_code ignored;
    upstream_.close(ignored);
    asio::async_write(client_, asio::buffer(out_), [self = shared_from_this()](error_code, size_t) {
      error_code e;
      self->client_.shutdown(tcp::socket::shutdown_both, e);
      self->client_.close(e);
    });
  }
  void refuse(const std::string& reason) { answer(403, "Forbidden", "refused", reason); }
  void malformed(const std::string& reason) { answer(400, "Bad Request", "refused", reason); }
  void failed(const std::string& reason) { answer(502, "Bad Gateway", "failed", reason); }

  // 1. The request head, within kHeadTimeout and kHeadMaxBytes: read up to
  // its blank line (a search, not a parse).
  void read_head() {
    timer_.expires_after(kHeadTimeout);
    timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec && !self->head_read_) self->end("refused", "no complete request within 10 s");
    });
    asio::async_read_until(client_, asio::dynamic_buffer(head_buf_, kHeadMaxBytes), "\r\n\r\n",
                           [self = shared_from_this()](error_code ec, size_t n) { self->on_head(ec, n); });
  }

  // 2. The head is parsed by the job's parser helper child (head.h); the
  // server goes on with the destination it answered, checked again.
  void on_head(error_code ec, size_t n) {
    head_read_ = true;
    timer_.cancel();
    if (done_) return;
    if (ec == asio::error::eof || ec == asio::error::connection_reset)
      return end("refused", "closed before a complete request");
    if (ec == asio::error::not_found)
      return malformed("malformed request: the head is longer than " + std::to_string(kHeadMaxBytes) + " bytes");
    if (ec) return malformed("malformed request: " + ec.message());
    head_bytes_ = n;
    if (is_job_end_notice()) return s_->job_ended(shared_from_this());
    helper::Message request;
    request.kind = helper::Kind::kRequestHead;
    request.bytes = head_buf_.substr(0, n);
    s_->parse(std::move(request), [self = shared_from_this()](auto answer) {
      if (!answer) return self->on_parsed(answer.error());
      self->on_parsed(head_from_json(answer->first, std::move(answer->second)));
    });
  }

 public:
  // pid 1's notice: its exact bytes, from the port only pid 1 can bind.
  bool is_job_end_notice() {
    if (head_bytes_ != sizeof kJobEndNotice - 1 || head_buf_.size() != head_bytes_ ||
        head_buf_.compare(0, head_bytes_, kJobEndNotice) != 0)
      return false;
    return from_pid1();
  }
  // From the privileged port only pid 1 binds (the job cannot).
  bool from_pid1() const {
    error_code ec;
    const tcp::endpoint peer = client_.remote_endpoint(ec);
    return !ec && peer.port() == kJobEndSourcePort && peer.address().is_loopback();
  }

  void on_parsed(util::Result<Head> head) {
    if (done_) return;
    if (!head) return malformed("the request could not be parsed (" + head.error().message + ")");
    if (head->kind == Head::Kind::kMalformed) return malformed(head->reason);
    head_buf_.erase(0, head_bytes_);  // what follows the head (a TLS ClientHello, a body) stays
    connect_ = head->kind == Head::Kind::kConnect;
    forward_ = std::move(head->forward);
    dest_ = head->dest;
    rec().host = dest_.host;
    rec().port = dest_.port;
    // 3. The job's caps.
    const Profile& p = profile();
    if (ordinal_ > p.max_connections)
      return refuse("connection cap reached: profile " + p.name + " allows " + std::to_string(p.max_connections) +
                    " connections per job");
    if (s_->bytes_ >= p.max_bytes)
      return refuse("byte cap reached: profile " + p.name + " allows " + std::to_string(p.max_bytes) +
                    " bytes per job");
    // 4. The profile.
    if (!allows(s_->profile_.allow, dest_)) {
      if (dest_.literal)
        return refuse("address literal " + dest_.text() + " is not allowed by profile " + p.name +
                      " (ask for a host name the profile lists)");
      return refuse(dest_.text() + " is not allowed by profile " + p.name);
    }
    // A host with a credential or rules: its requests are read, so over TLS only.
    if (intercepts(p, dest_.host)) {
      if (!connect_)
        return refuse(dest_.host + " is reached over https only (profile " + p.name +
                      " checks its requests); use an https:// URL");
      if (s_->tls_ == nullptr) return failed("this server cannot read requests to " + dest_.host + " (no CA)");
      intercepted_ = true;
      rec().intercepted = true;
    }
    resolve();
  }

  // 5. Resolve: a literal is itself, network.hosts is fixed, else the host's
  // resolver (asynchronous, the name as a fully qualified one), once one of
  // the job's lookup slots is free. Waiting for a slot, the lookup and the
  // connect share the connect timeout.
  void resolve() {
    if (dest_.literal) return check_and_connect({*parse_address(dest_.host)});
    if (auto it = s_->rules_.hosts.find(dest_.host); it != s_->rules_.hosts.end())
      return check_and_connect({it->second});
    timer_.expires_after(kConnectTimeout);
    timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (ec || self->done_ || self->resolved_) return;
      self->failed("cannot resolve " + self->dest_.host + ": no answer within 10 s" +
                   (self->lookup_started_ ? "" : " (this job's other lookups held every slot)"));
    });
    s_->queue_lookup(shared_from_this());
  }

 public:
  bool done() const { return done_; }
  // The session gave this tunnel a lookup slot; it gives it back with lookup_ended().
  void start_lookup(Resolver& resolver) {
    lookup_started_ = true;
    resolver.resolve(dest_.host, [self = shared_from_this()](util::Result<std::vector<Address>> found) {
      asio::post(self->s_->io_, [self, found = std::move(found)] {
        self->s_->lookup_ended();
        self->on_resolved(found);
      });
    });
  }

 private:
  void on_resolved(const util::Result<std::vector<Address>>& found) {
    resolved_ = true;
    if (done_) return;
    timer_.cancel();
    if (!found) return failed("cannot resolve " + dest_.host + ": " + found.error().message);
    check_and_connect(found.value());
  }

  // 6. Every address the name has must be reachable, or none is used: a name
  // with a public and a private answer is refused whichever a client would pick.
  void check_and_connect(const std::vector<Address>& found) {
    std::vector<tcp::endpoint> endpoints;
    for (const Address& raw : found) {
      const Address a = raw.unmapped();
      if (auto range = special_range(a)) {
        bool listed = std::any_of(s_->rules_.allow_private.begin(), s_->rules_.allow_private.end(),
                                  [&](const Cidr& c) { return c.contains(a); });
        if (!listed) {
          rec().address = a.text();
          return refuse(dest_.host + " resolves to " + a.text() + ", in the " + *range +
                        " range, which jobs may not reach");
        }
      }
      endpoints.emplace_back(asio::ip::make_address(a.text()), dest_.port);
    }
    // 7. To the address checked: nothing resolves the name again.
    timer_.expires_after(kConnectTimeout);
    timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec && !self->connected_) {
        error_code e;
        self->upstream_.close(e);
      }
    });
    asio::async_connect(upstream_, endpoints, [self = shared_from_this()](error_code ec, const tcp::endpoint& ep) {
      self->connected_ = true;
      self->timer_.cancel();
      if (self->done_) return;
      if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor)
        return self->failed("connecting to " + self->dest_.text() + ": no answer within 10 s");
      if (ec) return self->failed("connecting to " + self->dest_.text() + ": " + ec.message());
      self->rec().address = ep.address().to_string();
      self->on_connected();
    });
  }

  // 8. CONNECT: say so, then bytes. Absolute-form: the head as the parser
  // helper rewrote it (origin form, Host the checked authority, proxy
  // headers dropped, one request only), checked by head_from_json.
  void on_connected() {
    // Bytes are passed on as they come: a small write (a response's head)
    // must not wait for the ACK of the one before (the peer's delayed ACK
    // would hold it 40 ms).
    error_code ignored;
    client_.set_option(tcp::no_delay(true), ignored);
    upstream_.set_option(tcp::no_delay(true), ignored);
    if (intercepted_) {
      // The job's TLS begins once the proxy has answered; nothing may come before.
      if (!head_buf_.empty()) return malformed("bytes after the CONNECT head, before the proxy answered it");
      relaying_ = true;
      return intercept(shared_from_this(), client_, upstream_, dest_.host, dest_.port, *s_->tls_,
                       credential_for(profile(), dest_.host, dest_.port), profile().rules);
    }
    if (connect_) {
      out_ = "HTTP/1.1 200 Connection established\r\n\r\n";
      asio::async_write(client_, asio::buffer(out_), [self = shared_from_this()](error_code ec, size_t) {
        if (self->done_) return;
        if (ec) return self->end("allowed", "");
        self->send_leftover();
      });
      return;
    }
    out_ = std::move(forward_);
    forward_up(asio::buffer(out_), [](Tunnel& t) { t.send_leftover(); });
  }

  // Bytes of the job's to the destination, within the byte cap; then `next`.
  template <class Next>
  void forward_up(asio::const_buffer data, Next next) {
    const uint64_t take = s_->charge(data.size());
    rec().bytes_up += take;
    asio::async_write(upstream_, asio::buffer(data.data(), take),
                      [self = shared_from_this(), capped = take < data.size(), next](error_code ec, size_t) {
                        if (self->done_) return;
                        if (ec) return self->end("allowed", "");
                        if (capped) return self->cut(self->byte_cap_reason());
                        next(*self);
                      });
  }

  // What the client sent after the head (a TLS ClientHello, a body) goes first.
  void send_leftover() {
    if (head_buf_.empty()) return relay_both();
    leftover_ = std::move(head_buf_);
    head_buf_.clear();
    forward_up(asio::buffer(leftover_), [](Tunnel& t) { t.relay_both(); });
  }

  // 9. Both directions until each side has closed.
  void relay_both() {
    relaying_ = true;
    read_from(true);
    read_from(false);
  }

  void read_from(bool up) {
    tcp::socket& src = up ? client_ : upstream_;
    auto& buf = up ? up_buf_ : down_buf_;
    src.async_read_some(asio::buffer(buf), [self = shared_from_this(), up](error_code ec, size_t n) {
      if (self->done_) return;
      if (ec == asio::error::eof) return self->half_close(up);
      if (ec) return self->end("allowed", "");
      auto& data = up ? self->up_buf_ : self->down_buf_;
      const uint64_t take = self->s_->charge(n);
      (up ? self->rec().bytes_up : self->rec().bytes_down) += take;
      tcp::socket& dst = up ? self->upstream_ : self->client_;
      asio::async_write(dst, asio::buffer(data.data(), take), [self, up, capped = take < n](error_code wec, size_t) {
        if (self->done_) return;
        if (wec) return self->end("allowed", "");
        if (capped) return self->cut(self->byte_cap_reason());
        self->read_from(up);
      });
    });
  }

  void half_close(bool up) {
    error_code ignored;
    (up ? upstream_ : client_).shutdown(tcp::socket::shutdown_send, ignored);
    if (--open_directions_ == 0) end("allowed", "");
  }

  std::shared_ptr<SessionImpl> s_;
  tcp::socket client_;
  tcp::socket upstream_;
  asio::steady_timer timer_;
  std::string head_buf_;   // read until the head's blank line (at most kHeadMaxBytes), and what came after
  size_t head_bytes_ = 0;  // of head_buf_: the head, up to its blank line
  std::string out_, leftover_, forward_;
  Authority dest_;
  std::array<char, kRelayChunkBytes> up_buf_{}, down_buf_{};
  size_t slot_;
  const uint64_t ordinal_;  // this connection's number in the job, counted at accept
  Connection scratch_;      // the record of a connection beyond the logged ones
  bool connect_ = false;
  bool intercepted_ = false;
  bool head_read_ = false;
  bool lookup_started_ = false;
  bool resolved_ = false;
  bool connected_ = false;
  bool done_ = false;
  bool relaying_ = false;
  int open_directions_ = 2;
};

void SessionImpl::serve(util::UniqueFd listener) {
  asio::post(io_, [self = shared_from_this(), fd = listener.release()] {
    if (self->finished_) {
      ::close(fd);
      return;
    }
    error_code ec;
    self->acceptor_.assign(tcp::v4(), fd, ec);
    if (ec) {
      ::close(fd);
      spdlog::error("job {}: proxy: cannot use the job's listener: {}", self->job_id_, ec.message());
      return;
    }
    self->arm_deadline();
    self->accept_next();
  });
}

void SessionImpl::arm_deadline() {
  deadline_.async_wait([self = shared_from_this()](error_code ec) {
    if (ec || self->finished_) return;
    error_code e;
    self->acceptor_.close(e);
    self->cut_all("the job's deadline passed");
  });
}

void SessionImpl::accept_next() {
  acceptor_.async_accept([self = shared_from_this()](error_code ec, tcp::socket sock) {
    if (ec || self->finished_) return;
    ++self->accepted_;
    if (self->accepted_ > self->profile_.policy.max_connections + kRefusalsPastCapMax) {
      error_code e;
      self->acceptor_.close(e);  // connects are refused by the kernel from now on
      sock.close(e);
      return;
    }
    auto t = std::make_shared<Tunnel>(self, std::move(sock));
    self->tunnels_.push_back(t);
    t->start();
    self->accept_next();
  });
}

void SessionImpl::queue_lookup(std::shared_ptr<Tunnel> t) {
  if (lookups_in_flight_ < kLookupsPerJobMax) {
    ++lookups_in_flight_;
    t->start_lookup(resolver_);
  } else {
    lookup_waiters_.push_back(std::move(t));
  }
}

void SessionImpl::lookup_ended() {
  --lookups_in_flight_;
  while (!lookup_waiters_.empty() && lookups_in_flight_ < kLookupsPerJobMax) {
    std::shared_ptr<Tunnel> next = std::move(lookup_waiters_.front());
    lookup_waiters_.pop_front();
    if (next->done()) continue;  // its timeout, the job's deadline or end came first
    ++lookups_in_flight_;
    next->start_lookup(resolver_);
  }
}

void SessionImpl::parse(helper::Message request, ParseDone done) {
  heads_.emplace_back(std::move(request), std::move(done));
  parse_next();
}

void SessionImpl::parser_failed(const std::string& why) {
  parser_failure_ = "this job's request parser failed on an earlier request (" + why + ")";
  parser_.kill();
  error_code e;
  parser_sock_.close(e);
  parser_timer_.cancel();
  parsing_ = false;
  auto waiting = std::move(heads_);
  for (auto& [_, done] : waiting) done(util::make_error(util::ErrorCode::kInvalidArgument, parser_failure_));
}

void SessionImpl::parse_next() {
  if (parsing_ || heads_.empty()) return;
  if (!parser_failure_.empty() || !parser_sock_.is_open()) {
    if (parser_failure_.empty()) parser_failure_ = "this job has no request parser";
    auto waiting = std::move(heads_);
    for (auto& [_, done] : waiting) done(util::make_error(util::ErrorCode::kInvalidArgument, parser_failure_));
    return;
  }
  parsing_ = true;
  parse_out_ = helper::encode(heads_.front().first);
  parser_timer_.expires_after(kHeadParseTimeout);
  parser_timer_.async_wait([self = shared_from_this()](error_code ec) {
    if (!ec && self->parsing_) self->parser_failed("no answer within 2 s");
  });
  auto self = shared_from_this();
  asio::async_write(parser_sock_, asio::buffer(parse_out_), [self](error_code ec, size_t) {
    if (!self->parsing_) return;
    if (ec) return self->parser_failed("sending: " + ec.message());
    self->parse_header_.assign(helper::kHeaderBytes, '\0');
    asio::async_read(self->parser_sock_, asio::buffer(self->parse_header_), [self](error_code ec2, size_t) {
      if (!self->parsing_) return;
      if (ec2) return self->parser_failed(ec2 == asio::error::eof ? "it ended" : ec2.message());
      // An answer to a head: a small document and a forwarded head, each bounded.
      auto h = helper::decode_header(self->parse_header_, kForwardMaxBytes);
      if (!h || h->meta_bytes > 4 * kHeadMaxBytes) return self->parser_failed("a malformed answer");
      self->parse_meta_.assign(h->meta_bytes + h->bytes, '\0');
      asio::async_read(self->parser_sock_, asio::buffer(self->parse_meta_), [self, h = *h](error_code ec3, size_t) {
        if (!self->parsing_) return;
        if (ec3) return self->parser_failed(ec3.message());
        self->parser_timer_.cancel();
        self->parsing_ = false;
        ParseDone done = std::move(self->heads_.front().second);
        self->heads_.pop_front();
        nlohmann::json meta =
            nlohmann::json::parse(std::string_view(self->parse_meta_).substr(0, h.meta_bytes), nullptr, false);
        if (h.kind != helper::Kind::kAnswer || !meta.is_object()) {
          self->parser_failed("an answer that is not one");
          return done(util::make_error(util::ErrorCode::kInvalidArgument, self->parser_failure_));
        }
        done(std::make_pair(std::move(meta), self->parse_meta_.substr(h.meta_bytes)));
        self->parse_next();
      });
    });
  });
}

void SessionImpl::cut_all(const std::string& reason) {
  for (auto& weak : tunnels_)
    if (auto t = weak.lock()) t->cut(reason);
}

// The program ended and pid 1 waits for the answer before it kills what the
// program left: every tunnel whose job side is still held is cut now, so its
// record says the job's end cut it. One the job closed itself ends as it would.
// No connection is accepted after it; the job has none to make.
void SessionImpl::job_ended(const std::shared_ptr<Tunnel>& notice) {
  error_code e;
  acceptor_.close(e);
  for (auto& weak : tunnels_)
    if (auto t = weak.lock(); t && t != notice && !t->done() && t->job_side_held()) t->cut(kJobEnded);
  notice->acknowledge_end();
}

Report SessionImpl::finish() {
  auto done = std::make_shared<std::promise<Report>>();
  std::future<Report> report = done->get_future();
  asio::post(io_, [self = shared_from_this(), done] {
    self->finished_ = true;
    error_code e;
    self->acceptor_.close(e);
    self->deadline_.cancel();
    for (auto& weak : self->tunnels_)
      if (auto t = weak.lock()) t->end_with_job();
    self->parser_failure_ = kJobEnded;
    self->parser_.kill();
    self->parser_sock_.close(e);
    self->parser_timer_.cancel();
    Report out = self->report_;
    for (auto it = self->pid1_slots_.rbegin(); it != self->pid1_slots_.rend(); ++it) {
      if (*it != SIZE_MAX)
        out.connections.erase(out.connections.begin() + static_cast<std::ptrdiff_t>(*it));
      else if (out.connections_not_listed > 0)
        --out.connections_not_listed;
    }
    done->set_value(std::move(out));
  });
  // The io thread answers at once unless the server is stopping.
  if (report.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    spdlog::error("job {}: proxy did not report the job's connections", job_id_);
    Report r;
    r.profile = profile_.policy.name;
    return r;
  }
  return report.get();
}

}  // namespace

nlohmann::json to_json(const Report& report) {
  nlohmann::json list = nlohmann::json::array();
  for (auto& c : report.connections) {
    nlohmann::json entry = {{"host", c.host},
                            {"port", c.port},
                            {"address", c.address},
                            {"bytes_up", c.bytes_up},
                            {"bytes_down", c.bytes_down},
                            {"verdict", c.verdict},
                            {"reason", c.reason},
                            {"intercepted", c.intercepted}};
    if (c.intercepted) {
      nlohmann::json requests = nlohmann::json::array();
      for (auto& r : c.requests)
        requests.push_back({{"method", r.method},
                            {"path", r.path},
                            {"status", r.status},
                            {"verdict", r.verdict},
                            {"reason", r.reason}});
      entry["requests"] = std::move(requests);
      entry["requests_not_listed"] = c.requests_not_listed;
    }
    list.push_back(std::move(entry));
  }
  return {
      {"profile", report.profile}, {"connections", list}, {"connections_not_listed", report.connections_not_listed}};
}

Report report_from_json(const nlohmann::json& j) {
  Report r;
  if (!j.is_object()) return r;
  r.profile = j.value("profile", "");
  r.connections_not_listed = j.value("connections_not_listed", uint64_t{0});
  for (auto& c : j.value("connections", nlohmann::json::array())) {
    Connection conn;
    conn.host = c.value("host", "");
    conn.port = c.value("port", uint16_t{0});
    conn.address = c.value("address", "");
    conn.bytes_up = c.value("bytes_up", uint64_t{0});
    conn.bytes_down = c.value("bytes_down", uint64_t{0});
    conn.verdict = c.value("verdict", "");
    conn.reason = c.value("reason", "");
    conn.intercepted = c.value("intercepted", false);
    conn.requests_not_listed = c.value("requests_not_listed", uint64_t{0});
    for (auto& q : c.value("requests", nlohmann::json::array()))
      conn.requests.push_back({q.value("method", ""), q.value("path", ""), q.value("status", 0), q.value("verdict", ""),
                               q.value("reason", "")});
    r.connections.push_back(std::move(conn));
  }
  return r;
}

// The policy's network section, checked and parsed. can_intercept: the
// proxy has a CA; without one a profile with credentials or rules is refused.
util::Result<std::shared_ptr<const Rules>> compile_rules(const Settings& policy, bool can_intercept) {
  auto rules = std::make_shared<Rules>();
  for (auto& [name, address] : policy.hosts) {
    auto a = parse_address(address);
    if (!a) return util::make_error(util::ErrorCode::kPolicy, "network.hosts." + name + ": not an address");
    rules->hosts[name] = *a;
  }
  for (auto& c : policy.allow_private) {
    auto cidr = parse_cidr(c);
    if (!cidr) return util::make_error(util::ErrorCode::kPolicy, "network.allow_private: " + cidr.error().message);
    rules->allow_private.push_back(*cidr);
  }
  for (auto& [name, p] : policy.profiles) {
    if (!can_intercept && (!p.credentials.empty() || !p.rules.empty()))
      return util::make_error(util::ErrorCode::kPolicy,
                              "network.profiles." + name + ": credentials and rules need the server's egress CA");
    Rules::Profile profile{p, {}};
    for (auto& entry : p.allow) {
      auto rule = parse_allow(entry);
      if (!rule)
        return util::make_error(util::ErrorCode::kPolicy,
                                "network.profiles." + name + ".allow: " + rule.error().message);
      profile.allow.push_back(*rule);
    }
    rules->profiles[name] = std::move(profile);
  }
  return std::shared_ptr<const Rules>(std::move(rules));
}

struct Proxy::Impl {
  helper::Parsers* parsers = nullptr;  // the server's; each session forks a child of its own
  std::mutex rules_mu;
  std::shared_ptr<const Rules> rules;  // what new sessions get; a reload replaces it
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(io);
  // After io: destroyed before it, its last answers queued on io and dropped with it.
  std::unique_ptr<Resolver> resolver;
  std::unique_ptr<TlsContexts> tls;  // null without a CA; used on the io thread only
  std::thread thread;
};

util::Result<std::unique_ptr<Proxy>> Proxy::start(const Settings& policy, helper::Parsers& parsers, EgressCa* ca) {
  auto impl = std::make_unique<Impl>();
  impl->parsers = &parsers;
  if (ca != nullptr) {
    auto tls = TlsContexts::make(*ca);
    if (!tls) return util::make_error(util::ErrorCode::kInternal, "network: " + tls.error().message);
    impl->tls = std::move(*tls);
  }
  auto rules = compile_rules(policy, impl->tls != nullptr);
  if (!rules) return rules.error();
  impl->rules = std::move(*rules);
  auto resolver = Resolver::start();
  if (!resolver) return util::make_error(util::ErrorCode::kInternal, "network: " + resolver.error().message);
  impl->resolver = std::move(*resolver);
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] {
    for (;;) {
      try {
        raw->io.run();
        return;
      } catch (const std::exception& e) {
        spdlog::error("proxy: {}", e.what());  // one tunnel's failure; the others go on
      }
    }
  });
  return std::unique_ptr<Proxy>(new Proxy(std::move(impl)));
}

Proxy::Proxy(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Proxy::~Proxy() {
  impl_->work.reset();
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

util::Status Proxy::update(const Settings& policy) {
  auto rules = compile_rules(policy, impl_->tls != nullptr);
  if (!rules) return rules.error();
  std::lock_guard lock(impl_->rules_mu);
  impl_->rules = std::move(*rules);
  return util::ok_status();
}

util::Result<std::shared_ptr<Session>> Proxy::open(const std::string& job_id, const std::string& profile,
                                                   int64_t deadline_ms) {
  std::shared_ptr<const Rules> rules;
  {
    std::lock_guard lock(impl_->rules_mu);
    rules = impl_->rules;
  }
  auto it = rules->profiles.find(profile);
  if (it == rules->profiles.end())
    return util::make_error(util::ErrorCode::kInvalidArgument, "network: no profile \"" + profile + "\"");
  const Rules::Profile& chosen = it->second;
  // The job's parser child, forked here on the job's own thread, not the proxy's.
  auto parser = impl_->parsers->child();
  if (!parser) return util::make_error(util::ErrorCode::kInternal, "network: " + parser.error().message);
  return std::shared_ptr<Session>(std::make_shared<SessionImpl>(impl_->io, *impl_->resolver, impl_->tls.get(),
                                                                std::move(rules), chosen, job_id, deadline_ms,
                                                                std::move(*parser)));
}

}  // namespace network
