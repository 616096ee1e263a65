// The session era's table of sessions: lookup by Mcp-Session-Id and tenant,
// room for a new one (the least recently used idle one evicted), and the
// expiry of idle ones (http_sessions.h, http_server.h).
#include <spdlog/spdlog.h>

#include "server/transport/http_headers.h"
#include "server/transport/http_server.h"

namespace transport::http {

using nlohmann::json;
namespace jsonrpc = protocol::jsonrpc;

namespace {

// Sessions in all and per tenant. A new one beyond either bound takes the place
// of the least recently used idle one (no request in flight, no GET stream),
// so clients that never DELETE cannot lock a tenant out; only when every one
// is busy is the answer 503.
constexpr size_t kSessionsMax = 1024;
constexpr size_t kSessionsPerTenantMax = 64;
constexpr auto kSessionIdle = std::chrono::minutes(10);

}  // namespace

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
  if (!s)
    json_error(res, 404, jsonrpc::kInvalidRequest,
               "Not Found: no such session (it ended or never existed); initialize again");
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

}  // namespace transport::http
