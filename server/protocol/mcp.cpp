// MCP lifecycle and dispatch. An unknown tool is a JSON-RPC error; a failure
// inside a tool is an isError result (MCP spec, tools). Internal exception
// text never reaches the client: it is logged here, once.
#include "server/protocol/mcp.h"

#include <chrono>
#include <cmath>
#include <optional>
#include <spdlog/spdlog.h>

#include "server/protocol/run_view.h"
#include "server/util/base64.h"
#include "server/util/call_trace.h"

namespace protocol::mcp {
namespace {

using jsonrpc::make_error;
using jsonrpc::make_result;

constexpr size_t kResourcesListMax = 1000;
constexpr int kResourceNotFound = -32002;  // MCP spec, resources: error handling (up to 2025-11-25)
// How long a stateless client may cache a list (CacheableResult.ttlMs): the
// tools and templates are fixed for the server's life; artifacts are
// immutable; the artifact list changes with every job.
constexpr int64_t kToolsTtlMs = 300000;
constexpr int64_t kArtifactTtlMs = 60000;
// Every answer depends on the caller's token (tenant): no shared cache.
constexpr const char* kCacheScope = "private";

struct BatchCollector {
  std::mutex mu;
  json responses = json::array();
  size_t pending = 0;
};

constexpr const char* kRelatedTask = "io.modelcontextprotocol/related-task";

// `fn` wrapped so that it runs only while the session lives.
template <class F>
auto while_alive(const std::shared_ptr<Liveness>& liveness, F fn) {
  return [liveness, fn = std::move(fn)](const auto&... args) {
    std::lock_guard lock(liveness->mu);
    if (liveness->alive) fn(args...);
  };
}

// notifications/progress for a progressToken, from the job's progress reports;
// `task_id` adds the related-task _meta (MCP tasks: messages of a task carry it).
std::function<void(const json&)> progress_sender(json token, std::function<void(const json&)> send,
                                                 std::string task_id = "") {
  return [token = std::move(token), send = std::move(send), task_id = std::move(task_id)](const json& pr) {
    // progress must increase: elapsed seconds do.
    double elapsed_s = pr.value("elapsed_ms", 0) / 1000.0;
    std::string message = "running " + std::to_string(static_cast<int>(elapsed_s)) + " s, " +
                          std::to_string(pr.value("stdout_bytes", 0)) + " bytes of stdout";
    std::string last = pr.value("last_line", "");
    if (!last.empty()) message += "; last line: " + last;
    json params{{"progressToken", token}, {"progress", elapsed_s}, {"message", message}};
    if (!task_id.empty()) params["_meta"] = {{kRelatedTask, {{"taskId", task_id}}}};
    send(jsonrpc::make_notification("notifications/progress", params));
  };
}

// A log event as notifications/message, when the client's level wants it.
template <class Send>
void send_log(const logging::Threshold& threshold, const logging::Event& event, const Send& send,
              const std::string& task_id = "") {
  if (threshold.wants(event.level)) send(logging::message(event.level, event.data, task_id));
}

// The progressToken of a request, or null.
json progress_token(const json& params) {
  if (params.contains("_meta") && params["_meta"].is_object() && params["_meta"].contains("progressToken")) {
    const json& t = params["_meta"]["progressToken"];
    if (t.is_string() || t.is_number_integer()) return t;
  }
  return nullptr;
}

void audit_call(protocol::Audit* audit, const std::string& tenant, const std::string& tool, const json& args,
                const json& wire, std::chrono::steady_clock::time_point started, bool cancelled,
                const std::string& task_id = "") {
  if (!audit) return;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
  json record = protocol::audit_record(tenant, tool, args, wire, ms.count());
  if (cancelled) record["cancelled"] = true;
  if (!task_id.empty()) record["task_id"] = task_id;
  audit->append(std::move(record));
}

// tasks/result: exactly the CallToolResult, tagged with its task.
json task_result_json(const store::TaskRow& row) {
  json r = row.result.is_object() ? row.result : protocol::error_call_result("task " + row.task_id + " " + row.status);
  r["_meta"][kRelatedTask] = {{"taskId", row.task_id}};
  return r;
}

// Whether a ClientCapabilities object lists the extension (any object value).
bool declares_extension(const json& caps, const char* extension) {
  if (!caps.is_object()) return false;
  auto ext = caps.find("extensions");
  if (ext == caps.end() || !ext->is_object()) return false;
  auto it = ext->find(extension);
  return it != ext->end() && it->is_object();
}

json server_info() { return {{"name", "throwbox"}, {"title", "throwbox sandbox"}, {"version", THROWBOX_VERSION}}; }

json resources_list_result(store::Store& store, const std::string& tenant, bool with_view) {
  json list = json::array();
  if (with_view) list.push_back(view::run_view_listing());
  for (auto& a : store.list_artifacts(tenant, kResourcesListMax))
    list.push_back({{"uri", store::artifact_uri(a.artifact_id)},
                    {"name", a.name},
                    {"mimeType", a.media_type},
                    {"size", a.size},
                    {"description", "artifact of job " + a.job_id + " (" + a.verdict + ")"}});
  return {{"resources", list}};
}

json resource_templates_result() {
  return {
      {"resourceTemplates",
       {{{"uriTemplate", "throwbox://artifacts/{artifact_id}"},
         {"name", "artifact"},
         {"description", "A file a run_code job wrote to /outputs"}},
        {{"uriTemplate", "throwbox://artifacts/{artifact_id}/parts/{part}"},
         {"name", "artifact part"},
         {"description",
          "Part k (from 0) of an artifact above the inline limit, as a base64 blob; fetch_artifact says how many"}}}}};
}

}  // namespace

json supported_versions() {
  json v = json::array({kStatelessVersion});
  for (size_t i = std::size(kSupportedVersions); i-- > 0;) v.push_back(kSupportedVersions[i]);
  return v;
}

json request_version(const json& params) {
  if (!params.is_object()) return nullptr;
  auto meta = params.find("_meta");
  if (meta == params.end() || !meta->is_object()) return nullptr;
  auto v = meta->find(kMetaProtocolVersion);
  return v == meta->end() ? json(nullptr) : *v;
}

std::optional<std::string> stateless_meta_problem(const json& params) {
  const json* meta = nullptr;
  if (params.is_object())
    if (auto it = params.find("_meta"); it != params.end() && it->is_object()) meta = &*it;
  if (!meta)
    return "Invalid params: a 2026-07-28 request needs params._meta with \"" + std::string(kMetaProtocolVersion) +
           "\" and \"" + kMetaClientCapabilities + "\"";
  std::vector<std::string> missing;
  if (!meta->contains(kMetaProtocolVersion)) missing.push_back(kMetaProtocolVersion);
  if (auto caps = meta->find(kMetaClientCapabilities); caps == meta->end() || !caps->is_object())
    missing.push_back(std::string(kMetaClientCapabilities) + " (an object)");
  if (missing.empty()) return std::nullopt;
  std::string message = "Invalid params: _meta lacks ";
  for (size_t i = 0; i < missing.size(); ++i) message += (i ? ", " : "") + missing[i];
  return message;
}

json unsupported_version_error(const json& id, const json& requested) {
  std::string message = "Unsupported protocol version";
  if (requested.is_string())
    for (const char* legacy : kSupportedVersions)
      if (requested == legacy)
        message += ": " + std::string(legacy) + " is served after an initialize handshake, not per request";
  return make_error(id, kUnsupportedProtocolVersion, message,
                    {{"supported", supported_versions()}, {"requested", requested}});
}

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
         "(it appears read-only at /inputs/<name>), then run_code with a runtime (" +
         runtimes +
         "), the full program and the input_ids. Write result files to /outputs/ (they come back as "
         "artifacts with a verdict; read them with fetch_artifact); /work (the working directory) and "
         "/tmp are scratch and vanish after the call. " +
         (p.network.profiles.empty()
              ? std::string("There is no network and no secret in the box; ")
              : std::string("There is no secret in the box, and no network unless run_code's network names a "
                            "profile: then the program reaches only what the profile lists, through the proxy in "
                            "HTTP_PROXY/HTTPS_PROXY (no DNS; a refused request gets HTTP 403 saying why). Ask for "
                            "it only when the task needs to fetch something; ")) +
         "nothing persists between calls unless you use a workspace: when a task takes several runs that build "
         "on each other (an intermediate file, installed packages), open_workspace once, pass its workspace_id "
         "to each run_code (its /work is kept; /tmp, /outputs and processes are not), and close_workspace when "
         "done. To feed one run's output file to the next without a workspace, pass its artifact_id in "
         "artifact_ids: it appears read-only at /inputs/<name>. Otherwise each program must be complete. "
         "Limits: timeout " +
         std::to_string(static_cast<int>(l.timeout_s_default)) + " s by default, " +
         std::to_string(static_cast<int>(l.timeout_s_max)) + " s at most; stdout and stderr are cut at " +
         std::to_string(l.stdout_max_bytes) + " bytes each (truncation is flagged); /outputs holds at most " +
         std::to_string(l.outputs_max_bytes / (1024 * 1024)) + " MiB in " + std::to_string(l.outputs_max_files) +
         " files. A non-zero exit is status failed, with stderr telling why: read it and fix the program.";
}

namespace {

size_t calls_quota(const ServerContext& server, int calls_max) {
  return static_cast<size_t>(calls_max > 0 ? calls_max : server.policy.get()->server.concurrent_calls_max);
}

}  // namespace

Session::Session(ServerContext& server, Outbox& outbox, std::string tenant, int calls_max)
    : server_(server),
      outbox_(outbox),
      tenant_(std::move(tenant)),
      limits_{server.policy.get()->server.message_max_bytes, server.policy.get()->server.json_max_depth} {
  const size_t running_max = calls_quota(server, calls_max);
  util::CallPool* pool = server.calls;
  if (!pool) {
    own_calls_ = std::make_unique<util::CallPool>(running_max);
    pool = own_calls_.get();
  }
  calls_ = pool->make_lane(running_max, running_max * 4);
}

Session::~Session() {
  calls_->drain();
  // Tasks outlive the session; what waits on them for this session does not.
  std::map<std::string, PendingResult> pending;
  {
    std::lock_guard lock(mu_);
    pending.swap(pending_results_);
  }
  if (server_.tasks)
    for (auto& [_, p] : pending) server_.tasks->forget_waiter(tenant_, p.task_id, p.waiter);
  std::lock_guard lock(liveness_->mu);
  liveness_->alive = false;
}

std::string batch_refusal(const std::string& version) {
  return "Invalid Request: JSON-RPC batches are not supported" +
         (version.empty() ? std::string(" before initialize") : " in protocol version " + version);
}

bool Session::tasks_enabled() {
  std::lock_guard lock(mu_);
  return server_.tasks != nullptr && version_ == kTasksVersion;
}

void Session::drain() { calls_->drain(); }

void Session::cancel_all() {
  stopping_.store(true);
  std::lock_guard lock(mu_);
  for (auto& [id, cancel] : in_flight_) {
    spdlog::info("request {} cancelled: the server is stopping", id);
    cancel->cancel();
  }
}

std::string Session::version() {
  std::lock_guard lock(mu_);
  return version_;
}

void Session::handle_oversized(size_t bytes, const json& id) {
  outbox_.send(make_error(id, jsonrpc::kInvalidRequest, jsonrpc::oversized_message(bytes, limits_.max_message_bytes)));
}

void Session::handle_line(std::string_view line) { handle_parsed(jsonrpc::parse_line(line, limits_)); }

const json& Session::tools_list(bool with_task_support, bool with_view) {
  // The registry and policy are fixed: build the schemas once per session,
  // not on every tools/list.
  std::lock_guard lock(mu_);
  json& list = tools_list_[(with_task_support ? 1 : 0) + (with_view ? 2 : 0)];
  if (list.is_null()) {
    list = server_.tools.list(with_task_support);
    if (with_view)
      for (json& tool : list) tool = view::with_view(std::move(tool));
  }
  return list;
}

void Session::handle_parsed(jsonrpc::Parsed parsed) {
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
  if (!batches_supported(version)) {
    outbox_.send(make_error(nullptr, jsonrpc::kInvalidRequest, batch_refusal(version)));
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
    // Notifications and responses get no answer, whatever their method: a
    // notification named initialize has no id to answer with.
    if (m.kind != jsonrpc::Message::Kind::kRequest) {
      handle_message(m, [](json) {});
      reply(nullptr);
      continue;
    }
    if (m.method == "initialize") {
      reply(make_error(m.id, jsonrpc::kInvalidRequest, "Invalid Request: initialize must not be batched"));
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
      const std::string key = m.params["requestId"].dump();
      std::optional<PendingResult> waiting;
      {
        std::lock_guard lock(mu_);
        auto it = in_flight_.find(key);
        if (it != in_flight_.end()) {
          spdlog::info("request {} cancelled by the client", it->first);
          it->second->cancel();
        }
        // A tasks/result given up: stop waiting; the task itself runs on.
        if (auto p = pending_results_.find(key); p != pending_results_.end()) {
          waiting = p->second;
          pending_results_.erase(p);
        }
      }
      if (waiting && server_.tasks) server_.tasks->forget_waiter(tenant_, waiting->task_id, waiting->waiter);
      return;
    }
    // notifications/initialized and others need no answer.
    spdlog::debug("notification {}", m.method);
    return;
  }
  if (m.method == "initialize") return handle_initialize(m, reply);
  {
    // A dual-era server (2026-07-28, basic/versioning): per-request _meta is
    // served statelessly until an initialize selects the legacy protocol for
    // this session; after that the _meta version is just metadata.
    std::unique_lock lock(mu_);
    if (!initialize_answered_ && !request_version(m.params).is_null()) {
      lock.unlock();
      return handle_stateless(m, reply);
    }
  }
  if (m.method == "ping") return reply(make_result(m.id, json::object()));
  {
    std::lock_guard lock(mu_);
    if (!initialize_answered_) {
      return reply(make_error(m.id, jsonrpc::kInvalidRequest,
                              "Invalid Request: the session is not initialized; send initialize first"));
    }
  }
  if (m.method == "tools/list") {
    json result = json::object();
    bool with_view = false;
    {
      std::lock_guard lock(mu_);
      with_view = view_;
    }
    result["tools"] = tools_list(tasks_enabled(), with_view);
    return reply(make_result(m.id, std::move(result)));
  }
  if (m.method == "tools/call") return handle_tools_call(m, reply);
  if (m.method == "logging/setLevel") {
    const json& p = m.params;
    auto level = p.is_object() && p.contains("level") && p["level"].is_string()
                     ? logging::parse_level(p["level"].get<std::string>())
                     : std::nullopt;
    if (!level)
      return reply(make_error(m.id, jsonrpc::kInvalidParams,
                              std::string("Invalid params: level must be one of ") + logging::level_names()));
    log_threshold_->set(*level);
    return reply(make_result(m.id, json::object()));
  }
  // Older protocol versions have no tasks: Method not found below.
  if (m.method.rfind("tasks/", 0) == 0 && tasks_enabled()) return handle_tasks(m, reply);
  if (m.method == "resources/read") return handle_resources_read(m, reply, kResourceNotFound);
  if (m.method == "resources/list") {
    bool with_view = false;
    {
      std::lock_guard lock(mu_);
      with_view = view_;
    }
    return reply(make_result(m.id, resources_list_result(server_.store, tenant_, with_view)));
  }
  if (m.method == "resources/templates/list") return reply(make_result(m.id, resource_templates_result()));
  reply(make_error(m.id, jsonrpc::kMethodNotFound, "Method not found: " + m.method));
}

// One 2026-07-28 request: everything it needs is in it (basic/index,
// statelessness). Tenant scoping is the session's, as for any other request.
// Tasks are the io.modelcontextprotocol/tasks extension: a request that
// declares it in its _meta client capabilities gets a task for run_code;
// one that does not gets the result, and tasks/* refuse it (-32021). A
// legacy `task` param is ignored. ping and logging/setLevel were removed:
// Method not found, like any unknown method (logging is deprecated in
// 2026-07-28: this server sends no log message on a stateless request).
void Session::handle_stateless(const jsonrpc::Message& m, const Reply& reply) {
  const json& meta = m.params["_meta"];
  const json& version = meta[kMetaProtocolVersion];
  if (version != kStatelessVersion) return reply(unsupported_version_error(m.id, version));
  auto caps = meta.find(kMetaClientCapabilities);
  if (caps == meta.end() || !caps->is_object())
    return reply(
        make_error(m.id, jsonrpc::kInvalidParams,
                   std::string("Invalid params: _meta[\"") + kMetaClientCapabilities + "\"] must be an object"));
  const bool tasks_extension = server_.tasks && declares_extension(*caps, kTasksExtension);
  const bool with_view = view::client_supports(*caps);
  // Every result: resultType (basic/index, ResultType; a CreateTaskResult
  // says "task") and who answered.
  Reply complete = [reply](json r) {
    if (r.is_object() && r.contains("result") && r["result"].is_object()) {
      if (!r["result"].contains("resultType")) r["result"]["resultType"] = "complete";
      r["result"]["_meta"][kMetaServerInfo] = server_info();
    }
    reply(std::move(r));
  };
  auto cacheable = [](json result, int64_t ttl_ms) {
    result["ttlMs"] = ttl_ms;
    result["cacheScope"] = kCacheScope;
    return result;
  };
  if (m.method == "server/discover") {
    json capabilities{{"tools", {{"listChanged", false}}},
                      {"resources", {{"listChanged", false}, {"subscribe", false}}}};
    if (server_.tasks) capabilities["extensions"] = {{kTasksExtension, json::object()}};
    if (with_view) capabilities["extensions"][view::kExtension] = json::object();
    return complete(make_result(m.id, cacheable({{"supportedVersions", supported_versions()},
                                                 {"capabilities", capabilities},
                                                 {"instructions", instructions_text(*server_.policy.get())}},
                                                kToolsTtlMs)));
  }
  if (m.method == "tools/list")
    return complete(make_result(m.id, cacheable({{"tools", tools_list(false, with_view)}}, kToolsTtlMs)));
  if (m.method == "tools/call") return handle_tools_call(m, complete, tasks_extension);
  if (server_.tasks && (m.method == "tasks/get" || m.method == "tasks/update" || m.method == "tasks/cancel")) {
    if (!tasks_extension)
      return reply(make_error(m.id, kMissingRequiredClientCapability,
                              "Missing required client capability: " + m.method + " needs the extension " +
                                  kTasksExtension + " in _meta[\"" + kMetaClientCapabilities + "\"].extensions",
                              {{"requiredCapabilities", {{"extensions", {{kTasksExtension, json::object()}}}}}}));
    return handle_tasks_extension(m, complete);
  }
  if (m.method == "resources/read") {
    // Not found is -32602 from 2026-07-28 on (changelog, minor change 6).
    return handle_resources_read(
        m,
        [complete, cacheable](json r) {
          if (r.contains("result")) r["result"] = cacheable(std::move(r["result"]), kArtifactTtlMs);
          complete(std::move(r));
        },
        jsonrpc::kInvalidParams);
  }
  if (m.method == "resources/list")
    return complete(make_result(m.id, cacheable(resources_list_result(server_.store, tenant_, with_view), 0)));
  if (m.method == "resources/templates/list")
    return complete(make_result(m.id, cacheable(resource_templates_result(), kToolsTtlMs)));
  reply(make_error(m.id, jsonrpc::kMethodNotFound, "Method not found: " + m.method));
}

void Session::handle_initialize(const jsonrpc::Message& m, const Reply& reply) {
  const json& p = m.params;
  if (!p.is_object() || !p.contains("protocolVersion") || !p["protocolVersion"].is_string())
    return reply(make_error(m.id, jsonrpc::kInvalidParams, "Invalid params: protocolVersion must be a string"));
  if (p.contains("capabilities") && !p["capabilities"].is_object())
    return reply(make_error(m.id, jsonrpc::kInvalidParams, "Invalid params: capabilities must be an object"));
  std::string version = negotiate_version(p["protocolVersion"].get<std::string>());
  const bool with_view = p.contains("capabilities") && view::client_supports(p["capabilities"]);
  {
    std::lock_guard lock(mu_);
    if (initialize_answered_)
      return reply(make_error(m.id, jsonrpc::kInvalidRequest, "Invalid Request: already initialized"));
    initialize_answered_ = true;
    version_ = version;
    view_ = with_view;
  }
  std::string client = "unknown";
  if (p.contains("clientInfo") && p["clientInfo"].is_object() && p["clientInfo"].contains("name") &&
      p["clientInfo"]["name"].is_string())
    client = p["clientInfo"]["name"].get<std::string>();
  spdlog::info("initialize: client={} protocol={}", client, version);
  json capabilities{{"tools", {{"listChanged", false}}},
                    {"resources", {{"listChanged", false}, {"subscribe", false}}},
                    {"logging", json::object()}};
  if (with_view) capabilities["extensions"] = {{view::kExtension, json::object()}};
  if (server_.tasks && version == kTasksVersion)
    capabilities["tasks"] = {
        {"list", json::object()}, {"cancel", json::object()}, {"requests", {{"tools", {{"call", json::object()}}}}}};
  reply(make_result(m.id, {{"protocolVersion", version},
                           {"capabilities", capabilities},
                           {"serverInfo", server_info()},
                           {"instructions", instructions_text(*server_.policy.get())}}));
}

void Session::handle_tools_call(const jsonrpc::Message& m, const Reply& reply, bool extension_task) {
  const json& p = m.params;
  if (!p.is_object() || !p.contains("name") || !p["name"].is_string())
    return reply(make_error(m.id, jsonrpc::kInvalidParams, "Invalid params: tools/call needs a string \"name\""));
  std::string name = p["name"].get<std::string>();
  std::shared_ptr<const tools::Tool> tool = server_.tools.find(name);
  if (!tool) return reply(make_error(m.id, jsonrpc::kInvalidParams, "Unknown tool: " + name));
  json args = p.contains("arguments") ? p["arguments"] : json::object();
  if (!args.is_object())
    return reply(make_error(m.id, jsonrpc::kInvalidParams, "Invalid params: arguments must be an object"));

  // The server decides (tasks extension): a tool that can run as a task does,
  // whatever the request says; a legacy "task" param is ignored.
  if (extension_task && server_.tasks && tool->task_support != "forbidden")
    return start_task(m, tool, name, std::move(args), std::nullopt, TaskWire::kExtension, reply);
  // Sessions without tasks process the call normally, ignoring "task" (MCP tasks, task support).
  if (p.contains("task") && tasks_enabled()) {
    const json& t = p["task"];
    if (!t.is_object())
      return reply(make_error(m.id, jsonrpc::kInvalidParams, "Invalid params: task must be an object"));
    std::optional<double> ttl_ms;
    if (t.contains("ttl")) {
      const json& ttl = t["ttl"];
      if (!ttl.is_number() || !std::isfinite(ttl.get<double>()) || ttl.get<double>() < 0)
        return reply(make_error(m.id, jsonrpc::kInvalidParams,
                                "Invalid params: task.ttl must be a non-negative number of milliseconds"));
      ttl_ms = ttl.get<double>();
    }
    return start_task(m, tool, name, std::move(args), ttl_ms, TaskWire::kCore, reply);
  }

  json id = m.id;
  auto cancel = std::make_shared<broker::Cancellation>();
  std::function<void(const json&)> progress;
  if (json token = progress_token(p); !token.is_null())
    progress = progress_sender(token, [this](const json& n) { outbox_.send(n); });
  {
    std::lock_guard lock(mu_);
    in_flight_[id.dump()] = cancel;
  }
  util::call_mark_id("tools/call read", id);
  auto task = [this, tool, args = std::move(args), id, reply, name, cancel, progress]() {
    util::call_mark_id("call on worker", id);
    const std::shared_ptr<const policy::Policy> policy = server_.policy.get();
    tools::CallContext ctx{tenant_, *policy, server_.store, server_.broker, cancel, progress, nullptr};
    const auto started = std::chrono::steady_clock::now();
    send_log(*log_threshold_, logging::call_started(name, nullptr), [this](const json& n) { outbox_.send(n); });
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
    util::call_mark_id("tool returned", id);
    json wire = result.to_json();
    audit_call(server_.audit, tenant_, name, args, wire, started, cancel->requested());
    send_log(*log_threshold_, logging::call_finished(name, wire, nullptr), [this](const json& n) { outbox_.send(n); });
    // A request the client cancelled gets no response (MCP spec, cancellation);
    // one the stopping server cancelled gets its "cancelled" result.
    reply(cancel->requested() && !stopping_.load() ? json(nullptr) : make_result(id, std::move(wire)));
  };
  if (!calls_->submit(task)) {
    {
      std::lock_guard lock(mu_);
      in_flight_.erase(id.dump());
    }
    reply(make_result(id, tools::error_result("busy: too many calls in flight on this session; "
                                              "retry when one of them has answered")
                              .to_json()));
  }
}

void Session::start_task(const jsonrpc::Message& m, std::shared_ptr<const tools::Tool> tool, const std::string& name,
                         json args, std::optional<double> ttl_ms, TaskWire shape, const Reply& reply) {
  const json& p = m.params;
  // MCP tasks, tool-level negotiation: a task on a tool that forbids it is -32601.
  if (tool->task_support == "forbidden")
    return reply(
        make_error(m.id, jsonrpc::kMethodNotFound,
                   "Method not found: " + name + " cannot run as a task (its execution.taskSupport is \"forbidden\")"));
  const bool extension = shape == TaskWire::kExtension;

  // The work outlives this session: it holds the server's parts, never the
  // session, and tells the session things only through the liveness guard.
  // The extension's tasks send nothing (no progress or log messages on a
  // task, SEP-2663): their request's stream ends with the CreateTaskResult.
  std::function<void(const json&)> send = extension
                                              ? std::function<void(const json&)>([](const json&) {})
                                              : while_alive(liveness_, [this](const json& n) { outbox_.send(n); });
  const int64_t poll_ms = server_.tasks->poll_interval_ms();
  const std::shared_ptr<const policy::Policy> policy = server_.policy.get();
  store::Store& store = server_.store;
  broker::Broker& jobs = server_.broker;
  protocol::Audit* audit = server_.audit;
  std::shared_ptr<broker::WorkspaceUse> held;
  if (tool->hold) {
    auto h = tool->hold(args, tenant_, jobs);
    if (!h) return reply(make_result(m.id, tools::error_result(h.error().message).to_json()));
    held = std::move(*h);
  }
  auto work = [policy, &store, &jobs, audit, tool, name, tenant = tenant_, args = std::move(args),
               token = extension ? json(nullptr) : progress_token(p), send, held, log = log_threshold_](
                  const std::shared_ptr<broker::Cancellation>& cancel, const std::string& task_id) -> json {
    // The progressToken stays valid for the task's life (MCP tasks, progress).
    std::function<void(const json&)> progress;
    if (!token.is_null()) progress = progress_sender(token, send, task_id);
    tools::CallContext ctx{tenant, *policy, store, jobs, cancel, progress, held};
    const auto started = std::chrono::steady_clock::now();
    send_log(*log, logging::call_started(name, task_id), send, task_id);
    tools::ToolResult result;
    try {
      result = tool->call(args, ctx);
    } catch (const std::exception& e) {
      spdlog::error("tool {} (task {}) failed: {}", name, task_id, e.what());
      result = tools::error_result("internal error in " + name + "; see the server log");
    }
    json wire = result.to_json();
    audit_call(audit, tenant, name, args, wire, started, cancel->requested(), task_id);
    send_log(*log, logging::call_finished(name, wire, task_id), send, task_id);
    return wire;
  };
  // Optional in MCP tasks; sent once, at the terminal status.
  protocol::Tasks::Listener on_terminal;
  if (!extension)
    on_terminal = [send, poll_ms](const store::TaskRow& row) {
      send(jsonrpc::make_notification("notifications/tasks/status", protocol::task_json(row, poll_ms)));
    };
  // start() returns once the row is in the ledger: a tasks/get right after
  // the answer finds it (SEP-2663, durable creation).
  auto created = server_.tasks->start(tenant_, name, ttl_ms, std::move(work), std::move(on_terminal));
  if (!created) {
    if (created.error().code == util::ErrorCode::kBusy)
      return reply(make_result(m.id, tools::error_result(created.error().message).to_json()));
    return reply(make_error(m.id, jsonrpc::kInternalError, "Internal error: the task could not be created"));
  }
  if (extension) {
    // CreateTaskResult: the Task's fields flat in the result (SEP-2663).
    json result = protocol::extension_task_json(*created, poll_ms, false);
    result["resultType"] = "task";
    return reply(make_result(m.id, std::move(result)));
  }
  reply(make_result(m.id, {{"task", protocol::task_json(*created, poll_ms)},
                           {"_meta",
                            {{"io.modelcontextprotocol/model-immediate-response",
                              name + " is running as task " + created->task_id +
                                  "; its result comes with tasks/result (or poll tasks/get)."}}}}));
}

void Session::handle_tasks(const jsonrpc::Message& m, const Reply& reply) {
  protocol::Tasks& tasks = *server_.tasks;
  const int64_t poll_ms = tasks.poll_interval_ms();
  const json& p = m.params;
  auto fail = [&](const util::Error& e) {
    // Unknown, expired, malformed and foreign ids share one message (kTaskNotFound).
    if (e.code == util::ErrorCode::kNotFound || e.code == util::ErrorCode::kInvalidArgument)
      return reply(make_error(m.id, jsonrpc::kInvalidParams, e.message));
    spdlog::error("{}: {}", m.method, e.message);
    reply(make_error(m.id, jsonrpc::kInternalError, "Internal error"));
  };
  if (m.method == "tasks/list") {
    std::string cursor;
    if (p.is_object() && p.contains("cursor")) {
      if (!p["cursor"].is_string())
        return reply(make_error(m.id, jsonrpc::kInvalidParams, "Invalid params: cursor must be a string"));
      cursor = p["cursor"].get<std::string>();
    }
    auto page = tasks.list(tenant_, cursor);
    if (!page) return fail(page.error());
    json list = json::array();
    for (auto& row : page->tasks) list.push_back(protocol::task_json(row, poll_ms));
    json result{{"tasks", list}};
    if (!page->next_cursor.empty()) result["nextCursor"] = page->next_cursor;
    return reply(make_result(m.id, result));
  }
  if (m.method != "tasks/get" && m.method != "tasks/result" && m.method != "tasks/cancel")
    return reply(make_error(m.id, jsonrpc::kMethodNotFound, "Method not found: " + m.method));
  if (!p.is_object() || !p.contains("taskId") || !p["taskId"].is_string())
    return reply(
        make_error(m.id, jsonrpc::kInvalidParams, "Invalid params: " + m.method + " needs a string \"taskId\""));
  const std::string task_id = p["taskId"].get<std::string>();

  if (m.method == "tasks/get" || m.method == "tasks/cancel") {
    auto row = m.method == "tasks/get" ? tasks.get(tenant_, task_id) : tasks.cancel(tenant_, task_id);
    if (!row) return fail(row.error());
    return reply(make_result(m.id, protocol::task_json(*row, poll_ms)));
  }

  // tasks/result blocks until the task is terminal (MCP tasks, result
  // retrieval) without holding a thread: a waiter answers later.
  json id = m.id;
  const std::string key = id.dump();
  auto on_ready = while_alive(liveness_, [this, key, id, reply](const store::TaskRow& row) {
    {
      std::lock_guard lock(mu_);
      auto it = pending_results_.find(key);
      if (it == pending_results_.end()) return;  // given up with notifications/cancelled
      pending_results_.erase(it);
    }
    reply(make_result(id, task_result_json(row)));
  });
  std::optional<util::Result<protocol::Tasks::Awaited>> awaited;
  {
    // Registered under mu_ so a waiter firing at once finds its entry.
    std::lock_guard lock(mu_);
    awaited.emplace(tasks.await_result(tenant_, task_id, on_ready));
    if (*awaited && !(*awaited)->ready) pending_results_[key] = PendingResult{task_id, (*awaited)->waiter};
  }
  if (!*awaited) return fail(awaited->error());
  if ((*awaited)->ready) reply(make_result(id, task_result_json(*(*awaited)->ready)));
}

// tasks/get, tasks/update, tasks/cancel of the tasks extension (SEP-2663).
// There is no tasks/list or tasks/result: a result comes inlined in tasks/get.
// No task of this server ever waits for input, so tasks/update has nothing
// outstanding to answer: a known task's update is acknowledged and its
// inputResponses ignored, as the extension says of keys not outstanding.
void Session::handle_tasks_extension(const jsonrpc::Message& m, const Reply& reply) {
  protocol::Tasks& tasks = *server_.tasks;
  const json& p = m.params;
  if (!p.is_object() || !p.contains("taskId") || !p["taskId"].is_string())
    return reply(
        make_error(m.id, jsonrpc::kInvalidParams, "Invalid params: " + m.method + " needs a string \"taskId\""));
  if (m.method == "tasks/update" && (!p.contains("inputResponses") || !p["inputResponses"].is_object()))
    return reply(
        make_error(m.id, jsonrpc::kInvalidParams, "Invalid params: tasks/update needs an object \"inputResponses\""));
  const std::string task_id = p["taskId"].get<std::string>();
  auto fail = [&](const util::Error& e) {
    if (e.code == util::ErrorCode::kNotFound || e.code == util::ErrorCode::kInvalidArgument)
      return reply(make_error(m.id, jsonrpc::kInvalidParams, e.message));
    spdlog::error("{}: {}", m.method, e.message);
    reply(make_error(m.id, jsonrpc::kInternalError, "Internal error"));
  };
  auto row = tasks.get(tenant_, task_id);
  if (!row) return fail(row.error());
  if (m.method == "tasks/get")
    return reply(make_result(m.id, protocol::extension_task_json(*row, tasks.poll_interval_ms(), true)));
  if (m.method == "tasks/cancel" && row->status == "working") {
    // Ended meanwhile: the same acknowledgement (cancelling is idempotent).
    auto cancelled = tasks.cancel(tenant_, task_id);
    if (!cancelled && cancelled.error().code != util::ErrorCode::kInvalidArgument) return fail(cancelled.error());
  }
  reply(make_result(m.id, json::object()));
}

}  // namespace protocol::mcp

namespace protocol::mcp {

void Session::handle_resources_read(const jsonrpc::Message& m, const Reply& reply, int not_found_code) {
  const json& p = m.params;
  if (!p.is_object() || !p.contains("uri") || !p["uri"].is_string())
    return reply(make_error(m.id, jsonrpc::kInvalidParams, "Invalid params: resources/read needs a string \"uri\""));
  std::string uri = p["uri"].get<std::string>();
  // The run view: the same page for every tenant (it names no job).
  if (uri == view::kRunViewUri)
    return reply(
        make_result(m.id, {{"contents", json::array({view::run_view_contents(server_.broker.receipt_key())})}}));
  const std::optional<store::ArtifactPart> part = store::artifact_part_from_uri(uri);
  std::string id = part ? part->artifact_id : store::artifact_id_from_uri(uri);
  const uint64_t max = server_.policy.get()->limits.artifact_inline_max_bytes;
  // Unknown, malformed and foreign URIs give one and the same answer, and so
  // does a part beyond the last (or of an artifact small enough to read whole).
  auto rec = id.empty() ? util::Result<store::ArtifactRecord>(util::make_error(util::ErrorCode::kNotFound, ""))
                        : server_.store.get_artifact(tenant_, id);
  const uint64_t parts = rec && rec->size > max ? store::artifact_parts(rec->size, max) : 0;
  if (!rec || (part && part->index >= parts))
    return reply(make_error(m.id, not_found_code, "Resource not found", {{"uri", uri}}));
  if (part) {
    // Exactly `max` raw bytes from k * max, read from there; always a blob,
    // so a cut through a UTF-8 character of a text artifact is harmless.
    auto bytes = server_.store.read_blob_range(rec->blob_path, part->index * max, max);
    if (!bytes) {
      spdlog::error("resources/read {}: {}", uri, bytes.error().message);
      return reply(make_error(m.id, jsonrpc::kInternalError, "Internal error reading the resource"));
    }
    json item{{"uri", uri}, {"mimeType", rec->media_type}, {"blob", util::base64_encode(*bytes)}};
    return reply(make_result(m.id, {{"contents", json::array({item})}}));
  }
  if (rec->size > max) {
    const std::string pattern = store::artifact_uri(rec->artifact_id) + "/parts/<k>";
    return reply(make_error(m.id, jsonrpc::kInvalidParams,
                            "resource is " + std::to_string(rec->size) + " bytes, above the inline limit of " +
                                std::to_string(max) + " bytes: read it in " + std::to_string(parts) + " parts at " +
                                pattern + " for k = 0 to " + std::to_string(parts - 1),
                            {{"uri", uri},
                             {"size", rec->size},
                             {"parts", parts},
                             {"part_bytes", max},
                             {"part_uri_template", store::artifact_uri(rec->artifact_id) + "/parts/{part}"}}));
  }
  auto bytes = server_.store.read_blob(rec->blob_path, max);
  if (!bytes) {
    spdlog::error("resources/read {}: {}", uri, bytes.error().message);
    return reply(make_error(m.id, jsonrpc::kInternalError, "Internal error reading the resource"));
  }
  json item{{"uri", uri}, {"mimeType", rec->media_type}};
  if (store::is_text_media_type(rec->media_type))
    item["text"] = *bytes;
  else
    item["blob"] = util::base64_encode(*bytes);
  reply(make_result(m.id, {{"contents", json::array({item})}}));
}

}  // namespace protocol::mcp
