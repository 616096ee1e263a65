// The HTTP routes beside /mcp: liveness, readiness, Prometheus metrics, and
// the job API (POST /inputs, POST /jobs, GET /jobs/{job_id}) on the same
// broker, store, audit log and bearer-token tenants. Handlers run on
// cpp-httplib's pool; a tenant only ever comes from ctx.authenticate.
#pragma once
#include <functional>
#include <optional>
#include <string>

#include <httplib.h>

#include "server/protocol/mcp.h"

namespace transport::http {

struct OpsContext {
  protocol::mcp::ServerContext& server;  // policy, store, jobs, tools, audit
  // Returns the caller's tenant from the bearer token, or writes the 401/403 response itself and returns nullopt.
  std::function<std::optional<std::string>(const httplib::Request&, httplib::Response&)> authenticate;
  std::function<size_t()> sessions_open;  // for /metrics
  std::function<bool()> draining;         // for /readyz
};

void add_ops_routes(httplib::Server& srv, OpsContext ctx);

}  // namespace transport::http
