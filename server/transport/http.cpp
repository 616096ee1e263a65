// Streamable HTTP transport (http.h), its start: the TLS context, the intake
// and the workers, the bind and listen, the routes and their handlers,
// signals and reloads; the listen address, the start-up files, serve().
// The server's parts are in a file each by concern: http_server.h lists them.
// One protocol::mcp::Session per Mcp-Session-Id, bound to the tenant of the
// token that created it; a Router sends each of the session's outgoing
// messages to the HTTP stream waiting for it (a POST's JSON or SSE answer by
// request id and progress token, else a GET stream). A session-less
// 2026-07-28 POST gets a session of its own, for that request only.
#include "server/transport/http.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <spdlog/spdlog.h>
#include <thread>

#include "server/transport/http_headers.h"
#include "server/transport/http_intake.h"
#include "server/transport/http_server.h"
#include "server/transport/tls.h"
#if __has_include("server/transport/http_ops.h")
#include "server/transport/http_ops.h"
#define THROWBOX_HTTP_OPS 1
#endif
#include "server/util/clock.h"
#include "server/util/periodic.h"
#include "server/util/text.h"

namespace transport::http {

namespace {
// Whether the request this thread serves is counted in flight (a POST past
// the pre-routing checks), so its answer uncounts it.
thread_local bool t_counted = false;
// Past the longest job timeout, what a draining server waits for its calls.
constexpr int64_t kDrainGraceMs = 10'000;
// A draining server stops once its calls are done and no request but a
// health probe came for this long: its balancer has taken it out of
// rotation (HAProxy after `fall` failed checks, Kubernetes once the endpoint
// is removed). Stopping while a balancer still sends would close a
// keep-alive connection under a request it has just sent, which the
// balancer cannot safely send again (it may have run).
constexpr int64_t kDrainQuietMs = 1'000;
}  // namespace
namespace {

using nlohmann::json;
namespace jsonrpc = protocol::jsonrpc;

// HTTP and HTTPS: connections wait in the intake, holding no worker, until their
// request is in. Bounded in all (policy::kHttpConnectionsMax) and per client
// address (the policy's server.http_connections_per_address_max), so one
// address cannot take them all; beyond either, 503 at once (TLS: closed).
// From accept, or from the previous response on a keep-alive connection, to
// the request (headers and body) fully read; then 408 and closed.
constexpr auto kRequestDeadline = std::chrono::seconds(10);
constexpr auto kKeepAliveIdle = std::chrono::seconds(5);  // a keep-alive connection with no next request: closed
// Connections the kernel holds before accept: room for every worker and queue
// slot, so a burst is accepted (and, beyond the queue, answered 503) rather
// than dropped (the kernel caps it at net.core.somaxconn).
constexpr int kListenBacklog = static_cast<int>(kWorkers + kQueued);
constexpr auto kSessionJanitorInterval = std::chrono::seconds(60);  // how often idle sessions are ended

}  // namespace

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
                             kRequestDeadline, kKeepAliveIdle},
                tls_context);
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
    } catch (...) {}
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
  if (port < 0)
    return util::make_error(util::ErrorCode::kHttp, "cannot listen on " + util::call_error("bind", wanted, errno));
  // cpp-httplib listens with a backlog of 5, compiled into Debian's library;
  // listen() again on the bound socket sets ours.
  if (::listen(listen_fd, kListenBacklog) != 0)
    return util::make_error(util::ErrorCode::kHttp, util::call_error("listen", wanted, errno));
  if (opt_.port == 0) opt_.port = port;
  const std::string hostport =
      (opt_.host.find(':') != std::string::npos ? "[" + opt_.host + "]" : opt_.host) + ":" + std::to_string(opt_.port);
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
    if (req.path != "/healthz" && req.path != "/readyz") last_request_ms_ = util::now_ms();
    if (serving_overloaded()) {
      res.status = 503;
      res.set_header("Retry-After", "1");
      res.set_content("Service Unavailable: too many connections; retry shortly\n", "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!allowed(req, res)) return httplib::Server::HandlerResponse::Handled;
    if (req.method == "POST") {
      if (draining_) {
        // Nothing of it ran: a load balancer may send it to another server.
        res.status = 503;
        res.set_header("Retry-After", "1");
        res.set_header("Connection", "close");
        res.set_content("Service Unavailable: this server is draining (stopping); retry through another server\n",
                        "text/plain");
        return httplib::Server::HandlerResponse::Handled;
      }
      ++in_flight_;
      t_counted = true;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  srv->set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
    if (t_counted) {
      t_counted = false;
      --in_flight_;
    }
    if (draining_) res.set_header("Connection", "close");
    IntakeServer::say_if_closing(res);
  });
  // cpp-httplib 0.11.4 refuses a Content-Length above set_payload_max_length
  // with a bare 413 before any handler runs, reading the body only to discard
  // it: no id can be read there, so the JSON-RPC error has id null (the 413
  // itself answers the POST, no client waits on). A chunked body is not
  // capped by httplib and reaches post(), which answers 413 with the id.
  srv->set_error_handler(
      httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
        // A bearer token longer than a header line may be: cpp-httplib's bare
        // 400 (or 431) becomes the 401 any other bad token gets.
        if ((res.status == 400 || res.status == 431) && res.body.empty() && authorization_too_long()) {
          refuse_unauthorized(
              res, true,
              "the bearer token is longer than " + std::to_string(kHeaderLineMax) + " bytes (a header line's most)");
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
          res.set_content(json{{"error", "body: " + std::to_string(bytes) + " bytes, larger than " +
                                             std::to_string(cap) + " bytes (server.message_max_bytes)"}}
                              .dump(),
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
                   if (!caller || (req.method == "POST" && refuse_without_run_scope(*caller, res))) return std::nullopt;
                   return caller->tenant;
                 },
                 [this] {
                   std::lock_guard lock(mu_);
                   return sessions_.size();
                 },
                 [this] { return draining_.load(); }};
  add_ops_routes(*srv, ops);
#endif

  // SIGINT/SIGTERM (blocked in every thread by the caller) stop the server.
  // A replica (its ledger shared with other servers) drains on SIGTERM
  // first: /readyz says not ready, a new POST is answered 503 at once, and
  // the calls in flight finish, for at most the longest job timeout and 10 s
  // more; a second signal, or SIGINT, stops it at once.
  const bool drain_on_term = !ctx_.policy.get()->server.database.empty();
  const auto drain_max =
      std::chrono::milliseconds(static_cast<int64_t>(ctx_.policy.get()->limits.timeout_s_max * 1000) + kDrainGraceMs);
  std::jthread signals([this, &srv, drain_on_term, drain_max](std::stop_token stop) {
    sigset_t set;
    ::sigemptyset(&set);
    ::sigaddset(&set, SIGINT);
    ::sigaddset(&set, SIGTERM);
    std::optional<std::chrono::steady_clock::time_point> drain_until;
    while (!stop.stop_requested()) {
      struct timespec tick {
        0, 100 * 1000 * 1000
      };
      int sig = ::sigtimedwait(&set, nullptr, &tick);
      if (sig == SIGTERM && drain_on_term && !drain_until) {
        draining_ = true;
        drain_until = std::chrono::steady_clock::now() + drain_max;
        spdlog::info("http: SIGTERM; draining: not ready, new calls refused, {} call(s) in flight finish first",
                     in_flight_.load());
        continue;
      }
      const bool drained =
          drain_until && ((in_flight_.load() <= 0 && util::now_ms() - last_request_ms_.load() >= kDrainQuietMs) ||
                          std::chrono::steady_clock::now() > *drain_until);
      if (sig == SIGINT || sig == SIGTERM || drained) {
        if (drained)
          spdlog::info("http: drained ({} call(s) still in flight); stopping", in_flight_.load());
        else
          spdlog::info("http: signal {}; stopping", sig);
        srv->stop();
        return;
      }
    }
  });
  util::Periodic janitor(kSessionJanitorInterval, [this] { expire_sessions(); });

  // SIGHUP: the tokens file and the OAuth settings are read again; registered
  // before the address is announced, so a reload sent once it is takes them.
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

  std::fprintf(stderr, "throwbox: listening on %s://%s%s\n", tls ? "https" : "http", hostport.c_str(), kPath);
  std::fflush(stderr);
  {
    const Credentials creds = credentials();
    spdlog::info(
        "http: {}{} authentication, tenant from the token; Host allowlist {} entries, Origin allowlist {} entries",
        creds.auth ? std::to_string(creds.auth->size()) + " token(s)," : (creds.oauth ? "" : "no (loopback only),"),
        creds.oauth
            ? " OAuth (issuer " + creds.oauth->config().issuer + ", audience " + creds.oauth->config().audience + "),"
            : "",
        hosts_.size(), origins_.size());
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

util::Result<Options> parse_listen(const std::string& text, Options o) {
  std::string host, port;
  if (!text.empty() && text[0] == '[') {
    auto close = text.find("]:");
    if (close == std::string::npos)
      return util::make_error(util::ErrorCode::kHttp, "--http: expected [IPv6]:PORT, got \"" + text + "\"");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos)
      return util::make_error(util::ErrorCode::kHttp, "--http: expected HOST:PORT, got \"" + text + "\"");
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
