// The intake: connections wait here, on one epoll thread, until their request
// is in the socket (plain HTTP) or decrypted in the connection's buffer (TLS,
// whose handshake runs here too); only then does a worker take one. A refusal
// or a cut is a canned response sent without blocking, then a short drain so
// the client reads it instead of a reset. Over TLS a connection refused at
// accept, or cut before its handshake finished, is closed without an answer
// (there is no session to send one in).
#include "server/transport/http_intake.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <spdlog/spdlog.h>
#include <vector>

namespace transport::http {

struct IntakeCounts {
  std::mutex mu;
  size_t open = 0;
  std::map<std::string, size_t> by_address;
  // Since the last log line: what was refused or cut, and why.
  std::atomic<size_t> over_address{0}, over_total{0}, no_worker{0}, timed_out{0};
};

namespace {

constexpr auto kLinger = std::chrono::seconds(1);       // a refused or cut connection: drained this long, then closed
constexpr size_t kLingeringMax = 64;                    // beyond: closed at once (a flood must not pile up descriptors)
constexpr auto kTick = std::chrono::milliseconds(100);  // deadline resolution
constexpr auto kReportInterval = std::chrono::seconds(10);

std::string canned(int status, const char* reason, const char* retry_after, const std::string& text) {
  std::string r = "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\n";
  if (retry_after) r += std::string("Retry-After: ") + retry_after + "\r\n";
  r += "Content-Type: text/plain\r\nContent-Length: " + std::to_string(text.size()) + "\r\nConnection: close\r\n\r\n";
  return r + text;
}

const std::string& over_address_answer() {
  static const std::string r = canned(503, "Service Unavailable", "1",
                                      "Service Unavailable: too many connections from this address; retry shortly\n");
  return r;
}
const std::string& over_total_answer() {
  static const std::string r =
      canned(503, "Service Unavailable", "1", "Service Unavailable: too many connections; retry shortly\n");
  return r;
}
const std::string& timeout_answer() {
  static const std::string r =
      canned(408, "Request Timeout", nullptr, "Request Timeout: the request did not arrive in time; send it at once\n");
  return r;
}

// The peer's numeric address without the port; an IPv4-mapped IPv6 address as IPv4.
std::string peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return {};
  char host[NI_MAXHOST] = {};
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0)
    return {};
  std::string h = host;
  if (h.rfind("::ffff:", 0) == 0 && h.find('.') != std::string::npos) h = h.substr(7);
  return h;
}

void discard_input(int fd) {
  std::array<char, 4096> scratch;
  for (int i = 0; i < 16; ++i)
    if (::recv(fd, scratch.data(), scratch.size(), MSG_DONTWAIT) <= 0) return;
}

// Sends a canned answer without blocking (it fits any socket buffer) and ends
// the connection's sending side.
void answer_and_shut(int fd, const std::string& answer) {
  discard_input(fd);
  (void)::send(fd, answer.data(), answer.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_WR);
}

bool iequals_prefix(std::string_view line, std::string_view name) {
  if (line.size() < name.size()) return false;
  for (size_t i = 0; i < name.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(line[i])) != name[i]) return false;
  return true;
}

std::string_view trim(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

}  // namespace

Arrival classify_arrival(std::string_view bytes, size_t* request_bytes, bool* authorization_too_long) {
  size_t ignored = 0;
  size_t& length = request_bytes ? *request_bytes : ignored;
  length = 0;
  // Empty lines before a request line are allowed (RFC 9112 2.2); cpp-httplib skips none, so neither is this a request.
  const size_t end = bytes.find("\r\n\r\n");
  if (authorization_too_long) {
    *authorization_too_long = false;
    const std::string_view head = bytes.substr(0, end);
    for (size_t pos = head.find("\r\n"); pos != std::string_view::npos;) {
      const size_t next = head.find("\r\n", pos + 2);
      const std::string_view line =
          head.substr(pos + 2, next == std::string_view::npos ? std::string_view::npos : next - pos - 2);
      if (line.size() + 2 >= kHeaderLineMax && iequals_prefix(line, "authorization:")) *authorization_too_long = true;
      pos = next;
    }
  }
  if (end == std::string_view::npos) return bytes.size() >= kPeekBytes ? Arrival::kTooLong : Arrival::kPartial;
  const size_t header_bytes = end + 4;
  std::string_view headers = bytes.substr(0, end);
  size_t content_length = 0;
  bool body_for_worker = false, chunked = false;
  size_t pos = headers.find("\r\n");  // past the request line
  while (pos != std::string_view::npos) {
    size_t next = headers.find("\r\n", pos + 2);
    std::string_view line =
        headers.substr(pos + 2, next == std::string_view::npos ? std::string_view::npos : next - pos - 2);
    pos = next;
    if (iequals_prefix(line, "content-length:")) {
      std::string_view v = trim(line.substr(15));
      size_t n = 0;
      bool digits = !v.empty() && v.size() <= 19;
      for (char ch : v) {
        if (ch < '0' || ch > '9')
          digits = false;
        else
          n = n * 10 + static_cast<size_t>(ch - '0');
      }
      if (!digits) return Arrival::kHeadersOnly;  // the worker refuses it (400)
      content_length = n;
    } else if (iequals_prefix(line, "transfer-encoding:")) {
      chunked = true;
    } else if (iequals_prefix(line, "expect:")) {
      body_for_worker = true;  // the client waits for 100 Continue before its body
    }
  }
  if (chunked) return Arrival::kHeadersOnly;
  length = header_bytes + content_length;
  if (body_for_worker || header_bytes + content_length > kBodyInIntakeMax) return Arrival::kHeadersOnly;
  return bytes.size() >= header_bytes + content_length ? Arrival::kComplete : Arrival::kPartial;
}

void Connection::release_slot() {
  if (!counts) return;
  std::lock_guard lock(counts->mu);
  --counts->open;
  auto it = counts->by_address.find(address);
  if (it != counts->by_address.end() && --it->second == 0) counts->by_address.erase(it);
  counts.reset();
}

Connection::~Connection() {
  if (tls) {
    tls->close_notify();
    tls.reset();
  }
  if (fd.valid()) ::shutdown(fd.get(), SHUT_RDWR);
  release_slot();
}

// ---- DeadlineStream ----

DeadlineStream::~DeadlineStream() { c_.buffered.erase(0, consumed_); }

bool DeadlineStream::wait_readable() const {
  const auto now = IntakeClock::now();
  if (now >= c_.deadline) {
    deadline_passed_ = true;
    return false;
  }
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(c_.deadline - now) + std::chrono::milliseconds(1);
  const bool deadline_first = left <= read_timeout_;
  pollfd p{c_.fd.get(), POLLIN, 0};
  int r;
  do r = ::poll(&p, 1, static_cast<int>(std::min(left, read_timeout_).count()));
  while (r < 0 && errno == EINTR);
  if (r == 0 && deadline_first) deadline_passed_ = true;
  return r > 0;
}

bool DeadlineStream::wait_writable() const {
  pollfd p{c_.fd.get(), POLLOUT, 0};
  int r;
  do r = ::poll(&p, 1, static_cast<int>(write_timeout_.count()));
  while (r < 0 && errno == EINTR);
  return r > 0 && !(p.revents & (POLLERR | POLLHUP));
}

bool DeadlineStream::is_readable() const {
  return consumed_ < c_.buffered.size() || (c_.tls && c_.tls->pending()) || wait_readable();
}

ssize_t DeadlineStream::fill() {
  std::array<char, 4096> chunk;
  if (!c_.tls) {
    if (!wait_readable()) return -1;
    ssize_t n;
    do n = ::recv(c_.fd.get(), chunk.data(), chunk.size(), 0);
    while (n < 0 && errno == EINTR);
    if (n > 0) c_.buffered.assign(chunk.data(), static_cast<size_t>(n));
    return n;
  }
  // The socket is non-blocking: wait as the session asks, within the deadline.
  for (;;) {
    size_t n = 0;
    switch (c_.tls->read(chunk.data(), chunk.size(), &n)) {
      case TlsIo::kOk:
        c_.buffered.assign(chunk.data(), n);
        return static_cast<ssize_t>(n);
      case TlsIo::kWantRead:
        if (!wait_readable()) return -1;
        break;
      case TlsIo::kWantWrite:
        if (!wait_writable()) return -1;
        break;
      case TlsIo::kClosed:
        return 0;
      case TlsIo::kFailed:
        return -1;
    }
  }
}

ssize_t DeadlineStream::read(char* ptr, size_t size) {
  if (consumed_ == c_.buffered.size()) {
    c_.buffered.clear();
    consumed_ = 0;
    const ssize_t n = fill();
    if (n <= 0) return n;
  }
  const size_t n = std::min(size, c_.buffered.size() - consumed_);
  std::copy_n(c_.buffered.data() + consumed_, n, ptr);
  consumed_ += n;
  bytes_read_ += n;
  return static_cast<ssize_t>(n);
}

// As cpp-httplib's SocketStream: writable within the write timeout, and the
// peer not gone (readable with nothing but EOF to read): how an SSE stream
// finds a client that left.
bool DeadlineStream::is_writable() const {
  pollfd p{c_.fd.get(), POLLOUT, 0};
  int r;
  do r = ::poll(&p, 1, static_cast<int>(write_timeout_.count()));
  while (r < 0 && errno == EINTR);
  if (r <= 0 || (p.revents & (POLLERR | POLLHUP))) return false;
  pollfd in{c_.fd.get(), POLLIN, 0};
  if (::poll(&in, 1, 0) <= 0) return true;
  char byte;
  return ::recv(c_.fd.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

ssize_t DeadlineStream::write(const char* ptr, size_t size) {
  if (!is_writable()) return -1;
  if (!c_.tls) {
    ssize_t n;
    do n = ::send(c_.fd.get(), ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
  }
  for (;;) {
    size_t n = 0;
    switch (c_.tls->write(ptr, size, &n)) {
      case TlsIo::kOk:
        return static_cast<ssize_t>(n);
      case TlsIo::kWantWrite:
        if (!wait_writable()) return -1;
        break;
      case TlsIo::kWantRead: {  // the session must read first (a TLS 1.3 key update)
        pollfd p{c_.fd.get(), POLLIN, 0};
        int r;
        do r = ::poll(&p, 1, static_cast<int>(write_timeout_.count()));
        while (r < 0 && errno == EINTR);
        if (r <= 0) return -1;
        break;
      }
      case TlsIo::kClosed:
      case TlsIo::kFailed:
        return -1;
    }
  }
}

namespace {
void ip_and_port(const sockaddr_storage& ss, socklen_t len, std::string& ip, int& port) {
  char host[NI_MAXHOST] = {}, serv[NI_MAXSERV] = {};
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&ss), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host;
    port = std::atoi(serv);
  }
}
}  // namespace

void DeadlineStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(c_.fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) == 0) ip_and_port(ss, len, ip, port);
}

void DeadlineStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(c_.fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) == 0) ip_and_port(ss, len, ip, port);
}

// ---- Intake ----

Intake::Intake(IntakeLimits limits, std::shared_ptr<const TlsContext> tls)
    : limits_(limits), tls_(std::move(tls)), counts_(std::make_shared<IntakeCounts>()) {
  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_.valid()) spdlog::error("http: epoll_create1: {}", std::strerror(errno));
}

Intake::~Intake() { stop(); }

void Intake::start(Ready ready) {
  ready_ = std::move(ready);
  thread_ = std::thread([this] { run(); });
}

void Intake::stop() {
  std::map<int, std::shared_ptr<Connection>> gone;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    gone.swap(waiting_);
  }
  if (thread_.joinable()) thread_.join();
}  // gone's connections close here

void Intake::watch(std::shared_ptr<Connection> c) {
  const int fd = c->fd.get();
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;                                    // c closes
    if (c->lingering && lingering_ >= kLingeringMax) return;  // closed now
    lingering_ += c->lingering;
    waiting_[fd] = std::move(c);
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
  ev.data.fd = fd;
  // An edge-triggered descriptor added with bytes already waiting reports them at once (epoll(7)).
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
    spdlog::warn("http: epoll_ctl(ADD, {}): {}", fd, std::strerror(errno));
    unwatch(fd);
  }
}

std::shared_ptr<Connection> Intake::unwatch(int fd) {
  std::shared_ptr<Connection> c;
  {
    std::lock_guard lock(mu_);
    auto it = waiting_.find(fd);
    if (it == waiting_.end()) return nullptr;
    c = std::move(it->second);
    waiting_.erase(it);
    lingering_ -= c->lingering;
  }
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  return c;
}

void Intake::linger(std::shared_ptr<Connection> c, const std::string& answer) {
  if (c->tls) {
    if (!c->tls->established()) return;  // no session to answer in: closed now
    discard_input(c->fd.get());
    size_t sent = 0;
    (void)c->tls->write(answer.data(), answer.size(), &sent);  // fits the socket's buffer; never waited for
    c->tls->close_notify();
    ::shutdown(c->fd.get(), SHUT_WR);
  } else {
    answer_and_shut(c->fd.get(), answer);
  }
  c->release_slot();  // it only drains now: its slot is free at once
  c->lingering = true;
  c->deadline = IntakeClock::now() + kLinger;
  watch(std::move(c));
}

void Intake::admit(int fd) {
  auto c = std::make_shared<Connection>();
  c->fd.reset(fd);
  c->address = peer_address(fd);
  c->deadline = IntakeClock::now() + limits_.request_deadline;
  c->idle_until = c->deadline;
  const std::string* refusal = nullptr;
  {
    std::lock_guard lock(counts_->mu);
    size_t& mine = counts_->by_address[c->address];
    if (counts_->open >= limits_.connections_max) {
      refusal = &over_total_answer();
      counts_->over_total++;
    } else if (mine >= limits_.per_address_max) {
      refusal = &over_address_answer();
      counts_->over_address++;
    } else {
      ++mine;
      ++counts_->open;
      c->counts = counts_;
    }
    if (mine == 0) counts_->by_address.erase(c->address);
  }
  if (refusal && tls_) return;  // no TLS session to answer in: closed (a plain answer would be garbage to the client)
  if (refusal) return linger(std::move(c), *refusal);
  if (tls_ && !(c->tls = tls_->accept(fd))) {
    spdlog::warn("http: cannot start a TLS session for a connection from {}", c->address);
    return;  // closed
  }
  watch(std::move(c));
}

void Intake::park(std::shared_ptr<Connection> c) {
  const auto now = IntakeClock::now();
  c->deadline = now + limits_.request_deadline;
  c->idle_until = now + limits_.keep_alive_idle;
  // TLS: what the session already holds, and the socket, into the buffer.
  if (c->tls && !tls_advance(*c) && c->buffered.empty()) return;  // the client ended it: closed
  c->waiting_first_byte = c->buffered.empty();
  // A pipelined request may already be whole in the buffer: no byte will come to say so.
  if (classify_arrival(c->buffered, &c->request_bytes, &c->authorization_too_long) != Arrival::kPartial)
    return hand_over(std::move(c));
  watch(std::move(c));
}

void Intake::hand_over(std::shared_ptr<Connection> c) {
  if (ready_(c)) return;
  counts_->no_worker++;
  linger(std::move(c), over_total_answer());
}

void Intake::check(const std::shared_ptr<Connection>& c) {
  const int fd = c->fd.get();
  if (c->lingering) {  // drain until EOF
    std::array<char, 4096> scratch;
    for (;;) {
      ssize_t n = ::recv(fd, scratch.data(), scratch.size(), MSG_DONTWAIT);
      if (n > 0) continue;
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
      unwatch(fd);  // EOF or error: closed
      return;
    }
  }
  if (c->tls) {
    const bool open = tls_advance(*c);
    if (!open && c->buffered.empty()) {
      unwatch(fd);  // closed, or a failed handshake
      return;
    }
    if (c->buffered.empty()) return;  // the handshake goes on, or no byte of a request yet
    c->waiting_first_byte = false;
    if (classify_arrival(c->buffered, &c->request_bytes, &c->authorization_too_long) == Arrival::kPartial) return;
    if (auto mine = unwatch(fd)) hand_over(std::move(mine));
    return;
  }
  static thread_local std::vector<char> peek(kPeekBytes);
  const size_t room = kPeekBytes - std::min(kPeekBytes, c->buffered.size());
  ssize_t n = ::recv(fd, peek.data(), room, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {  // the client closed (or the socket failed) before a whole request
    unwatch(fd);
    return;
  }
  c->waiting_first_byte = false;
  Arrival a;
  if (c->buffered.empty()) {
    a = classify_arrival(std::string_view(peek.data(), static_cast<size_t>(n)), &c->request_bytes,
                         &c->authorization_too_long);
  } else {
    std::string joined = c->buffered;
    joined.append(peek.data(), static_cast<size_t>(n));
    a = classify_arrival(joined, &c->request_bytes, &c->authorization_too_long);
  }
  if (a == Arrival::kPartial) return;
  if (auto mine = unwatch(fd)) hand_over(std::move(mine));
}

bool Intake::tls_advance(Connection& c) {
  if (!c.tls->established()) {
    switch (c.tls->handshake()) {
      case TlsIo::kOk:
        break;
      case TlsIo::kWantRead:
      case TlsIo::kWantWrite:
        return true;
      case TlsIo::kClosed:
        return false;
      case TlsIo::kFailed:
        spdlog::debug("http: TLS handshake with {} failed: {}", c.address, c.tls->last_error());
        return false;
    }
  }
  // Until the socket has nothing more (edge-triggered epoll reports only new
  // bytes), or the buffer holds as much as the intake ever looks at.
  std::array<char, 4096> chunk;
  while (c.buffered.size() < kPeekBytes) {
    size_t n = 0;
    switch (c.tls->read(chunk.data(), std::min(chunk.size(), kPeekBytes - c.buffered.size()), &n)) {
      case TlsIo::kOk:
        c.buffered.append(chunk.data(), n);
        break;
      case TlsIo::kWantRead:
      case TlsIo::kWantWrite:
        return true;
      case TlsIo::kClosed:
        return false;  // a request already buffered is still served (a half-close)
      case TlsIo::kFailed:
        spdlog::debug("http: TLS read from {} failed: {}", c.address, c.tls->last_error());
        return false;
    }
  }
  return true;
}

void Intake::sweep(IntakeClock::time_point now) {
  std::vector<std::shared_ptr<Connection>> due;
  {
    std::lock_guard lock(mu_);
    for (auto& [_, c] : waiting_)
      if (now >= c->deadline || (c->waiting_first_byte && now >= c->idle_until)) due.push_back(c);
  }
  for (auto& c : due) {
    auto mine = unwatch(c->fd.get());
    // A drain that ran out, or a keep-alive connection left idle: closed quietly.
    if (!mine || mine->lingering || (mine->waiting_first_byte && mine->requests > 0)) continue;
    counts_->timed_out++;
    linger(std::move(mine), timeout_answer());
  }
}

void Intake::run() {
  std::array<epoll_event, 64> events;
  auto next_report = IntakeClock::now() + kReportInterval;
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
    }
    int n = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), static_cast<int>(kTick.count()));
    if (n < 0 && errno != EINTR) {
      spdlog::error("http: epoll_wait: {}", std::strerror(errno));
      return;
    }
    for (int i = 0; i < n; ++i) {
      std::shared_ptr<Connection> c;
      {
        std::lock_guard lock(mu_);
        auto it = waiting_.find(events[static_cast<size_t>(i)].data.fd);
        if (it != waiting_.end()) c = it->second;
      }
      if (c) check(c);
    }
    const auto now = IntakeClock::now();
    sweep(now);
    if (now >= next_report) {
      next_report = now + kReportInterval;
      const size_t a = counts_->over_address.exchange(0), t = counts_->over_total.exchange(0),
                   w = counts_->no_worker.exchange(0), d = counts_->timed_out.exchange(0);
      if (a + t + w + d > 0)
        spdlog::warn(
            "http: in the last {} s: {} connection(s) refused over the per-address cap ({}), {} over the "
            "total cap ({}), {} with no worker free; {} request(s) cut at the {} ms deadline",
            kReportInterval.count(), a, limits_.per_address_max, t, limits_.connections_max, w, d,
            limits_.request_deadline.count());
    }
  }
}

}  // namespace transport::http
