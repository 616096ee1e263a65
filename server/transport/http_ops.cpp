// Non-MCP HTTP routes. Runs on cpp-httplib's worker threads. Never takes a
// tenant from the request, never puts code text, input contents or tokens in
// a log or audit record, never lets an exception's what() reach a client.
#include "server/transport/http_ops.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <spdlog/spdlog.h>

#include "server/broker/broker.h"
#include "server/broker/metrics.h"
#include "server/protocol/audit.h"
#include "server/protocol/jsonrpc.h"
#include "server/store/store.h"
#include "server/util/text.h"
#include "tools/job_request.h"
#include "tools/registry.h"

namespace transport::http {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kJsonType = "application/json";
constexpr const char* kTextType = "text/plain; charset=utf-8";
constexpr int kQueueFullRetryAfterS = 5;              // a slot frees when any running job ends
constexpr uint64_t kStateDirFreeMinBytes = 1u << 20;  // below this, ledger and store writes fail
constexpr size_t kJobIdChars = 32;                    // util::random_id(): 128 bits, hex
constexpr const char* kUnknownJob = "unknown job_id (it does not exist, has expired, or belongs to another tenant)";

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), kJsonType);
}

void send_error(httplib::Response& res, int status, const std::string& message) {
  send_json(res, status, {{"error", message}});
}

void send_text(httplib::Response& res, int status, const std::string& text, const char* type = kTextType) {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(text, type);
}

// The one place an exception from a route handler is caught: logged here,
// a bare 500 to the client (httplib would otherwise echo what() in a header).
httplib::Server::Handler guarded(const char* route, httplib::Server::Handler handler) {
  return [route, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
    try {
      handler(req, res);
    } catch (const std::exception& e) {
      spdlog::error("http {}: {}", route, e.what());
      send_error(res, 500, "internal error");
    }
  };
}

bool is_job_id(const std::string& id) {
  if (id.size() != kJobIdChars) return false;
  for (char c : id)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// Why the server cannot take jobs, or "" when it can.
std::string not_ready_reason(protocol::mcp::ServerContext& s) {
  if (s.policy.get()->available_runtimes().empty()) return "no runtime of the policy is available on this host";
  if (std::string why = s.broker.unready_reason(); !why.empty()) return why;
  for (const auto& [dir, what] :
       {std::pair<const std::string&, const char*>{s.store.state_dir(), "the state directory"},
        {s.store.root(), "the store"}}) {
    if (::access(dir.c_str(), W_OK | X_OK) != 0) return std::string(what) + " is not writable";
    struct statvfs fs {};
    if (::statvfs(dir.c_str(), &fs) == 0 && static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize < kStateDirFreeMinBytes)
      return std::string(what) + "'s file system is full";
  }
  return "";
}

class Ops {
 public:
  explicit Ops(OpsContext ctx) : ctx_(std::move(ctx)) {}

  void healthz(const httplib::Request&, httplib::Response& res) { send_text(res, 200, "ok"); }

  void readyz(const httplib::Request&, httplib::Response& res) {
    std::string why = ctx_.draining && ctx_.draining() ? "draining: this server is stopping and takes no new call"
                                                       : not_ready_reason(ctx_.server);
    if (why.empty())
      send_text(res, 200, "ready");
    else
      send_text(res, 503, "not ready: " + why);
  }

  void metrics(const httplib::Request&, httplib::Response& res) {
    send_text(res, 200, ctx_.server.broker.metrics_text(ctx_.sessions_open ? ctx_.sessions_open() : 0),
              broker::metrics::kContentType);
  }

  // The public key receipts are signed with: anyone may verify a receipt.
  void receipt_key(const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_content(ctx_.server.broker.receipt_key().dump(), "application/json");
  }

  // POST /inputs?name=<file name>, the file's bytes as the body. The same
  // checks, limit and store as the upload_input tool.
  void post_input(const httplib::Request& req, httplib::Response& res) {
    auto tenant = ctx_.authenticate(req, res);
    if (!tenant) return;
    const auto started = Clock::now();
    json out = json::object();
    int status = upload(*tenant, req, res, out);
    audit(*tenant, "upload_input", "POST /inputs", json::object(), status, out, started);
  }

  // POST /jobs {runtime, code, input_ids?, timeout_s?, idempotency_key?}:
  // runs the job through the broker like run_code and answers its result.
  void post_job(const httplib::Request& req, httplib::Response& res) {
    auto tenant = ctx_.authenticate(req, res);
    if (!tenant) return;
    const auto started = Clock::now();
    json args = json::object(), out = json::object();
    int status = run(*tenant, req, res, args, out);
    audit(*tenant, "run_code", "POST /jobs", args, status, out, started);
  }

  // GET /jobs/{job_id}: the recorded result; another tenant's id is unknown.
  void get_job(const httplib::Request& req, httplib::Response& res) {
    auto tenant = ctx_.authenticate(req, res);
    if (!tenant) return;
    const auto started = Clock::now();
    const std::string id = req.matches.size() > 1 ? req.matches[1].str() : "";
    std::optional<broker::LedgerRow> row;
    if (is_job_id(id)) row = ctx_.server.broker.find_record(*tenant, id);
    json out = json::object();
    int status = 404;
    if (!row) {
      send_error(res, status, kUnknownJob);
    } else {
      status = 200;
      out = row->status == "running" ? json{{"job_id", row->job_id}, {"status", "running"}}
                                     : tools::job_result_json(broker::job_result_from_row(*row));
      send_json(res, status, out);
    }
    json record = audit_base(*tenant, "get_job", "GET /jobs/{job_id}", json::object(), status, json::object(), started);
    if (!record.is_null()) {
      if (is_job_id(id)) record["job_id"] = id;  // a bounded hex id, never arbitrary request text
      if (out.contains("status")) record["job_status"] = out["status"];
      ctx_.server.audit->append(std::move(record));
    }
  }

 private:
  int upload(const std::string& tenant, const httplib::Request& req, httplib::Response& res, json& out) {
    const uint64_t max_bytes = ctx_.server.policy.get()->limits.input_max_bytes;
    if (req.is_multipart_form_data()) {
      send_error(res, 415, "body: send the file's bytes as the raw request body, not multipart/form-data");
      return 415;
    }
    if (!req.has_param("name")) {
      send_error(res, 400, "name: required query parameter, the file name inside /inputs (e.g. ?name=orders.csv)");
      return 400;
    }
    const std::string name = req.get_param_value("name");
    if (req.body.size() > max_bytes) {
      send_error(res, 413, "body: larger than the policy's " + std::to_string(max_bytes) + " bytes per input");
      return 413;
    }
    // Name first: libmagic should never see content under a name we refuse.
    if (auto s = store::validate_input_name(name); !s) {
      send_error(res, 400, s.error().message);
      return 400;
    }
    store::Store& store = ctx_.server.store;
    auto rec = store.put_input(tenant, name, req.body, ctx_.server.broker.upload_media_type(name, req.body));
    if (!rec) {
      if (rec.error().code == util::ErrorCode::kInvalidArgument) {
        send_error(res, 400, rec.error().message);
        return 400;
      }
      // The tenant's share full is the tenant's doing, not the server's.
      if (rec.error().code != util::ErrorCode::kTooLarge)
        spdlog::error("http POST /inputs: tenant {}: {}", tenant, rec.error().message);
      const std::string why = store::client_message(rec.error());
      const bool full = why.rfind("the store is full", 0) == 0 || rec.error().code == util::ErrorCode::kTooLarge;
      const int status = full ? 507 : 500;
      send_error(res, status, "the input could not be stored: " + why);
      return status;
    }
    out = {{"input_id", rec->input_id},
           {"name", rec->name},
           {"size", rec->size},
           {"sha256", rec->sha256},
           {"media_type", rec->media_type}};
    send_json(res, 201, out);
    return 201;
  }

  // Parses and checks the body into `args` (the fields run_code takes), runs
  // the job, writes the response. Every refusal names the field.
  int run(const std::string& tenant, const httplib::Request& req, httplib::Response& res, json& args, json& out) {
    auto fail = [&](int status, const std::string& message) {
      send_error(res, status, message);
      return status;
    };
    const std::shared_ptr<const policy::Policy> policy = ctx_.server.policy.get();
    const policy::Server& caps = policy->server;
    if (req.body.size() > caps.message_max_bytes)
      return fail(413, "body: larger than " + std::to_string(caps.message_max_bytes) + " bytes");
    // Depth before parsing: a deep document overflows the stack in copy and dump.
    if (protocol::jsonrpc::nesting_depth(req.body, caps.json_max_depth) > caps.json_max_depth)
      return fail(400, "body: JSON nested deeper than " + std::to_string(caps.json_max_depth) + " levels");
    json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded()) return fail(400, "body: not valid JSON");
    if (!body.is_object())
      return fail(400, "body: must be a JSON object {runtime, code, input_ids?, timeout_s?, idempotency_key?}");
    args = std::move(body);
    auto job = tools::parse_job_request(args, tenant, tools::kHttpJobFields);
    if (!job) return fail(400, job.error().message);

    auto result = ctx_.server.broker.run(*job);
    if (!result) {
      const util::Error& e = result.error();
      if (e.code == util::ErrorCode::kBusy) {
        // The tenant's CPU budget is the tenant's limit (429); a full queue is the server's (503).
        const uint64_t after = e.retry_after_s.value_or(0);
        res.set_header("Retry-After", std::to_string(after ? after : kQueueFullRetryAfterS));
        return fail(after ? 429 : 503, e.message);
      }
      if (e.code == util::ErrorCode::kUnavailable) {
        res.set_header("Retry-After", std::to_string(e.retry_after_s.value_or(kQueueFullRetryAfterS)));
        return fail(503, e.message);
      }
      // A key reused for another request.
      if (e.code == util::ErrorCode::kConflict) return fail(409, e.message);
      if (e.code == util::ErrorCode::kInvalidArgument || e.code == util::ErrorCode::kNotFound)
        return fail(400, e.message);
      spdlog::error("http POST /jobs: tenant {}: {}", tenant, e.message);
      return fail(500, "internal error: the job could not be run");
    }
    out = tools::job_result_json(*result);
    res.set_header("Location", "/jobs/" + result->job_id);
    send_json(res, 200, out);
    return 200;
  }

  // The record a tools/call of `tool` would write, plus the route and HTTP
  // status; null when there is no audit log.
  json audit_base(const std::string& tenant, const char* tool, const char* route, const json& args, int status,
                  const json& structured, Clock::time_point started) {
    if (!ctx_.server.audit) return nullptr;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count();
    json wire{{"isError", status >= 400}, {"structuredContent", structured}};
    json record = protocol::audit_record(tenant, tool, args, wire, ms);
    record["route"] = route;
    record["http_status"] = status;
    return record;
  }

  void audit(const std::string& tenant, const char* tool, const char* route, const json& args, int status,
             const json& structured, Clock::time_point started) {
    json record = audit_base(tenant, tool, route, args, status, structured, started);
    if (!record.is_null()) ctx_.server.audit->append(std::move(record));
  }

  OpsContext ctx_;
};

}  // namespace

void add_ops_routes(httplib::Server& srv, OpsContext ctx) {
  // Shared by the handlers, which httplib keeps (and copies) for the server's life.
  auto ops = std::make_shared<Ops>(std::move(ctx));
  srv.Get("/healthz", guarded("GET /healthz", [ops](const auto& q, auto& r) { ops->healthz(q, r); }));
  srv.Get("/readyz", guarded("GET /readyz", [ops](const auto& q, auto& r) { ops->readyz(q, r); }));
  srv.Get("/metrics", guarded("GET /metrics", [ops](const auto& q, auto& r) { ops->metrics(q, r); }));
  srv.Get("/.well-known/throwbox-receipt-key",
          guarded("GET /.well-known/throwbox-receipt-key", [ops](const auto& q, auto& r) { ops->receipt_key(q, r); }));
  srv.Post("/inputs", guarded("POST /inputs", [ops](const auto& q, auto& r) { ops->post_input(q, r); }));
  srv.Post("/jobs", guarded("POST /jobs", [ops](const auto& q, auto& r) { ops->post_job(q, r); }));
  srv.Get(R"(/jobs/([^/]+))", guarded("GET /jobs/{job_id}", [ops](const auto& q, auto& r) { ops->get_job(q, r); }));
}

}  // namespace transport::http
