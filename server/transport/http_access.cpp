// Who may use the HTTP endpoint: the Host and Origin allowlists, the bearer
// tokens of the tokens file and OAuth access tokens (the 401 and 403
// answers), and the reloads of their files (http_server.h).
#include <spdlog/spdlog.h>

#include <ctime>

#include "server/transport/http_headers.h"
#include "server/transport/http_server.h"

namespace transport::http {

using nlohmann::json;
namespace jsonrpc = protocol::jsonrpc;

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
    res.set_content(
        "Forbidden: Origin \"" + quoted(req.get_header_value("Origin"), 200) + "\" is not allowed (--allow-origin)\n",
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
    res.set_header("WWW-Authenticate",
                   oauth::challenge(creds.oauth->config(), sent ? "invalid_token" : "", sent ? description : "", ""));
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

}  // namespace transport::http
