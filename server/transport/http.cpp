// Streamable HTTP transport. One protocol::mcp::Session per Mcp-Session-Id,
// bound to the tenant of the token that created it; a Router sends each of the
// session's outgoing messages to the HTTP stream waiting for it (a POST's JSON
// or SSE answer by request id and progress token, else a GET stream). A
// session-less 2026-07-28 POST gets a session of its own, for that request only.
#include "server/transport/http.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <spdlog/spdlog.h>
#include <system_error>
#include <thread>

#include "server/protocol/jsonrpc.h"
#include "server/transport/auth.h"
#include "server/transport/http_headers.h"
#include "server/transport/http_intake.h"
#include "server/transport/oauth.h"
#if __has_include("server/transport/http_ops.h")
#include "server/transport/http_ops.h"
#define THROWBOX_HTTP_OPS 1
#endif
#include "server/util/base64.h"
#include "server/util/periodic.h"
#include "server/util/random.h"
#include "server/util/text.h"

namespace transport::http {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace jsonrpc = protocol::jsonrpc;

constexpr const char* kPath = "/mcp";
constexpr size_t kWorkers = 96;             // requests served at once (SSE streams included)
constexpr size_t kGetStreamsMax = 32;       // open GET streams, each holding a worker; beyond: 405
constexpr size_t kQueued = 256;             // requests (bytes in) waiting for a worker; beyond: 503
// HTTP and HTTPS: connections wait in the intake, holding no worker, until their
// request is in. Bounded in all (policy::kHttpConnectionsMax) and per client
// address (the policy's server.http_connections_per_address_max), so one
// address cannot take them all; beyond either, 503 at once (TLS: closed).
// From accept, or from the previous response on a keep-alive connection, to
// the request (headers and body) fully read; then 408 and closed.
constexpr auto kRequestDeadline = std::chrono::seconds(10);
constexpr auto kKeepAliveIdle = std::chrono::seconds(5);  // a keep-alive connection with no next request: closed
constexpr size_t kKeepAliveRequestsMax = 10000;            // requests on one connection
// Connections the kernel holds before accept: room for every worker and queue
// slot, so a burst is accepted (and, beyond the queue, answered 503) rather
// than dropped (the kernel caps it at net.core.somaxconn).
constexpr int kListenBacklog = static_cast<int>(kWorkers + kQueued);
// Threads running tools/call, shared by every session (each within its quota,
// the policy's concurrent_calls_max): a call is answered on the POST that
// brought it, which holds one of the kWorkers until then, so more threads
// would only run calls no client waits on. Batches and calls whose client
// left wait their turn in arrival order. Started on demand.
constexpr size_t kCallThreadsMax = kWorkers;
// Sessions in all and per tenant. A new one beyond either bound takes the place
// of the least recently used idle one (no request in flight, no GET stream),
// so clients that never DELETE cannot lock a tenant out; only when every one
// is busy is the answer 503.
constexpr size_t kSessionsMax = 1024;
constexpr size_t kSessionsPerTenantMax = 64;
constexpr auto kSessionIdle = std::chrono::minutes(10);
constexpr auto kSessionJanitorInterval = std::chrono::seconds(60);  // how often idle sessions are ended
constexpr auto kKeepAlive = std::chrono::seconds(15);  // SSE comment lines; also finds gone clients
constexpr int kReadTimeoutS = 10;           // one read or write, within the request's deadline
constexpr int kAnswerGraceS = 30;           // beyond the policy's longest job

// Set while a connection is served by the overflow path: answer 503 at once.
thread_local bool t_overloaded = false;

// The request a worker is serving, and its length as the intake
// saw it (0: unknown).
thread_local const DeadlineStream* t_serving = nullptr;
thread_local size_t t_serving_bytes = 0;
// The request being served has an Authorization line cpp-httplib cannot read.
thread_local bool t_authorization_too_long = false;

// A pool with a bounded queue. Beyond it a request is still read (its bytes
// are in) but only to be answered 503 by a small pool of its own, so a flood
// neither grows memory nor starves the accept loop.
// Workers start on demand (one when a connection waits and none of its kind is
// idle), up to `workers` and kRejectWorkers, and stay: the count follows the
// peak of connections served at once, not the limit.
class BoundedQueue : public httplib::TaskQueue {
 public:
  BoundedQueue(size_t workers, size_t max_queued) : max_(max_queued) {
    serve_.threads_max = workers;
    reject_.threads_max = kRejectWorkers;
    reject_.overloaded = true;
  }
  ~BoundedQueue() override { shutdown(); }
  // Unused: every connection comes through the intake and submit().
  void enqueue(std::function<void()> fn) override {
    if (!submit(fn)) spdlog::error("http: a task was dropped (no worker)");
  }
  // One request whose bytes are in (from the intake); false when
  // both queues are full or no worker could start.
  bool submit(std::function<void()>& fn) {
    std::lock_guard lock(mu_);
    Workers* to = serve_.queue.size() < max_ ? &serve_ : reject_.queue.size() < max_ ? &reject_ : nullptr;
    if (!to || !worker_for_one_more(*to)) return false;
    to->queue.push_back(std::move(fn));
    cv_.notify_all();
    return true;
  }
  void shutdown() override {
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      stopping_ = true;
      threads.swap(threads_);
    }
    cv_.notify_all();
    for (auto& t : threads) t.join();
  }

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
  bool worker_for_one_more(Workers& w) {
    if (stopping_) return false;
    if (w.queue.size() < w.idle) return true;
    if (w.started >= w.threads_max) return w.started > 0;
    try {
      threads_.emplace_back([this, &w] { work(w); });
      ++w.started;
      return true;
    } catch (const std::system_error& e) {
      spdlog::warn("http: cannot start a worker ({}); {} running", e.what(), w.started);
      return w.started > 0;
    }
  }
  void work(Workers& w) {
    std::unique_lock lock(mu_);
    for (;;) {
      ++w.idle;
      cv_.wait(lock, [&] { return stopping_ || !w.queue.empty(); });
      --w.idle;
      if (w.queue.empty()) return;
      std::function<void()> fn = std::move(w.queue.front());
      w.queue.pop_front();
      lock.unlock();
      t_overloaded = w.overloaded;
      fn();
      t_overloaded = false;
      fn = nullptr;  // the connection's state goes outside the lock
      lock.lock();
    }
  }
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
  bool serve_one(Connection& c) {
    const size_t expected = c.request_bytes;
    const bool last = ++c.requests >= kKeepAliveRequestsMax || !is_running() || t_overloaded || expected == 0;
    DeadlineStream strm(c, std::chrono::seconds(kReadTimeoutS), std::chrono::seconds(kReadTimeoutS));
    t_serving = &strm;
    t_serving_bytes = expected;
    t_authorization_too_long = c.authorization_too_long;
    bool closed = false;
    const bool ok = process_request(strm, last, closed, nullptr);
    t_serving = nullptr;
    t_authorization_too_long = false;
    return ok && !closed && !last && !strm.deadline_passed() && strm.bytes_read() == expected;
  }
  // As each response's headers are made (the post-routing handler runs for
  // every response): a connection that will close because its request was not
  // read to the end says so, or the client would send its next request into
  // the closing socket.
  static void say_if_closing(httplib::Response& res) {
    if (t_serving && t_serving->bytes_read() != t_serving_bytes) res.set_header("Connection", "close");
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    intake_.admit(sock);
    return true;
  }
  Intake& intake_;
};

// One outgoing message, serialised once where the session sends it.
struct Outgoing {
  std::string text;
  std::vector<std::string> answers;  // ids of the requests it answers (a response, or a batch of them)
  bool is_error = false;             // a single error response
  int error_code = 0;                // its JSON-RPC code
};

// Messages for one HTTP stream.
struct Stream {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Outgoing> queue;
  bool closed = false;
  void push(Outgoing m) {
    {
      std::lock_guard lock(mu);
      queue.push_back(std::move(m));
    }
    cv.notify_all();
  }
  // Next message, or nullopt at the deadline or once closed and empty.
  std::optional<Outgoing> pop(Clock::time_point until) {
    std::unique_lock lock(mu);
    cv.wait_until(lock, until, [&] { return !queue.empty() || closed; });
    if (queue.empty()) return std::nullopt;
    Outgoing m = std::move(queue.front());
    queue.pop_front();
    return m;
  }
  void close() {
    {
      std::lock_guard lock(mu);
      closed = true;
    }
    cv.notify_all();
  }
  bool is_closed() {
    std::lock_guard lock(mu);
    return closed;
  }
  // A plain JSON answer: the first message that answers a request (a
  // response or a batch's array), or nullopt at the deadline. Anything else
  // has no place in a JSON answer (the client gave no progress token).
  std::optional<Outgoing> await_answer(Clock::time_point deadline) {
    while (Clock::now() < deadline) {
      auto m = pop(deadline);
      if (!m) break;
      if (!m->answers.empty()) return m;
    }
    return std::nullopt;
  }
};

bool is_response(const json& m) { return m.is_object() && m.contains("id") && !m.contains("method"); }

// The session's outbox: each message goes to exactly one stream, serialised
// here once (no copy of the message is kept).
class Router : public protocol::mcp::Outbox {
 public:
  void send(const json& m) override {
    Outgoing out;
    if (m.is_array()) {
      for (auto& r : m)
        if (is_response(r)) out.answers.push_back(r["id"].dump());
    } else if (is_response(m)) {
      out.answers.push_back(m["id"].dump());
      out.is_error = m.contains("error");
      if (out.is_error && m["error"].is_object()) out.error_code = m["error"].value("code", 0);
    }
    std::string token;
    if (m.is_object() && m.value("method", "") == "notifications/progress" && m.contains("params") &&
        m["params"].is_object() && m["params"].contains("progressToken"))
      token = m["params"]["progressToken"].dump();
    std::shared_ptr<Stream> to;
    {
      std::lock_guard lock(mu_);
      // A batch answer goes where its requests came from.
      if (!out.answers.empty()) {
        auto it = by_id_.find(out.answers.front());
        if (it != by_id_.end()) to = it->second;
      } else if (!token.empty()) {
        auto it = by_token_.find(token);
        if (it != by_token_.end()) to = it->second;
      }
      if (!to && !gets_.empty()) to = gets_[next_get_++ % gets_.size()];
    }
    if (!to) {
      spdlog::debug("http: no open stream for a {} message; dropped", out.answers.empty() ? "notification" : "response");
      return;
    }
    out.text = m.dump(-1, ' ', false, json::error_handler_t::replace);
    to->push(std::move(out));
  }
  void expect(const std::vector<std::string>& ids, const std::vector<std::string>& tokens,
              const std::shared_ptr<Stream>& s) {
    std::lock_guard lock(mu_);
    for (auto& id : ids) by_id_[id] = s;
    for (auto& t : tokens) by_token_[t] = s;
  }
  void forget(const std::vector<std::string>& ids, const std::vector<std::string>& tokens) {
    std::lock_guard lock(mu_);
    for (auto& id : ids) by_id_.erase(id);
    for (auto& t : tokens) by_token_.erase(t);
  }
  void add_get(const std::shared_ptr<Stream>& s) {
    std::lock_guard lock(mu_);
    gets_.push_back(s);
  }
  void remove_get(const std::shared_ptr<Stream>& s) {
    std::lock_guard lock(mu_);
    std::erase(gets_, s);
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Stream>> by_id_, by_token_;
  std::vector<std::shared_ptr<Stream>> gets_;
  size_t next_get_ = 0;
};

struct HttpSession {
  std::string id, tenant;
  Router router;
  std::unique_ptr<protocol::mcp::Session> session;
  std::atomic<int64_t> last_used_ns{0};  // steady clock: the LRU order and the idle expiry
  std::atomic<int> active{0};             // leases: requests in flight and GET streams; changed up under HttpServer::mu_
  std::atomic<int> get_streams{0};
};

int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

// A request's (or GET stream's) hold on a session: taken under the server's
// lock (so eviction, which takes only sessions without one, cannot race it),
// released here.
struct Lease {
  std::shared_ptr<HttpSession> s;
  Lease() = default;
  explicit Lease(std::shared_ptr<HttpSession> session) : s(std::move(session)) {}
  Lease(Lease&&) = default;
  Lease& operator=(Lease&&) = default;
  ~Lease() {
    if (!s) return;
    s->last_used_ns = now_ns();
    s->active--;
  }
};

// A session-less 2026-07-28 request: its own session (nothing carries over
// between requests), with a quota of one call on the server's call pool.
// Destroyed after the answer, the session first (it drains its call), then
// its router.
struct StatelessCall {
  Router router;
  protocol::mcp::Session session;
  StatelessCall(protocol::mcp::ServerContext& ctx, const std::string& tenant) : session(ctx, router, tenant, 1) {}
};

// Served statelessly: no session id, and either the body's _meta names a
// version (2026-07-28, basic/versioning: dual-era servers) or the
// MCP-Protocol-Version header names none of the legacy ones. Anything else
// keeps the legacy answers (an initialize opens a session; else 400).
bool is_stateless(const httplib::Request& req, const jsonrpc::Parsed& parsed) {
  if (req.has_header("Mcp-Session-Id")) return false;
  for (auto& item : parsed.items)
    if (auto* m = std::get_if<jsonrpc::Message>(&item); m && !protocol::mcp::request_version(m->params).is_null())
      return true;
  if (!req.has_header("MCP-Protocol-Version")) return false;
  const std::string v = req.get_header_value("MCP-Protocol-Version");
  for (const char* legacy : protocol::mcp::kSupportedVersions)
    if (v == legacy) return false;
  return true;
}

// A header's value, or nullopt when the request has none.
std::optional<std::string> header(const httplib::Request& req, const char* name) {
  if (!req.has_header(name)) return std::nullopt;
  return req.get_header_value(name);
}

// The HTTP status of a stateless answer (2026-07-28 transports/streamable-http):
// unknown method 404, version, header and missing-capability errors 400,
// anything else 200.
int stateless_status(const Outgoing& answer) {
  if (!answer.is_error) return 200;
  if (answer.error_code == jsonrpc::kMethodNotFound) return 404;
  if (answer.error_code == protocol::mcp::kHeaderMismatch ||
      answer.error_code == protocol::mcp::kUnsupportedProtocolVersion ||
      answer.error_code == protocol::mcp::kMissingRequiredClientCapability)
    return 400;
  return 200;
}


std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

void json_error(httplib::Response& res, int status, int code, const std::string& message) {
  res.status = status;
  res.set_content(jsonrpc::make_error(nullptr, code, util::to_valid_utf8(message)).dump(), "application/json");
}

std::string sse_event(const Outgoing& m) { return "event: message\ndata: " + m.text + "\n\n"; }

class HttpServer {
 public:
  HttpServer(protocol::mcp::ServerContext& ctx, Options opt, std::shared_ptr<const Auth> auth,
             std::shared_ptr<oauth::Verifier> oauth)
      : calls_(kCallThreadsMax), ctx_(ctx), opt_(std::move(opt)), creds_{std::move(auth), std::move(oauth)} {
    ctx_.calls = &calls_;
  }

  util::Status run();

 private:
  // The tokens file's tokens and the OAuth verifier in force: a request
  // takes them once; a reload replaces them.
  struct Credentials {
    std::shared_ptr<const Auth> auth;
    std::shared_ptr<oauth::Verifier> oauth;
  };
  Credentials credentials() const {
    std::lock_guard lock(creds_mu_);
    return creds_;
  }
  // Reload steps: the files given at start read again; an error keeps what was.
  util::Result<std::string> reload_tokens();
  util::Result<std::string> reload_oauth();

  // Host and Origin against the allowlists (DNS rebinding); 403 otherwise.
  bool allowed(const httplib::Request& req, httplib::Response& res);
  // Who sends the request: a static token's tenant (which may do anything)
  // or an OAuth access token's; else the 401 is written and nullopt returned.
  struct Caller {
    std::string tenant;
    bool can_run = true;
  };
  std::optional<Caller> authenticate(const httplib::Request& req, httplib::Response& res);
  // 403 insufficient_scope for a caller whose token may only read.
  bool refuse_without_run_scope(const Caller& caller, httplib::Response& res);
  void refuse_insufficient_scope(httplib::Response& res, const std::string& why, const std::string& scope);
  // 401 with the challenge: sent says whether a token came (invalid_token) or none did.
  void refuse_unauthorized(httplib::Response& res, bool sent, const std::string& description);
  Lease find_session(const httplib::Request& req, const std::string& tenant, httplib::Response& res);
  // With mu_ held: room for one more session of tenant, evicting the least
  // recently used idle one where a bound is reached; false when all are busy.
  bool make_room_for(const std::string& tenant, std::vector<std::shared_ptr<HttpSession>>& evicted);
  void post(const httplib::Request& req, httplib::Response& res);
  void post_stateless(const httplib::Request& req, httplib::Response& res, const std::string& tenant,
                      jsonrpc::Parsed parsed, bool accepts_sse);
  void get(const httplib::Request& req, httplib::Response& res);
  void del(const httplib::Request& req, httplib::Response& res);
  void expire_sessions();

  util::CallPool calls_;  // outlives every session (declared before them)
  protocol::mcp::ServerContext ctx_;  // the caller's, with calls_
  Options opt_;
  mutable std::mutex creds_mu_;
  Credentials creds_;
  std::set<std::string> hosts_, origins_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<HttpSession>> sessions_;
  std::atomic<size_t> get_streams_{0};
};

bool HttpServer::allowed(const httplib::Request& req, httplib::Response& res) {
  std::string host = lower(req.get_header_value("Host"));
  if (!hosts_.count(host)) {
    res.status = 403;
    res.set_content("Forbidden: Host \"" + quoted(req.get_header_value("Host"), 200) +
                        "\" is not an allowed host of this server (--allow-host)\n",
                    "text/plain");
    return false;
  }
  if (req.has_header("Origin") && !origins_.count(lower(req.get_header_value("Origin")))) {
    res.status = 403;
    res.set_content("Forbidden: Origin \"" + quoted(req.get_header_value("Origin"), 200) +
                        "\" is not allowed (--allow-origin)\n",
                    "text/plain");
    return false;
  }
  return true;
}

std::optional<HttpServer::Caller> HttpServer::authenticate(const httplib::Request& req, httplib::Response& res) {
  const Credentials creds = credentials();
  if (!creds.auth && !creds.oauth) return Caller{"local", true};  // loopback only, checked at start
  const bool sent = req.has_header("Authorization");
  auto token = bearer_token(req.get_header_value("Authorization"));
  if (token && creds.auth)
    if (auto tenant = creds.auth->tenant_for(*token)) return Caller{*tenant, true};
  std::string description = sent ? "the bearer token is not valid" : "a bearer token is required";
  if (token && creds.oauth) {
    auto verdict = creds.oauth->verify(*token, static_cast<int64_t>(std::time(nullptr)));
    if (auto* id = std::get_if<oauth::Identity>(&verdict)) return Caller{id->tenant, id->can_run};
    const auto& why = std::get<oauth::Rejection>(verdict);
    // The token's own fault is the client's to know; it is never logged.
    spdlog::info("http: access token refused: {}", why.message);
    description = why.message;
    if (why.failure == oauth::Failure::kScope) {
      refuse_insufficient_scope(res, why.message, creds.oauth->config().read_scope);
      return std::nullopt;
    }
  }
  refuse_unauthorized(res, sent, description);
  return std::nullopt;
}

void HttpServer::refuse_unauthorized(httplib::Response& res, bool sent, const std::string& description) {
  res.status = 401;
  const Credentials creds = credentials();
  std::string why = sent ? description : "a bearer token is required";
  if (creds.oauth) {
    res.set_header("WWW-Authenticate", oauth::challenge(creds.oauth->config(), sent ? "invalid_token" : "",
                                                        sent ? description : "", ""));
  } else {
    // Tokens only: a client finds no OAuth to sign in with, so the challenge
    // and the body say plainly what it needs.
    if (creds.auth) why = sent ? description + "; " + kBearerTokenNeeded : kBearerTokenNeeded;
    res.set_header("WWW-Authenticate", bearer_challenge(why));
  }
  res.set_content(jsonrpc::make_error(nullptr, jsonrpc::kInvalidRequest, "Unauthorized: " + why).dump(),
                  "application/json");
}

void HttpServer::refuse_insufficient_scope(httplib::Response& res, const std::string& why, const std::string& scope) {
  res.status = 403;
  res.set_header("WWW-Authenticate", oauth::challenge(credentials().oauth->config(), "insufficient_scope", why, scope));
  res.set_content(jsonrpc::make_error(nullptr, jsonrpc::kInvalidRequest, "Forbidden: " + why).dump(),
                  "application/json");
}

bool HttpServer::refuse_without_run_scope(const Caller& caller, httplib::Response& res) {
  if (caller.can_run) return false;  // only an OAuth token can lack the run scope
  const std::string scope = credentials().oauth->config().run_scope;
  refuse_insufficient_scope(res, "this call runs code or changes state; it needs the scope " + scope, scope);
  return true;
}

// A lease on a session of this tenant, or the answer for a missing (400) or
// unknown, ended, evicted or foreign (404, the same) one.
Lease HttpServer::find_session(const httplib::Request& req, const std::string& tenant, httplib::Response& res) {
  const std::optional<std::string> id = header(req, "Mcp-Session-Id");
  const SessionIdCheck check = check_session_id(id);
  if (check == SessionIdCheck::kMissing) {
    json_error(res, 400, jsonrpc::kInvalidRequest, "Bad Request: the Mcp-Session-Id header is required");
    return {};
  }
  std::shared_ptr<HttpSession> s;
  // Only minted ids are in the map: any other is unknown without a look.
  if (check == SessionIdCheck::kWellFormed) {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(*id);
    if (it != sessions_.end() && it->second->tenant == tenant) {
      s = it->second;
      s->active++;
      s->last_used_ns = now_ns();
    }
  }
  if (!s) json_error(res, 404, jsonrpc::kInvalidRequest, "Not Found: no such session (it ended or never existed); initialize again");
  return Lease(std::move(s));
}

bool HttpServer::make_room_for(const std::string& tenant, std::vector<std::shared_ptr<HttpSession>>& evicted) {
  auto evict_lru_idle = [&](bool of_tenant) {
    auto lru = sessions_.end();
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
      const HttpSession& x = *it->second;
      if (x.active.load() != 0 || (of_tenant && x.tenant != tenant)) continue;
      if (lru == sessions_.end() || x.last_used_ns.load() < lru->second->last_used_ns.load()) lru = it;
    }
    if (lru == sessions_.end()) return false;
    evicted.push_back(std::move(lru->second));  // destroyed outside the lock (it drains its calls)
    sessions_.erase(lru);
    return true;
  };
  size_t mine = 0;
  for (auto& [_, other] : sessions_) mine += other->tenant == tenant;
  if (mine >= kSessionsPerTenantMax && !evict_lru_idle(true)) return false;
  if (sessions_.size() >= kSessionsMax && !evict_lru_idle(false)) return false;
  return true;
}

void HttpServer::post(const httplib::Request& req, httplib::Response& res) {
  auto caller = authenticate(req, res);
  if (!caller) return;
  const std::string& tenant = caller->tenant;
  const std::string accept = lower(req.get_header_value("Accept"));
  const bool accepts_sse = accept.find("text/event-stream") != std::string::npos;
  if (!accept.empty() && accept.find("application/json") == std::string::npos && !accepts_sse &&
      accept.find("*/*") == std::string::npos)
    return json_error(res, 406, jsonrpc::kInvalidRequest,
                      "Not Acceptable: the client must accept application/json and text/event-stream");
  if (lower(req.get_header_value("Content-Type")).rfind("application/json", 0) != 0)
    return json_error(res, 415, jsonrpc::kInvalidRequest, "Unsupported Media Type: send application/json");

  const jsonrpc::Limits limits{ctx_.policy.get()->server.message_max_bytes, ctx_.policy.get()->server.json_max_depth};
  jsonrpc::Parsed parsed = jsonrpc::parse_line(req.body, limits);
  if (parsed.whole_line_failed) {
    auto& f = std::get<jsonrpc::Failure>(parsed.items.front());
    res.status = req.body.size() > limits.max_message_bytes ? 413 : 400;
    res.set_content(jsonrpc::make_error(f.id, f.code, f.message).dump(), "application/json");
    return;
  }
  std::vector<std::string> ids, tokens;
  bool initialize = false;
  for (auto& item : parsed.items) {
    auto* m = std::get_if<jsonrpc::Message>(&item);
    if (!m) {
      ids.push_back(std::get<jsonrpc::Failure>(item).id.dump());  // answered with an error
      continue;
    }
    // A read-only token may list and fetch, never run or change state:
    // cancelling a task or a call (a notification) included.
    const bool runs = (m->method == "tools/call" && m->params.is_object() && m->params.contains("name") &&
                       m->params["name"].is_string() && tools::needs_run_scope(m->params["name"].get<std::string>())) ||
                      m->method == "tasks/cancel" || m->method == "tasks/update" ||
                      m->method == "notifications/cancelled";
    if (runs && refuse_without_run_scope(*caller, res)) return;
    if (m->kind != jsonrpc::Message::Kind::kRequest) continue;
    ids.push_back(m->id.dump());
    if (m->method == "initialize") initialize = true;
    if (m->params.is_object() && m->params.contains("_meta") && m->params["_meta"].is_object() &&
        m->params["_meta"].contains("progressToken"))
      tokens.push_back(m->params["_meta"]["progressToken"].dump());
  }

  Lease lease;
  bool created = false;
  // An initialize opens a legacy session, unless the request says it is
  // 2026-07-28's (its header), which has no handshake: 404 there.
  const bool modern = req.get_header_value("MCP-Protocol-Version") == protocol::mcp::kStatelessVersion;
  if ((!(initialize && !parsed.is_batch) || modern) && is_stateless(req, parsed))
    return post_stateless(req, res, tenant, std::move(parsed), accepts_sse);
  if (initialize && !parsed.is_batch && !req.has_header("Mcp-Session-Id")) {
    std::vector<std::shared_ptr<HttpSession>> evicted;
    auto fresh = std::make_shared<HttpSession>();
    fresh->id = util::random_id();
    fresh->tenant = tenant;
    fresh->session = std::make_unique<protocol::mcp::Session>(ctx_, fresh->router, tenant);
    {
      std::lock_guard lock(mu_);
      if (!make_room_for(tenant, evicted)) {
        res.set_header("Retry-After", "10");
        return json_error(res, 503, jsonrpc::kInvalidRequest,
                          "Service Unavailable: every session of this server or tenant has a request in flight or a "
                          "GET stream open; retry shortly or end one with DELETE " + std::string(kPath));
      }
      fresh->active = 1;
      fresh->last_used_ns = now_ns();
      sessions_[fresh->id] = fresh;
    }
    if (!evicted.empty())
      spdlog::debug("http: {} idle session(s) evicted to make room for a new one (tenant {})", evicted.size(), tenant);
    lease = Lease(std::move(fresh));
    created = true;
  } else {
    lease = find_session(req, tenant, res);
    if (!lease.s) return;
    HttpSession* s = lease.s.get();
    // The session would refuse the batch with an error of id null, which no
    // request of this POST waits for: answer it here, at once.
    if (parsed.is_batch && !protocol::mcp::batches_supported(s->session->version()))
      return json_error(res, 400, jsonrpc::kInvalidRequest, protocol::mcp::batch_refusal(s->session->version()));
    if (req.has_header("MCP-Protocol-Version")) {
      std::string v = req.get_header_value("MCP-Protocol-Version");
      bool known = false;
      for (const char* supported : protocol::mcp::kSupportedVersions) known = known || v == supported;
      if (!known)
        return json_error(res, 400, jsonrpc::kInvalidRequest,
                          "Bad Request: unsupported MCP-Protocol-Version \"" + quoted(v, 40) + "\"");
    }
  }
  const std::shared_ptr<HttpSession> s = lease.s;

  if (ids.empty()) {
    // Notifications and responses only: accepted, nothing to answer.
    s->session->handle_parsed(std::move(parsed));
    res.status = 202;
    return;
  }
  auto stream = std::make_shared<Stream>();
  s->router.expect(ids, tokens, stream);
  s->session->handle_parsed(std::move(parsed));  // parsed once, with the session's own limits
  if (created) res.set_header("Mcp-Session-Id", s->id);
  const auto deadline =
      Clock::now() + std::chrono::seconds(static_cast<int64_t>(ctx_.policy.get()->limits.timeout_s_max) + kAnswerGraceS);

  if (!tokens.empty() && accepts_sse) {
    // Progress precedes the answer: an SSE stream that ends with it.
    auto pending = std::make_shared<std::set<std::string>>(ids.begin(), ids.end());
    res.set_header("Cache-Control", "no-store");
    res.set_chunked_content_provider(
        "text/event-stream",
        [stream, pending, deadline](size_t, httplib::DataSink& sink) {
          while (!pending->empty() && Clock::now() < deadline) {
            auto m = stream->pop(std::min(deadline, Clock::now() + kKeepAlive));
            std::string chunk = ": keep-alive\n\n";
            if (m) {
              for (auto& id : m->answers) pending->erase(id);
              chunk = sse_event(*m);
            }
            if (!sink.write(chunk.data(), chunk.size())) return false;  // the client went away
          }
          sink.done();
          return true;
        },
        // The stream holds the lease: a session answering on it is busy, not evictable.
        [s, held = std::make_shared<Lease>(std::move(lease)), ids, tokens](bool) { s->router.forget(ids, tokens); });
    return;
  }
  std::optional<Outgoing> answer = stream->await_answer(deadline);
  s->router.forget(ids, tokens);
  if (!answer) {
    return json_error(res, 504, jsonrpc::kInternalError, "Gateway Timeout: no answer within the server's limit");
  }
  if (created && answer->is_error) {
    std::lock_guard lock(mu_);
    sessions_.erase(s->id);  // a failed initialize opens no session
    res.headers.erase("Mcp-Session-Id");
  }
  res.body = std::move(answer->text);  // set_content() would copy it
  res.set_header("Content-Type", "application/json");
}

// A 2026-07-28 POST: authenticated (tenant from the token) and within the
// body cap like any other; the headers must mirror the body; one request, its
// own session; closing the SSE answer of a tools/call cancels the call.
void HttpServer::post_stateless(const httplib::Request& req, httplib::Response& res, const std::string& tenant,
                                jsonrpc::Parsed parsed, bool accepts_sse) {
  namespace mcp = protocol::mcp;
  if (parsed.is_batch)
    return json_error(res, 400, jsonrpc::kInvalidRequest,
                      "Bad Request: a 2026-07-28 POST carries one JSON-RPC message, not a batch");
  if (auto* f = std::get_if<jsonrpc::Failure>(&parsed.items.front())) {
    res.status = 400;
    res.set_content(jsonrpc::make_error(f->id, f->code, f->message).dump(), "application/json");
    return;
  }
  const jsonrpc::Message& m = std::get<jsonrpc::Message>(parsed.items.front());
  if (m.kind == jsonrpc::Message::Kind::kResponse)
    return json_error(res, 400, jsonrpc::kInvalidRequest, "Bad Request: this server sent no request to answer");
  // 2026-07-28 defines no client notification over HTTP (cancelling is
  // closing the answer's stream): accepted and ignored.
  if (m.kind == jsonrpc::Message::Kind::kNotification) {
    res.status = 202;
    return;
  }
  const json id = m.id;
  const std::string method = m.method;
  auto mismatch = [&](const std::string& message) {
    res.status = 400;
    res.set_content(jsonrpc::make_error(id, mcp::kHeaderMismatch, "Header mismatch: " + message).dump(),
                    "application/json");
  };
  const MirrorHeaders headers{header(req, "Mcp-Method"), header(req, "MCP-Protocol-Version"), header(req, "Mcp-Name")};
  // The per-request _meta keys every 2026-07-28 request carries (basic/index,
  // _meta): without them nothing can be checked against the headers, so the
  // request is Invalid params, HTTP 400, before any header comparison.
  if (headers.protocol_version) {
    if (auto why = mcp::stateless_meta_problem(m.params)) {
      res.status = 400;
      res.set_content(jsonrpc::make_error(id, jsonrpc::kInvalidParams, *why).dump(), "application/json");
      return;
    }
  }
  const json version_b = mcp::request_version(m.params);
  if (auto why = mirror_mismatch(headers, {method, m.params, version_b, mcp::kMetaProtocolVersion})) return mismatch(*why);
  const std::string& version_h = *headers.protocol_version;
  if (version_h != mcp::kStatelessVersion) {
    res.status = 400;
    res.set_content(mcp::unsupported_version_error(id, version_b).dump(), "application/json");
    return;
  }
  // 2026-07-28 removed the handshake: initialize is a method it does not have.
  if (method == "initialize") {
    res.status = 404;
    res.set_content(jsonrpc::make_error(id, jsonrpc::kMethodNotFound,
                                        "Method not found: initialize (2026-07-28 has no handshake; "
                                        "call server/discover)")
                        .dump(),
                    "application/json");
    return;
  }
  std::vector<std::string> ids{id.dump()}, tokens;
  if (m.params.is_object() && m.params.contains("_meta") && m.params["_meta"].is_object() &&
      m.params["_meta"].contains("progressToken"))
    tokens.push_back(m.params["_meta"]["progressToken"].dump());

  auto call = std::make_shared<StatelessCall>(ctx_, tenant);
  auto stream = std::make_shared<Stream>();
  call->router.expect(ids, tokens, stream);
  call->session.handle_parsed(std::move(parsed));
  const auto deadline =
      Clock::now() + std::chrono::seconds(static_cast<int64_t>(ctx_.policy.get()->limits.timeout_s_max) + kAnswerGraceS);
  // tools/call answers on an SSE stream when the client takes one: its
  // keep-alives find a client that went away, and that cancels the call.
  if (method == "tools/call" && accepts_sse) {
    auto done = std::make_shared<bool>(false);
    const std::string cancel_line =
        json{{"jsonrpc", "2.0"}, {"method", "notifications/cancelled"}, {"params", {{"requestId", id}}}}.dump();
    res.set_header("Cache-Control", "no-store");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [call, stream, done, deadline, cancel_line](size_t, httplib::DataSink& sink) {
          while (!*done && Clock::now() < deadline) {
            auto next = stream->pop(std::min(deadline, Clock::now() + kKeepAlive));
            std::string chunk = ": keep-alive\n\n";
            if (next) {
              *done = !next->answers.empty();
              chunk = sse_event(*next);
            }
            if (!sink.write(chunk.data(), chunk.size())) {
              call->session.handle_line(cancel_line);
              return false;
            }
          }
          if (!*done) call->session.handle_line(cancel_line);
          sink.done();
          return true;
        },
        [call, ids, tokens](bool) { call->router.forget(ids, tokens); });
    return;
  }
  std::optional<Outgoing> answer = stream->await_answer(deadline);
  call->router.forget(ids, tokens);
  if (!answer)
    return json_error(res, 504, jsonrpc::kInternalError, "Gateway Timeout: no answer within the server's limit");
  res.status = stateless_status(*answer);
  res.body = std::move(answer->text);
  res.set_header("Content-Type", "application/json");
}

// GET and DELETE of 2026-07-28 (no session header, that version): 405, only
// POST exists there. True when answered.
bool refuse_without_session(const httplib::Request& req, httplib::Response& res) {
  if (req.has_header("Mcp-Session-Id") ||
      req.get_header_value("MCP-Protocol-Version") != protocol::mcp::kStatelessVersion)
    return false;
  res.status = 405;
  res.set_header("Allow", "POST");
  return true;
}

void HttpServer::get(const httplib::Request& req, httplib::Response& res) {
  auto caller = authenticate(req, res);
  if (!caller) return;
  const std::string& tenant = caller->tenant;
  // 2026-07-28 has no GET stream (subscriptions/listen replaced it; not offered here).
  if (refuse_without_session(req, res)) return;
  if (lower(req.get_header_value("Accept")).find("text/event-stream") == std::string::npos) {
    res.status = 406;
    res.set_content("Not Acceptable: GET " + std::string(kPath) + " opens an SSE stream (Accept: text/event-stream)\n",
                    "text/plain");
    return;
  }
  Lease lease = find_session(req, tenant, res);
  if (!lease.s) return;
  const std::shared_ptr<HttpSession> s = lease.s;
  // A GET stream holds a worker for as long as it is open: one per session and
  // a bounded number in all, so they cannot starve requests. The stream is
  // optional (clients then get everything on their POSTs): 405 says so.
  if (s->get_streams.load() >= 1 || get_streams_.load() >= kGetStreamsMax) {
    res.status = 405;
    res.set_header("Allow", "POST, DELETE");
    res.set_content("Method Not Allowed: no further SSE stream on this server now; requests are answered on their POSTs\n",
                    "text/plain");
    return;
  }
  auto stream = std::make_shared<Stream>();
  s->router.add_get(stream);
  s->get_streams++;
  get_streams_++;
  res.set_header("Cache-Control", "no-store");
  res.set_chunked_content_provider(
      "text/event-stream",
      [stream](size_t, httplib::DataSink& sink) {
        // Server-initiated messages until the client leaves or the session ends.
        for (;;) {
          auto m = stream->pop(Clock::now() + kKeepAlive);
          if (!m && stream->is_closed()) break;
          std::string chunk = m ? sse_event(*m) : ": keep-alive\n\n";
          if (!sink.write(chunk.data(), chunk.size())) return false;
        }
        sink.done();
        return true;
      },
      [this, s, stream, held = std::make_shared<Lease>(std::move(lease))](bool) {
        s->router.remove_get(stream);
        s->get_streams--;
        get_streams_--;
      });
}

void HttpServer::del(const httplib::Request& req, httplib::Response& res) {
  auto caller = authenticate(req, res);
  if (!caller) return;
  const std::string& tenant = caller->tenant;
  // 2026-07-28 has no session to end.
  if (refuse_without_session(req, res)) return;
  Lease lease = find_session(req, tenant, res);
  if (!lease.s) return;
  {
    std::lock_guard lock(mu_);
    sessions_.erase(lease.s->id);
  }
  spdlog::info("http: session ended by the client (tenant {})", lease.s->tenant);
  res.status = 204;
}

void HttpServer::expire_sessions() {
  std::vector<std::shared_ptr<HttpSession>> gone;
  {
    std::lock_guard lock(mu_);
    const int64_t cutoff = now_ns() - std::chrono::duration_cast<std::chrono::nanoseconds>(kSessionIdle).count();
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (it->second->active == 0 && it->second->last_used_ns < cutoff) {
        gone.push_back(it->second);
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (!gone.empty()) spdlog::info("http: {} idle session(s) expired", gone.size());
}

util::Result<std::string> HttpServer::reload_tokens() {
  auto loaded = Auth::load(opt_.tokens_file);
  if (!loaded) return loaded.error();
  auto next = std::make_shared<const Auth>(std::move(*loaded));
  std::lock_guard lock(creds_mu_);
  const size_t was = creds_.auth ? creds_.auth->size() : 0;
  creds_.auth = next;
  return std::to_string(next->size()) + " token(s) from " + opt_.tokens_file + " (was " + std::to_string(was) + ")";
}

util::Result<std::string> HttpServer::reload_oauth() {
  auto config = oauth::load_config(opt_.oauth_file);
  if (!config) return config.error();
  std::lock_guard lock(creds_mu_);
  // The metadata's paths were routed at start from the resource.
  if (creds_.oauth && config->resource != creds_.oauth->config().resource)
    return util::make_error(util::ErrorCode::kAuth, "resource changed (" + creds_.oauth->config().resource + " -> " +
                                                        config->resource + "), which needs a restart");
  const std::string summary = "issuer " + config->issuer + ", audience " + config->audience;
  creds_.oauth = std::make_shared<oauth::Verifier>(std::move(*config));  // its keys are fetched anew
  return summary;
}

util::Status HttpServer::run() {
  // Declared first, so they outlive srv's accept loop and are stopped by hand
  // before srv goes (their workers call into it).
  // HTTPS runs through the same intake: its handshake and each request's
  // bytes are read there, decrypted, before a worker takes the request.
  std::shared_ptr<const TlsContext> tls_context;
  if (!opt_.tls_cert.empty()) {
    auto loaded = TlsContext::load(opt_.tls_cert, opt_.tls_key);
    if (!loaded) return loaded.error();
    tls_context = std::move(*loaded);
  }
  const bool tls = tls_context != nullptr;
  Intake intake(IntakeLimits{policy::kHttpConnectionsMax, ctx_.policy.get()->server.http_connections_per_address_max,
                             kRequestDeadline, kKeepAliveIdle}, tls_context);
  BoundedQueue pool(kWorkers, kQueued);
  auto owned = std::make_unique<IntakeServer>(intake);
  IntakeServer* plain = owned.get();
  std::unique_ptr<httplib::Server> srv = std::move(owned);
  srv->new_task_queue = [] { return new AcceptQueue; };
  intake.start([&pool, &intake, plain](std::shared_ptr<Connection> c) {
    std::function<void()> task = [&intake, plain, c]() mutable {
      if (plain->serve_one(*c)) intake.park(std::move(c));
    };
    return pool.submit(task);
  });
  srv->set_payload_max_length(ctx_.policy.get()->server.message_max_bytes);
  srv->set_read_timeout(kReadTimeoutS, 0);
  srv->set_write_timeout(kReadTimeoutS, 0);
  srv->set_keep_alive_max_count(10000);
  srv->set_keep_alive_timeout(5);
  // Headers and body go out in separate writes: without TCP_NODELAY the body
  // waits for the client's delayed ACK (Nagle), about 40 ms per response.
  srv->set_tcp_nodelay(true);
  // A handler that throws is a bug; the client gets a JSON-RPC error without
  // the exception's text (cpp-httplib would put it in an EXCEPTION_WHAT
  // header), and the log gets the text.
  srv->set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    spdlog::error("http: {} {}: handler failed: {}", req.method, quoted(req.path, 200), what);
    res.headers.clear();
    json_error(res, 500, jsonrpc::kInternalError, "Internal error: the server could not answer this request");
  });

  // One server per address. cpp-httplib's default socket options add
  // SO_REUSEPORT, with which a second server on the same address would start
  // silently and take a share of its connections (a server without tokens
  // answering requests meant for one with them). SO_REUSEADDR alone lets a
  // restart bind while old connections are in TIME_WAIT. The socket is kept
  // to size its backlog below.
  int listen_fd = -1;
  srv->set_socket_options([&listen_fd](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd = sock;  // the last socket tried is the one bound
  });
  // cpp-httplib: bind_to_port() returns a bool; bind_to_any_port() the port picked (or -1).
  errno = 0;
  int port = opt_.port == 0 ? srv->bind_to_any_port(opt_.host.c_str())
                            : (srv->bind_to_port(opt_.host.c_str(), opt_.port) ? opt_.port : -1);
  srv->set_socket_options(httplib::default_socket_options);  // listen_fd's lifetime ends here
  const std::string wanted = opt_.host + ":" + std::to_string(opt_.port);
  if (port < 0 && errno == EADDRINUSE)
    return util::make_error(util::ErrorCode::kHttp, "address already in use: another server listens on " + wanted);
  if (port < 0) return util::make_error(util::ErrorCode::kHttp, "cannot listen on " + util::call_error("bind", wanted, errno));
  // cpp-httplib listens with a backlog of 5, compiled into Debian's library;
  // listen() again on the bound socket sets ours.
  if (::listen(listen_fd, kListenBacklog) != 0)
    return util::make_error(util::ErrorCode::kHttp, util::call_error("listen", wanted, errno));
  if (opt_.port == 0) opt_.port = port;
  const std::string hostport = (opt_.host.find(':') != std::string::npos ? "[" + opt_.host + "]" : opt_.host) + ":" +
                               std::to_string(opt_.port);
  if (is_loopback(opt_.host)) {
    for (const char* h : {"127.0.0.1", "localhost", "[::1]"}) {
      hosts_.insert(std::string(h) + ":" + std::to_string(opt_.port));
      for (const char* scheme : {"http://", "https://"})
        origins_.insert(std::string(scheme) + h + ":" + std::to_string(opt_.port));
    }
  } else {
    hosts_.insert(lower(hostport));
    origins_.insert(std::string(tls ? "https://" : "http://") + lower(hostport));
  }
  for (auto& h : opt_.allowed_hosts) hosts_.insert(lower(h));
  for (auto& o : opt_.allowed_origins) origins_.insert(lower(o));

  srv->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (t_overloaded) {
      res.status = 503;
      res.set_header("Retry-After", "1");
      res.set_content("Service Unavailable: too many connections; retry shortly\n", "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!allowed(req, res)) return httplib::Server::HandlerResponse::Handled;
    return httplib::Server::HandlerResponse::Unhandled;
  });
  srv->set_post_routing_handler([](const httplib::Request&, httplib::Response& res) { IntakeServer::say_if_closing(res); });
  // cpp-httplib 0.11.4 refuses a Content-Length above set_payload_max_length
  // with a bare 413 before any handler runs, reading the body only to discard
  // it: no id can be read there, so the JSON-RPC error has id null (the 413
  // itself answers the POST, no client waits on). A chunked body is not
  // capped by httplib and reaches post(), which answers 413 with the id.
  srv->set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    // A bearer token longer than a header line may be: cpp-httplib's bare
    // 400 (or 431) becomes the 401 any other bad token gets.
    if ((res.status == 400 || res.status == 431) && res.body.empty() && t_authorization_too_long) {
      refuse_unauthorized(res, true, "the bearer token is longer than " + std::to_string(kHeaderLineMax) +
                                         " bytes (a header line's most)");
      res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (res.status != 413 || !res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    const size_t cap = ctx_.policy.get()->server.message_max_bytes;
    const std::string length = req.get_header_value("Content-Length");
    size_t bytes = 0;
    std::from_chars(length.data(), length.data() + length.size(), bytes);
    if (req.path == kPath) {
      json_error(res, 413, jsonrpc::kInvalidRequest, jsonrpc::oversized_message(bytes, cap));
    } else {
      res.set_header("Cache-Control", "no-store");
      res.set_content(json{{"error", "body: " + std::to_string(bytes) + " bytes, larger than " + std::to_string(cap) +
                                         " bytes (server.message_max_bytes)"}}.dump(),
                      "application/json");
    }
    return httplib::Server::HandlerResponse::Handled;
  }));
  // Protected Resource Metadata (RFC 9728), unauthenticated as the spec has it.
  if (const auto verifier = credentials().oauth) {
    for (const auto& path : oauth::resource_metadata_paths(verifier->config()))
      srv->Get(path, [this](const httplib::Request&, httplib::Response& res) {
        res.set_header("Cache-Control", "max-age=300");
        res.set_content(oauth::resource_metadata(credentials().oauth->config()).dump(), "application/json");
      });
  } else if (credentials().auth) {
    // Tokens without OAuth: a client that looks for OAuth after its 401 (the
    // metadata, the authorization server's, dynamic registration, the token
    // endpoint) gets 404 with an OAuth error body, which clients show,
    // saying what this server takes instead.
    const auto no_oauth = [](const httplib::Request&, httplib::Response& res) {
      res.status = 404;
      res.set_header("Cache-Control", "no-store");
      res.set_content(json{{"error", "invalid_request"}, {"error_description", kBearerTokenNeeded}}.dump(),
                      "application/json");
    };
    const std::string oauth_paths =
        "(" + std::string(kPath) + ")?" +
        R"(/\.well-known/(oauth-protected-resource|oauth-authorization-server|openid-configuration)(/.*)?)"
        R"(|/register|/authorize|/token)";
    srv->Get(oauth_paths, no_oauth);
    srv->Post(oauth_paths, no_oauth);
  }
  srv->Post(kPath, [this](const httplib::Request& req, httplib::Response& res) { post(req, res); });
  srv->Get(kPath, [this](const httplib::Request& req, httplib::Response& res) { get(req, res); });
  srv->Delete(kPath, [this](const httplib::Request& req, httplib::Response& res) { del(req, res); });
  auto not_allowed = [](const httplib::Request&, httplib::Response& res) {
    res.status = 405;
    res.set_header("Allow", "GET, POST, DELETE");
  };
  srv->Put(kPath, not_allowed);
  srv->Patch(kPath, not_allowed);
#ifdef THROWBOX_HTTP_OPS
  // The plain HTTP routes: a POST (an input, a job) needs the run scope.
  OpsContext ops{ctx_,
                 [this](const httplib::Request& req, httplib::Response& res) -> std::optional<std::string> {
                   auto caller = authenticate(req, res);
                   if (!caller || (req.method == "POST" && refuse_without_run_scope(*caller, res)))
                     return std::nullopt;
                   return caller->tenant;
                 },
                 [this] {
                   std::lock_guard lock(mu_);
                   return sessions_.size();
                 }};
  add_ops_routes(*srv, ops);
#endif

  // SIGINT/SIGTERM (blocked in every thread by the caller) stop the server.
  std::jthread signals([&srv](std::stop_token stop) {
    sigset_t set;
    ::sigemptyset(&set);
    ::sigaddset(&set, SIGINT);
    ::sigaddset(&set, SIGTERM);
    while (!stop.stop_requested()) {
      struct timespec tick {0, 200 * 1000 * 1000};
      int sig = ::sigtimedwait(&set, nullptr, &tick);
      if (sig == SIGINT || sig == SIGTERM) {
        spdlog::info("http: signal {}; stopping", sig);
        srv->stop();
        return;
      }
    }
  });
  util::Periodic janitor(kSessionJanitorInterval, [this] { expire_sessions(); });

  std::fprintf(stderr, "throwbox: listening on %s://%s%s\n", tls ? "https" : "http", hostport.c_str(), kPath);
  std::fflush(stderr);
  {
    const Credentials creds = credentials();
    spdlog::info("http: {}{} authentication, tenant from the token; Host allowlist {} entries, Origin allowlist {} entries",
                 creds.auth ? std::to_string(creds.auth->size()) + " token(s)," : (creds.oauth ? "" : "no (loopback only),"),
                 creds.oauth ? " OAuth (issuer " + creds.oauth->config().issuer + ", audience " +
                                   creds.oauth->config().audience + ")," : "",
                 hosts_.size(), origins_.size());
  }
  // SIGHUP: the tokens file and the OAuth settings are read again.
  struct Registered {
    util::Reloads* reloads;
    ~Registered() {
      if (reloads) reloads->remove("tokens"), reloads->remove("oauth");
    }
  } registered{ctx_.reloads};
  if (ctx_.reloads) {
    if (!opt_.tokens_file.empty()) ctx_.reloads->add("tokens", [this] { return reload_tokens(); });
    if (!opt_.oauth_file.empty()) ctx_.reloads->add("oauth", [this] { return reload_oauth(); });
  }
  srv->listen_after_bind();
  signals.request_stop();
  intake.stop();  // waiting connections close; one a worker gives back closes too
  pool.shutdown();
  janitor.stop();
  {
    std::lock_guard lock(mu_);
    sessions_.clear();  // each session finishes its in-flight calls as it goes
  }
  return util::ok_status();
}

}  // namespace

util::Result<Options> parse_listen(const std::string& text, Options o) {
  std::string host, port;
  if (!text.empty() && text[0] == '[') {
    auto close = text.find("]:");
    if (close == std::string::npos) return util::make_error(util::ErrorCode::kHttp, "--http: expected [IPv6]:PORT, got \"" + text + "\"");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos) return util::make_error(util::ErrorCode::kHttp, "--http: expected HOST:PORT, got \"" + text + "\"");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (!host.empty()) o.host = host;
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) > 65535)
    return util::make_error(util::ErrorCode::kHttp, "--http: the port must be 0-65535, got \"" + port + "\"");
  o.port = std::stoi(port);
  return o;
}

util::Result<std::vector<std::string>> check_files(const Options& options) {
  std::vector<std::string> held;
  if (!options.tokens_file.empty()) {
    auto a = Auth::load(options.tokens_file);
    if (!a) return a.error();
    held.push_back("tokens file " + options.tokens_file + ": " + std::to_string(a->size()) + " token(s)");
  }
  if (!options.oauth_file.empty()) {
    auto c = oauth::load_config(options.oauth_file);
    if (!c) return c.error();
    held.push_back("--oauth " + options.oauth_file + ": issuer " + c->issuer + ", audience " + c->audience +
                   ", keys from " + c->jwks_uri + " (not fetched now)");
  }
  if (options.tls_cert.empty() != options.tls_key.empty())
    return util::make_error(util::ErrorCode::kHttp, "--tls-cert and --tls-key go together");
  if (!options.tls_cert.empty()) {
    auto loaded = TlsContext::load(options.tls_cert, options.tls_key);
    if (!loaded) return loaded.error();
    held.push_back("TLS certificate " + options.tls_cert + " and key " + options.tls_key + ": loaded, and they match");
  }
  return held;
}

util::Status serve(protocol::mcp::ServerContext& ctx, const Options& options) {
  std::shared_ptr<const Auth> auth;
  std::shared_ptr<oauth::Verifier> verifier;
  if (!options.tokens_file.empty()) {
    auto a = Auth::load(options.tokens_file);
    if (!a) return a.error();
    auth = std::make_shared<const Auth>(std::move(*a));
  }
  if (!options.oauth_file.empty()) {
    auto c = oauth::load_config(options.oauth_file);
    if (!c) return c.error();
    verifier = std::make_shared<oauth::Verifier>(std::move(*c));
  }
  if (!auth && !verifier && !is_loopback(options.host))
    return util::make_error(util::ErrorCode::kHttp, "refusing to listen on " + options.host +
                                                        " without authentication: pass --tokens FILE or --oauth FILE "
                                                        "(or listen on 127.0.0.1)");
  if (options.tls_cert.empty() != options.tls_key.empty())
    return util::make_error(util::ErrorCode::kHttp, "--tls-cert and --tls-key go together");
  if (!is_loopback(options.host) && options.tls_cert.empty())
    spdlog::warn("http: listening on {} without TLS; bearer tokens cross the network in clear text", options.host);
  HttpServer server(ctx, options, std::move(auth), std::move(verifier));
  return server.run();
}

}  // namespace transport::http
