// The HTTP endpoint's server (inside the transport; http.h is its face): one
// class, its parts in a file each by concern.
//   http.cpp           start: TLS, the intake and workers, bind and listen,
//                      the routes, signals; parse_listen, check_files, serve
//   http_pool.*        the workers and the cpp-httplib server they serve with
//   http_access.cpp    Host and Origin allowlists, bearer tokens and OAuth
//                      (the 401 and 403 answers), their reloads
//   http_sessions.*    the session era's sessions: lookup, room, expiry
//   http_dispatch.cpp  POST, GET and DELETE of /mcp: the session era, and a
//                      POST handed to the stateless era when it is one
//   http_stateless.cpp the 2026-07-28 era: one request, a session of its own
//   http_sse.*         a session's messages routed to the waiting answer
#pragma once
#include <httplib.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "server/protocol/jsonrpc.h"
#include "server/protocol/mcp.h"
#include "server/transport/auth.h"
#include "server/transport/http.h"
#include "server/transport/http_pool.h"
#include "server/transport/http_sessions.h"
#include "server/transport/oauth.h"
#include "server/util/worker_pool.h"

namespace transport::http {

constexpr const char* kPath = "/mcp";
// Threads running tools/call, shared by every session (each within its quota,
// the policy's concurrent_calls_max): a call is answered on the POST that
// brought it, which holds one of the kWorkers until then, so more threads
// would only run calls no client waits on. Batches and calls whose client
// left wait their turn in arrival order. Started on demand.
constexpr size_t kCallThreadsMax = kWorkers;
constexpr int kAnswerGraceS = 30;  // beyond the policy's longest job

class HttpServer {
 public:
  HttpServer(protocol::mcp::ServerContext& ctx, Options opt, std::shared_ptr<const Auth> auth,
             std::shared_ptr<oauth::Verifier> oauth)
      : calls_(kCallThreadsMax), ctx_(ctx), opt_(std::move(opt)), creds_{std::move(auth), std::move(oauth)} {
    ctx_.calls = &calls_;
  }

  util::Status run();  // http.cpp

 private:
  // ---- http_access.cpp
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

  // ---- http_sessions.cpp
  Lease find_session(const httplib::Request& req, const std::string& tenant, httplib::Response& res);
  // With mu_ held: room for one more session of tenant, evicting the least
  // recently used idle one where a bound is reached; false when all are busy.
  bool make_room_for(const std::string& tenant, std::vector<std::shared_ptr<HttpSession>>& evicted);
  void expire_sessions();

  // ---- http_dispatch.cpp
  void post(const httplib::Request& req, httplib::Response& res);
  void get(const httplib::Request& req, httplib::Response& res);
  void del(const httplib::Request& req, httplib::Response& res);

  // ---- http_stateless.cpp
  void post_stateless(const httplib::Request& req, httplib::Response& res, const std::string& tenant,
                      protocol::jsonrpc::Parsed parsed, bool accepts_sse);

  util::CallPool calls_;              // outlives every session (declared before them)
  protocol::mcp::ServerContext ctx_;  // the caller's, with calls_
  Options opt_;
  mutable std::mutex creds_mu_;
  Credentials creds_;
  std::set<std::string> hosts_, origins_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<HttpSession>> sessions_;
  std::atomic<size_t> get_streams_{0};
  // Draining (a replica's SIGTERM): not ready, no new call, the calls in
  // flight (POSTs between routing and their answer) finish first, and the
  // server stays until its balancer stopped sending (no request but a
  // health probe for a quiet while), so that no keep-alive connection the
  // balancer may still reuse is closed under a request.
  std::atomic<bool> draining_{false};
  std::atomic<int> in_flight_{0};
  std::atomic<int64_t> last_request_ms_{0};  // util::now_ms() of the last request other than /healthz, /readyz
};

// ---- http_stateless.cpp
// Whether a POST without a session is served statelessly (2026-07-28).
bool is_stateless(const httplib::Request& req, const protocol::jsonrpc::Parsed& parsed);
// GET and DELETE of 2026-07-28: 405. True when answered.
bool refuse_without_session(const httplib::Request& req, httplib::Response& res);

// ---- helpers shared by the parts (http_dispatch.cpp)
// A header's value, or nullopt when the request has none.
std::optional<std::string> header(const httplib::Request& req, const char* name);
std::string lower(std::string s);
void json_error(httplib::Response& res, int status, int code, const std::string& message);

}  // namespace transport::http
