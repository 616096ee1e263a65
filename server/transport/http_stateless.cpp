// The 2026-07-28 era of the HTTP endpoint (http_server.h): a POST carries one
// request, with no session id and no handshake; its headers mirror the body;
// it gets a session of its own for that request only; closing the SSE answer
// of a tools/call cancels the call. GET and DELETE do not exist there.
#include "server/transport/http_headers.h"
#include "server/transport/http_server.h"

namespace transport::http {

using nlohmann::json;
namespace jsonrpc = protocol::jsonrpc;

namespace {

// A session-less 2026-07-28 request: its own session (nothing carries over
// between requests), with a quota of one call on the server's call pool.
// Destroyed after the answer, the session first (it drains its call), then
// its router.
struct StatelessCall {
  Router router;
  protocol::mcp::Session session;
  StatelessCall(protocol::mcp::ServerContext& ctx, const std::string& tenant) : session(ctx, router, tenant, 1) {}
};

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

}  // namespace

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
  if (auto why = mirror_mismatch(headers, {method, m.params, version_b, mcp::kMetaProtocolVersion}))
    return mismatch(*why);
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
      Clock::now() +
      std::chrono::seconds(static_cast<int64_t>(ctx_.policy.get()->limits.timeout_s_max) + kAnswerGraceS);
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

}  // namespace transport::http
