// MCP lifecycle and dispatch. An unknown tool is a JSON-RPC error; a failure
// inside a tool is an isError result (MCP spec, tools). Internal exception
// text never reaches the client: it is logged here, once.
#include "server/protocol/mcp.h"

#include <chrono>
#include <spdlog/spdlog.h>

#include "server/util/base64.h"

namespace protocol::mcp {
namespace {

using jsonrpc::make_error;
using jsonrpc::make_result;

constexpr size_t kResourcesListMax = 1000;
constexpr int kResourceNotFound = -32002;  // MCP spec, resources: error handling

struct BatchCollector {
  std::mutex mu;
  json responses = json::array();
  size_t pending = 0;
};

}  // namespace

std::string negotiate_version(const std::string& requested) {
  for (const char* v : kSupportedVersions)
    if (requested == v) return requested;
  return kLatestVersion;
}

std::string instructions_text(const policy::Policy& p) {
  std::string runtimes;
  for (auto& name : p.available_runtimes()) runtimes += (runtimes.empty() ? "" : ", ") + name;
  const auto& l = p.limits;
  return "throwbox runs short programs in a disposable Linux sandbox. Use it for computation on "
         "files or data: parse, clean, reconcile, transform, chart. Workflow: upload_input each file "
         "(it appears read-only at /inputs/<name>), then run_code with a runtime (" + runtimes +
         "), the full program and the input_ids. Write result files to /outputs/ (they come back as "
         "artifacts with a verdict; read them with fetch_artifact); /work (the working directory) and "
         "/tmp are scratch and vanish after the call. There is no network and no secret in the box; "
         "nothing persists between calls, so each program must be complete. Limits: timeout " +
         std::to_string(static_cast<int>(l.timeout_s_default)) + " s by default, " +
         std::to_string(static_cast<int>(l.timeout_s_max)) + " s at most; stdout and stderr are cut at " +
         std::to_string(l.stdout_max_bytes) + " bytes each (truncation is flagged); /outputs holds at most " +
         std::to_string(l.outputs_max_bytes / (1024 * 1024)) + " MiB in " + std::to_string(l.outputs_max_files) +
         " files. A non-zero exit is status failed, with stderr telling why: read it and fix the program.";
}

Session::Session(ServerContext& server, Outbox& outbox, std::string tenant)
    : server_(server),
      outbox_(outbox),
      tenant_(std::move(tenant)),
      limits_{server.policy.server.message_max_bytes, server.policy.server.json_max_depth},
      pool_(server.policy.server.concurrent_calls_max,
            static_cast<size_t>(server.policy.server.concurrent_calls_max) * 4) {}

Session::~Session() { pool_.drain(); }

void Session::drain() { pool_.drain(); }

void Session::handle_oversized(size_t bytes) {
  outbox_.send(make_error(nullptr, jsonrpc::kInvalidRequest,
                          "Invalid Request: message of " + std::to_string(bytes) + " bytes exceeds " +
                              std::to_string(limits_.max_message_bytes) + " bytes"));
}

void Session::handle_line(std::string_view line) {
  jsonrpc::Parsed parsed = jsonrpc::parse_line(line, limits_);
  if (parsed.whole_line_failed) {
    auto& f = std::get<jsonrpc::Failure>(parsed.items.front());
    outbox_.send(make_error(f.id, f.code, f.message));
    return;
  }
  if (!parsed.is_batch) {
    if (auto* f = std::get_if<jsonrpc::Failure>(&parsed.items.front())) {
      outbox_.send(make_error(f->id, f->code, f->message));
      return;
    }
    handle_message(std::get<jsonrpc::Message>(parsed.items.front()), [this](json r) {
      if (!r.is_null()) outbox_.send(r);  // null: no response (a cancelled request)
    });
    return;
  }

  std::string version;
  {
    std::lock_guard lock(mu_);
    version = version_;
  }
  // JSON-RPC batching was removed from MCP in 2025-06-18; 2025-03-26 still has it.
  if (version != "2025-03-26") {
    outbox_.send(make_error(nullptr, jsonrpc::kInvalidRequest,
                            "Invalid Request: JSON-RPC batches are not supported" +
                                (version.empty() ? std::string(" before initialize")
                                                 : " in protocol version " + version)));
    return;
  }
  auto batch = std::make_shared<BatchCollector>();
  batch->pending = parsed.items.size();
  auto reply = [this, batch](json r) {
    std::lock_guard lock(batch->mu);
    if (!r.is_null()) batch->responses.push_back(std::move(r));
    if (--batch->pending == 0 && !batch->responses.empty()) outbox_.send(batch->responses);
  };
  for (auto& item : parsed.items) {
    if (auto* f = std::get_if<jsonrpc::Failure>(&item)) {
      reply(make_error(f->id, f->code, f->message));
      continue;
    }
    auto& m = std::get<jsonrpc::Message>(item);
    if (m.method == "initialize") {
      reply(make_error(m.id, jsonrpc::kInvalidRequest, "Invalid Request: initialize must not be batched"));
      continue;
    }
    if (m.kind != jsonrpc::Message::Kind::kRequest) {
      handle_message(m, [](json) {});
      reply(nullptr);  // notifications and responses get no answer
      continue;
    }
    handle_message(m, reply);
  }
}

void Session::handle_message(const jsonrpc::Message& m, const Reply& reply) {
  using Kind = jsonrpc::Message::Kind;
  if (m.kind == Kind::kResponse) return;  // this server sends no requests yet
  if (m.kind == Kind::kNotification) {
    if (m.method == "notifications/cancelled" && m.params.is_object() && m.params.contains("requestId")) {
      // A cancellation that arrives after completion finds nothing: ignored.
      std::lock_guard lock(mu_);
      auto it = in_flight_.find(m.params["requestId"].dump());
      if (it != in_flight_.end()) {
        spdlog::info("request {} cancelled by the client", it->first);
        it->second->cancel();
      }
      return;
    }
    // notifications/initialized and others need no answer.
    spdlog::debug("notification {}", m.method);
    return;
  }
  if (m.method == "initialize") return handle_initialize(m, reply);
  if (m.method == "ping") return reply(make_result(m.id, json::object()));
  {
    std::lock_guard lock(mu_);
    if (!initialize_answered_) {
      return reply(make_error(m.id, jsonrpc::kInvalidRequest,
                              "Invalid Request: the session is not initialized; send initialize first"));
    }
  }
  if (m.method == "tools/list") return reply(make_result(m.id, {{"tools", server_.tools.list()}}));
  if (m.method == "tools/call") return handle_tools_call(m, reply);
  if (m.method == "resources/read") return handle_resources_read(m, reply);
  if (m.method == "resources/list") {
    json list = json::array();
    for (auto& a : server_.store.list_artifacts(tenant_, kResourcesListMax))
      list.push_back({{"uri", store::artifact_uri(a.artifact_id)}, {"name", a.name},
                      {"mimeType", a.media_type}, {"size", a.size},
                      {"description", "artifact of job " + a.job_id + " (" + a.verdict + ")"}});
    return reply(make_result(m.id, {{"resources", list}}));
  }
  if (m.method == "resources/templates/list")
    return reply(make_result(m.id, {{"resourceTemplates",
                                     {{{"uriTemplate", "throwbox://artifacts/{artifact_id}"},
                                       {"name", "artifact"},
                                       {"description", "A file a run_code job wrote to /outputs"}}}}}));
  reply(make_error(m.id, jsonrpc::kMethodNotFound, "Method not found: " + m.method));
}

void Session::handle_initialize(const jsonrpc::Message& m, const Reply& reply) {
  const json& p = m.params;
  if (!p.is_object() || !p.contains("protocolVersion") || !p["protocolVersion"].is_string())
    return reply(make_error(m.id, jsonrpc::kInvalidParams, "Invalid params: protocolVersion must be a string"));
  if (p.contains("capabilities") && !p["capabilities"].is_object())
    return reply(make_error(m.id, jsonrpc::kInvalidParams, "Invalid params: capabilities must be an object"));
  std::string version = negotiate_version(p["protocolVersion"].get<std::string>());
  {
    std::lock_guard lock(mu_);
    if (initialize_answered_)
      return reply(make_error(m.id, jsonrpc::kInvalidRequest, "Invalid Request: already initialized"));
    initialize_answered_ = true;
    version_ = version;
  }
  std::string client = "unknown";
  if (p.contains("clientInfo") && p["clientInfo"].is_object() && p["clientInfo"].contains("name") &&
      p["clientInfo"]["name"].is_string())
    client = p["clientInfo"]["name"].get<std::string>();
  spdlog::info("initialize: client={} protocol={}", client, version);
  reply(make_result(m.id, {{"protocolVersion", version},
                           {"capabilities", {{"tools", {{"listChanged", false}}},
                                             {"resources", {{"listChanged", false}, {"subscribe", false}}}}},
                           {"serverInfo", {{"name", "throwbox"}, {"title", "throwbox sandbox"},
                                           {"version", THROWBOX_VERSION}}},
                           {"instructions", instructions_text(server_.policy)}}));
}

void Session::handle_tools_call(const jsonrpc::Message& m, const Reply& reply) {
  const json& p = m.params;
  if (!p.is_object() || !p.contains("name") || !p["name"].is_string())
    return reply(make_error(m.id, jsonrpc::kInvalidParams, "Invalid params: tools/call needs a string \"name\""));
  std::string name = p["name"].get<std::string>();
  const tools::Tool* tool = server_.tools.find(name);
  if (!tool) return reply(make_error(m.id, jsonrpc::kInvalidParams, "Unknown tool: " + name));
  json args = p.contains("arguments") ? p["arguments"] : json::object();
  if (!args.is_object())
    return reply(make_error(m.id, jsonrpc::kInvalidParams, "Invalid params: arguments must be an object"));

  json id = m.id;
  auto cancel = std::make_shared<broker::Cancellation>();
  std::function<void(const json&)> progress;
  if (p.contains("_meta") && p["_meta"].is_object() && p["_meta"].contains("progressToken") &&
      (p["_meta"]["progressToken"].is_string() || p["_meta"]["progressToken"].is_number_integer())) {
    json token = p["_meta"]["progressToken"];
    progress = [this, token](const json& pr) {
      // progress must increase: elapsed seconds do.
      double elapsed_s = pr.value("elapsed_ms", 0) / 1000.0;
      std::string message = "running " + std::to_string(static_cast<int>(elapsed_s)) + " s, " +
                            std::to_string(pr.value("stdout_bytes", 0)) + " bytes of stdout";
      std::string last = pr.value("last_line", "");
      if (!last.empty()) message += "; last line: " + last;
      outbox_.send(jsonrpc::make_notification(
          "notifications/progress", {{"progressToken", token}, {"progress", elapsed_s}, {"message", message}}));
    };
  }
  {
    std::lock_guard lock(mu_);
    in_flight_[id.dump()] = cancel;
  }
  auto task = [this, tool, args = std::move(args), id, reply, name, cancel, progress]() {
    tools::CallContext ctx{tenant_, server_.policy, server_.store, server_.jobs, cancel, progress};
    const auto started = std::chrono::steady_clock::now();
    tools::ToolResult result;
    try {
      result = tool->call(args, ctx);
    } catch (const std::exception& e) {
      spdlog::error("tool {} failed: {}", name, e.what());
      result = tools::error_result("internal error in " + name + "; see the server log");
    }
    {
      std::lock_guard lock(mu_);
      in_flight_.erase(id.dump());
    }
    json wire = result.to_json();
    if (server_.audit) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
      json record = broker::audit_record(tenant_, name, args, wire, ms.count());
      if (cancel->requested()) record["cancelled"] = true;
      server_.audit->append(std::move(record));
    }
    // A cancelled request gets no response (MCP spec, cancellation).
    reply(cancel->requested() ? json(nullptr) : make_result(id, std::move(wire)));
  };
  if (!pool_.submit(task)) {
    {
      std::lock_guard lock(mu_);
      in_flight_.erase(id.dump());
    }
    reply(make_result(id, tools::error_result("busy: too many calls in flight on this session; "
                                              "retry when one of them has answered")
                              .to_json()));
  }
}

}  // namespace protocol::mcp

namespace protocol::mcp {

void Session::handle_resources_read(const jsonrpc::Message& m, const Reply& reply) {
  const json& p = m.params;
  if (!p.is_object() || !p.contains("uri") || !p["uri"].is_string())
    return reply(make_error(m.id, jsonrpc::kInvalidParams, "Invalid params: resources/read needs a string \"uri\""));
  std::string uri = p["uri"].get<std::string>();
  std::string id = store::artifact_id_from_uri(uri);
  // Unknown, malformed and foreign URIs give one and the same answer.
  auto rec = id.empty() ? util::Result<store::ArtifactRecord>(util::make_error("not_found", ""))
                        : server_.store.get_artifact(tenant_, id);
  if (!rec) return reply(make_error(m.id, kResourceNotFound, "Resource not found", {{"uri", uri}}));
  const uint64_t max = server_.policy.limits.artifact_inline_max_bytes;
  if (rec->size > max)
    return reply(make_error(m.id, jsonrpc::kInvalidParams,
                            "resource is " + std::to_string(rec->size) + " bytes, above the inline limit of " +
                                std::to_string(max) + " bytes"));
  auto bytes = server_.store.read_blob(rec->blob_path, max);
  if (!bytes) {
    spdlog::error("resources/read {}: {}", uri, bytes.error().message);
    return reply(make_error(m.id, jsonrpc::kInternalError, "Internal error reading the resource"));
  }
  json item{{"uri", uri}, {"mimeType", rec->media_type}};
  if (store::is_text_media_type(rec->media_type)) item["text"] = *bytes;
  else item["blob"] = util::base64_encode(*bytes);
  reply(make_result(m.id, {{"contents", json::array({item})}}));
}

}  // namespace protocol::mcp
