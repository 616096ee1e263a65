// The workers of the HTTP endpoint (http.h), and the cpp-httplib server they
// serve requests with:
//   BoundedQueue   the workers: a request whose bytes are in is served by one
//                  of them, or beyond the queue answered 503 by a small pool
//   AcceptQueue    the accept loop's "queue": each socket goes to the intake
//   IntakeServer   cpp-httplib's server, serving one request at a time on a
//                  connection the intake keeps between requests
//   serving_overloaded(), authorization_too_long()
//                  what the request this thread serves came with
#pragma once
#include <httplib.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "server/transport/http_intake.h"

namespace transport::http {

constexpr size_t kWorkers = 96;                  // requests served at once (SSE streams included)
constexpr size_t kQueued = 256;                  // requests (bytes in) waiting for a worker; beyond: 503
constexpr size_t kKeepAliveRequestsMax = 10000;  // requests on one connection
constexpr int kReadTimeoutS = 10;                // one read or write, within the request's deadline

// Whether this thread serves a request of the overflow path: answer 503 at once.
bool serving_overloaded();
// Whether the request this thread serves has an Authorization line
// cpp-httplib cannot read.
bool authorization_too_long();

// A pool with a bounded queue. Beyond it a request is still read (its bytes
// are in) but only to be answered 503 by a small pool of its own, so a flood
// neither grows memory nor starves the accept loop.
// Workers start on demand (one when a connection waits and none of its kind is
// idle), up to `workers` and kRejectWorkers, and stay: the count follows the
// peak of connections served at once, not the limit.
class BoundedQueue : public httplib::TaskQueue {
 public:
  BoundedQueue(size_t workers, size_t max_queued);
  ~BoundedQueue() override { shutdown(); }
  // Unused: every connection comes through the intake and submit().
  void enqueue(std::function<void()> fn) override;
  // One request whose bytes are in (from the intake); false when
  // both queues are full or no worker could start.
  bool submit(std::function<void()>& fn);
  void shutdown() override;

 private:
  static constexpr size_t kRejectWorkers = 4;
  struct Workers {
    std::deque<std::function<void()>> queue;
    size_t threads_max = 0;
    size_t started = 0;
    size_t idle = 0;  // waiting for a connection
    bool overloaded = false;
  };
  // With mu_ held: whether a worker of `w` will take one more connection,
  // starting one when every idle one already has a connection waiting.
  bool worker_for_one_more(Workers& w);
  void work(Workers& w);
  std::mutex mu_;
  std::condition_variable cv_;
  Workers serve_, reject_;
  size_t max_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// The accept "queue": runs the task at once, on the accept thread;
// the task is IntakeServer::process_and_close_socket, which only hands the
// socket to the intake.
class AcceptQueue : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

// cpp-httplib's server with connections kept by the intake between requests:
// a worker serves one request whose bytes are in, then gives the connection
// back. process_and_close_socket is the hook (a private virtual of 0.11.4:
// overriding it is allowed, calling it is not, and it is not needed).
class IntakeServer : public httplib::Server {
 public:
  explicit IntakeServer(Intake& intake) : intake_(intake) {}
  // A worker: one request on c. True when c may wait for another: only when
  // exactly that request was read (a refusal before the body, e.g. 403 from
  // the pre-routing handler, leaves a body that must not pass for the next
  // request; and a chunked one's length is unknown).
  bool serve_one(Connection& c);
  // As each response's headers are made (the post-routing handler runs for
  // every response): a connection that will close because its request was not
  // read to the end says so, or the client would send its next request into
  // the closing socket.
  static void say_if_closing(httplib::Response& res);

 private:
  bool process_and_close_socket(socket_t sock) override {
    intake_.admit(sock);
    return true;
  }
  Intake& intake_;
};

}  // namespace transport::http
