// HTTP connections between requests: per-address and total caps, and the
// whole-request deadline, on one epoll thread that only peeks (plain HTTP) or
// runs the TLS handshake and reads without blocking (HTTPS), so a slow client
// never holds a worker. Runs on the accept thread (admit), its own
// thread and workers (park, the stream); never blocks on a client there.
#pragma once
#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "server/transport/tls.h"
#include "server/util/fd.h"

namespace transport::http {

using IntakeClock = std::chrono::steady_clock;

// Bytes the intake peeks at: a header block must fit (cpp-httplib refuses
// longer lines anyway), and so must a body it waits for.
constexpr size_t kPeekBytes = 64 * 1024;
// A body of at most this (with its headers) must be in the socket before a
// worker takes the request; well below the smallest TCP receive buffer
// (net.ipv4.tcp_rmem's default, 128 KiB, of which about half holds data), so
// a client can always send it. A longer, chunked or 100-continue body is read
// by the worker, still within the same deadline.
constexpr size_t kBodyInIntakeMax = 32 * 1024;

// What the bytes a client has sent so far say about its next request.
enum class Arrival {
  kPartial,      // the header block, or a body of at most kBodyInIntakeMax, is still coming
  kComplete,     // request line, headers and any such body are all here
  kHeadersOnly,  // headers here; the body (chunked, 100-continue or longer) is for the worker to read
  kTooLong,      // kPeekBytes without the end of the headers: the worker answers it (431/400) and closes
};
// The longest header line cpp-httplib reads (with its CRLF); a longer one is
// its bare 400. An Authorization line that long is answered 401 instead.
constexpr size_t kHeaderLineMax = CPPHTTPLIB_HEADER_MAX_LENGTH;
// request_bytes: the request's length (headers and Content-Length body) when
// known, else 0 (chunked, malformed or not yet whole headers).
// authorization_too_long: whether an Authorization line of what has come
// reaches kHeaderLineMax (an oversized bearer token).
Arrival classify_arrival(std::string_view bytes, size_t* request_bytes = nullptr,
                         bool* authorization_too_long = nullptr);

struct IntakeLimits {
  size_t connections_max = 512;                        // open connections in all
  size_t per_address_max = 128;                        // open connections from one client address
  std::chrono::milliseconds request_deadline{10'000};  // from accept or the previous response to fully read
  std::chrono::milliseconds keep_alive_idle{5'000};    // after a response: no byte by then, closed quietly
};

struct IntakeCounts;

// One client connection, owned by the intake while it waits for a request and
// by a worker while that serves it; closing it (the destructor) frees its slot.
struct Connection {
  util::UniqueFd fd;
  std::unique_ptr<TlsChannel> tls;     // HTTPS: the session over fd (destroyed first)
  std::string address;                 // the peer's address without port: the per-address key
  IntakeClock::time_point deadline;    // the request must be fully read by then
  IntakeClock::time_point idle_until;  // after a response: a first byte must come by then
  bool waiting_first_byte = true;
  bool lingering = false;               // answered (503/408) and shut for writing: drained, then closed
  size_t requests = 0;                  // answered on this connection
  size_t request_bytes = 0;             // the next request's length as the intake saw it; 0: unknown
  bool authorization_too_long = false;  // its Authorization line is longer than cpp-httplib reads
  // Bytes read but not yet served: past the last request (pipelining), and
  // over TLS everything the intake decrypted of the next request.
  std::string buffered;
  std::shared_ptr<IntakeCounts> counts;  // null once its slot is free
  void release_slot();
  ~Connection();
};

// cpp-httplib's Stream over a Connection: reads end at the connection's
// deadline (not only per read), and what was read past a request stays in
// Connection::buffered.
class DeadlineStream : public httplib::Stream {
 public:
  DeadlineStream(Connection& c, std::chrono::milliseconds read_timeout, std::chrono::milliseconds write_timeout)
      : c_(c), read_timeout_(read_timeout), write_timeout_(write_timeout) {}
  ~DeadlineStream() override;
  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return c_.fd.get(); }
  bool deadline_passed() const { return deadline_passed_; }
  size_t bytes_read() const { return bytes_read_; }  // handed to cpp-httplib

 private:
  bool wait_readable() const;
  bool wait_writable() const;
  ssize_t fill();  // the next bytes into c_.buffered (none consumed yet): their count, 0 at EOF, -1
  Connection& c_;
  std::chrono::milliseconds read_timeout_, write_timeout_;
  size_t consumed_ = 0;  // of c_.buffered
  size_t bytes_read_ = 0;
  mutable bool deadline_passed_ = false;
};

class Intake {
 public:
  // Takes a connection whose request has arrived to a worker; false when no
  // worker can (the intake then answers 503 and closes it).
  using Ready = std::function<bool(std::shared_ptr<Connection>)>;
  // tls: HTTPS on every connection; null: plain HTTP.
  explicit Intake(IntakeLimits limits, std::shared_ptr<const TlsContext> tls = nullptr);
  ~Intake();
  Intake(const Intake&) = delete;
  Intake& operator=(const Intake&) = delete;

  void start(Ready ready);
  // The accept thread: a new connection, refused at once (503, closed) beyond a cap.
  void admit(int fd);
  // A worker, after a response on a keep-alive connection: wait for the next request.
  void park(std::shared_ptr<Connection> c);
  // Closes every waiting connection; later ones are closed as they come.
  void stop();

 private:
  void run();
  void check(const std::shared_ptr<Connection>& c);  // peek and hand over if the request is in
  // TLS: handshake, then decrypt what has come into c->buffered; false when
  // the connection is over (closed by the peer, or failed).
  bool tls_advance(Connection& c);
  void hand_over(std::shared_ptr<Connection> c);
  void sweep(IntakeClock::time_point now);
  void linger(std::shared_ptr<Connection> c, const std::string& answer);
  void watch(std::shared_ptr<Connection> c);
  std::shared_ptr<Connection> unwatch(int fd);

  IntakeLimits limits_;
  std::shared_ptr<const TlsContext> tls_;
  Ready ready_;
  std::shared_ptr<IntakeCounts> counts_;
  util::UniqueFd epoll_;
  std::mutex mu_;
  std::map<int, std::shared_ptr<Connection>> waiting_;  // by fd
  size_t lingering_ = 0;                                // of waiting_
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace transport::http
