// POST, GET and DELETE of /mcp (http_server.h). The session era (2025-03-26
// to 2025-11-25): an initialize opens a session, every other request names
// it, answers come as JSON or on an SSE stream, GET opens a stream for the
// server's own messages, DELETE ends the session. A POST of the 2026-07-28
// era goes to post_stateless (http_stateless.cpp).
#include <spdlog/spdlog.h>

#include <cctype>

#include "server/transport/http_headers.h"
#include "server/transport/http_server.h"
#include "server/util/random.h"
#include "server/util/text.h"

namespace transport::http {

using nlohmann::json;
namespace jsonrpc = protocol::jsonrpc;

namespace {

constexpr size_t kGetStreamsMax = 32;  // open GET streams, each holding a worker; beyond: 405

}  // namespace

// A header's value, or nullopt when the request has none.
std::optional<std::string> header(const httplib::Request& req, const char* name) {
  if (!req.has_header(name)) return std::nullopt;
  return req.get_header_value(name);
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

void json_error(httplib::Response& res, int status, int code, const std::string& message) {
  res.status = status;
  res.set_content(jsonrpc::make_error(nullptr, code, util::to_valid_utf8(message)).dump(), "application/json");
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
                          "GET stream open; retry shortly or end one with DELETE " +
                              std::string(kPath));
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
      Clock::now() +
      std::chrono::seconds(static_cast<int64_t>(ctx_.policy.get()->limits.timeout_s_max) + kAnswerGraceS);

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
    res.set_content(
        "Method Not Allowed: no further SSE stream on this server now; requests are answered on their POSTs\n",
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

}  // namespace transport::http
