// The sessions of the HTTP endpoint's session era (2025-03-26 to 2025-11-25):
//   HttpSession  one protocol::mcp::Session per Mcp-Session-Id, bound to the
//                tenant of the token that created it, with its Router
//   Lease        a request's or GET stream's hold on one (busy: not evicted)
// The server's table of them (HttpServer::find_session, make_room_for and
// expire_sessions) is in http_sessions.cpp.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "server/protocol/mcp.h"
#include "server/transport/http_sse.h"

namespace transport::http {

struct HttpSession {
  std::string id, tenant;
  Router router;
  std::unique_ptr<protocol::mcp::Session> session;
  std::atomic<int64_t> last_used_ns{0};  // steady clock: the LRU order and the idle expiry
  std::atomic<int> active{0};            // leases: requests in flight and GET streams; changed up under HttpServer::mu_
  std::atomic<int> get_streams{0};
};

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

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

}  // namespace transport::http
