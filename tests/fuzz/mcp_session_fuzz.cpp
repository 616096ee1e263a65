// A protocol::mcp::Session fed the input's lines as client messages, with the
// real tools, store, gate and tasks registry and a broker that starts no
// sandbox (tests/fakes/fake_broker.h). It never throws; each
// request id is answered once (or not at all once cancelled); every message
// out is JSON-RPC 2.0, strict UTF-8, with a documented error code; no job
// starts before initialize but for a stateless 2026-07-28 request.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/spdlog.h>
#include <stdlib.h>  // mkdtemp

#include "server/artifacts/inspect.h"
#include "server/broker/ledger.h"
#include "server/protocol/tasks.h"
#include "server/policy/live.h"
#include "server/policy/policy.h"
#include "server/protocol/jsonrpc.h"
#include "server/protocol/mcp.h"
#include "server/store/store.h"
#include "server/util/worker_pool.h"
#include "tests/fakes/fake_broker.h"
#include "tests/fuzz/check.h"
#include "tools/registry.h"

namespace jsonrpc = protocol::jsonrpc;
namespace mcp = protocol::mcp;
using nlohmann::json;

namespace {

constexpr size_t kLinesMax = 64;
// A fresh state directory and tasks database every so many inputs, so a long
// campaign does not fill the disk with uploads and task rows.
constexpr uint64_t kEpochInputs = 1024;

// Placeholders a line may hold for handles only the server knows.
struct Handles {
  std::string text_artifact, binary_artifact, input, task;
};

std::string substitute(std::string line, const Handles& h) {
  const std::pair<const char*, const std::string*> table[] = {
      {"$ART", &h.text_artifact}, {"$BIN", &h.binary_artifact}, {"$INP", &h.input}, {"$TASK", &h.task}};
  for (auto& [token, value] : table) {
    const std::string_view t(token);
    for (size_t at = line.find(t); at != std::string::npos; at = line.find(t, at + value->size()))
      line.replace(at, t.size(), *value);
  }
  return line;
}

class Capture : public mcp::Outbox {
 public:
  void send(const json& message) override {
    std::lock_guard lock(mu_);
    messages_.push_back(message);
  }
  std::vector<json> take() {
    std::lock_guard lock(mu_);
    std::vector<json> out;
    out.swap(messages_);
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<json> messages_;
};

// What the fake broker checks each job against; set by the reader before a line.
struct JobWatch {
  std::mutex mu;
  bool may_start = false;
  std::string tenant;
  std::string artifact;
};

artifacts::InProcessGate make_gate(const policy::Policy& p) {
  auto gate = artifacts::InProcessGate::create(
      {p.artifacts.allowed_media_types, p.artifacts.file_max_bytes,
       p.artifacts.csv_reject ? artifacts::csv::Mode::kReject : artifacts::csv::Mode::kNeutralise,
       p.artifacts.active_content_as_text});
  FUZZ_CHECK(gate.ok());
  return std::move(*gate);
}

util::Result<broker::JobResult> fake_run(JobWatch& watch, const policy::Policy& policy, const broker::JobRequest& r) {
  std::string artifact;
  {
    std::lock_guard lock(watch.mu);
    FUZZ_CHECK(watch.may_start);
    FUZZ_CHECK(r.tenant == watch.tenant);
    artifact = watch.artifact;
  }
  if (!policy.find_runtime(r.runtime))
    return util::make_error(util::ErrorCode::kInvalidArgument, "runtime: unknown runtime " + r.runtime);
  if (r.on_progress) r.on_progress({{"elapsed_ms", 1500}, {"stdout_bytes", 3}, {"last_line", "ok"}});
  broker::JobResult result;
  result.job_id = "fuzzjob";
  sandbox::Outcome& o = result.outcome;
  const bool cancelled = r.cancel && r.cancel->requested();
  o.status = cancelled ? sandbox::Status::cancelled : sandbox::Status::completed;
  o.exited = !cancelled;
  o.stdout_text = "ok\n";
  o.layers = {"namespaces", "seccomp"};
  broker::ArtifactSummary a;
  a.artifact_id = artifact;
  a.name = "out.csv";
  a.media_type = "text/csv";
  a.size = 4;
  a.verdict = artifacts::VerdictKind::kAccepted;
  a.reason = "allowed type";
  result.artifacts.push_back(a);
  return result;
}

struct Env {
  std::string dir;
  policy::Policy policy;
  policy::Live live;
  JobWatch watch;
  artifacts::InProcessGate gate;
  fakes::FakeBroker jobs;
  tools::Registry registry;
  util::CallPool calls;
  uint64_t inputs = 0;
  std::unique_ptr<store::Store> store;
  std::unique_ptr<protocol::Tasks> tasks;
  std::unique_ptr<broker::Ledger> ws_ledger;
  std::unique_ptr<broker::Workspaces> workspaces;
  std::unique_ptr<mcp::ServerContext> ctx;

  explicit Env(policy::Policy p)
      : dir(make_dir()),
        policy(std::move(p)),
        live(std::make_shared<const policy::Policy>(policy)),
        gate(make_gate(policy)),
        jobs([this](const broker::JobRequest& r) { return fake_run(watch, policy, r); },
             [this](const std::string& name, const std::string& content) {
               return artifacts::upload_media_type(name, content, gate.sniffer(),
                                                   gate.gate().policy().allowed_media_types);
             }),
        registry(tools::make_registry(policy)),
        calls(static_cast<size_t>(policy.server.concurrent_calls_max)) {
    new_epoch();
  }
  ~Env() {
    ctx.reset();
    workspaces.reset();
    ws_ledger.reset();
    tasks.reset();
    store.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  static std::string make_dir() {
    std::string tmpl = std::filesystem::is_directory("/dev/shm") ? "/dev/shm/throwbox-mcp-fuzz-XXXXXX"
                                                                 : "/tmp/throwbox-mcp-fuzz-XXXXXX";
    FUZZ_CHECK(::mkdtemp(tmpl.data()) != nullptr);
    return tmpl;
  }

  void new_epoch() {
    ctx.reset();
    jobs.set_workspaces(nullptr);
    workspaces.reset();
    ws_ledger.reset();
    tasks.reset();
    store.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir + "/state", ec);
    std::filesystem::create_directories(dir + "/state", ec);
    FUZZ_CHECK(!ec);
    store = std::make_unique<store::Store>(dir + "/state");
    auto ledger = broker::Ledger::open(dir + "/state/tasks.sqlite3");
    FUZZ_CHECK(ledger.ok());
    tasks = std::make_unique<protocol::Tasks>(std::move(*ledger), protocol::tasks_options(policy));
    auto wl = broker::Ledger::open(dir + "/state/workspaces.sqlite3");
    FUZZ_CHECK(wl.ok());
    ws_ledger = std::move(*wl);
    workspaces = std::make_unique<broker::Workspaces>(policy.workspaces, dir + "/state/workspaces", *ws_ledger);
    jobs.set_workspaces(workspaces.get());
    ctx = std::make_unique<mcp::ServerContext>(
        mcp::ServerContext{live, *store, jobs, registry, nullptr, tasks.get(), &calls});
  }

  // A tenant of its own for each input (tasks and uploads never carry over),
  // with an input and two artifacts to find.
  Handles begin_input(std::string& tenant) {
    if (++inputs % kEpochInputs == 0) new_epoch();
    tenant = "f" + std::to_string(inputs);
    Handles h;
    auto in = store->put_input(tenant, "data.csv", "a,b\n1,2\n", "text/csv");
    FUZZ_CHECK(in.ok());
    h.input = in->input_id;
    store::ArtifactRecord text{"", "fuzzjob", "out.csv", 0, "", "text/csv", "accepted", "allowed type", ""};
    auto t = store->put_artifact(tenant, text, "x,y\n");
    FUZZ_CHECK(t.ok());
    h.text_artifact = t->artifact_id;
    store::ArtifactRecord binary{"", "fuzzjob", "plot.png", 0, "", "image/png", "accepted", "allowed type", ""};
    auto b = store->put_artifact(tenant, binary, std::string("\x89PNG\r\n\x1a\n\0\xff", 10));
    FUZZ_CHECK(b.ok());
    h.binary_artifact = b->artifact_id;
    return h;
  }
};

Env& env() {
  static Env e = [] {
    spdlog::set_level(spdlog::level::off);
    auto p = policy::load_file(THROWBOX_SOURCE_DIR "/policies/default.json");
    FUZZ_CHECK(p.ok());
    return Env(std::move(*p));
  }();
  return e;
}

// A request the session may answer by running a job before initialize: the
// 2026-07-28 per-request _meta, with its version and client capabilities.
bool is_stateless(const jsonrpc::Message& m) {
  if (!m.params.is_object() || !m.params.contains("_meta") || !m.params["_meta"].is_object()) return false;
  const json& meta = m.params["_meta"];
  auto v = meta.find(mcp::kMetaProtocolVersion);
  auto caps = meta.find(mcp::kMetaClientCapabilities);
  return v != meta.end() && *v == mcp::kStatelessVersion && caps != meta.end() && caps->is_object();
}

bool documented_code(int code) {
  switch (code) {
    case jsonrpc::kParseError:
    case jsonrpc::kInvalidRequest:
    case jsonrpc::kMethodNotFound:
    case jsonrpc::kInvalidParams:
    case -32002:  // resource not found (MCP up to 2025-11-25)
    case mcp::kUnsupportedProtocolVersion:
      return true;
    default:  // kInternalError included: a healthy store and ledger never give it
      return false;
  }
}

// One message the server sent: a response with a string, integer or null id,
// or one of the notifications it sends. Returns the response's id, or
// nullopt for a notification.
std::optional<std::string> check_message(const json& m) {
  // MCP_SESSION_FUZZ_PRINT=1: each message out on stderr, to read a finding by.
  static const bool print = std::getenv("MCP_SESSION_FUZZ_PRINT") != nullptr;
  if (print) std::fprintf(stderr, "<- %s\n", m.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
  FUZZ_CHECK(m.is_object());
  try {
    (void)m.dump();  // strict: throws on invalid UTF-8
  } catch (const json::exception& e) {
    std::fprintf(stderr, "dump: %s\n", e.what());
    FUZZ_CHECK(!"a message that is not valid UTF-8");
  }
  FUZZ_CHECK(m.value("jsonrpc", "") == "2.0");
  if (m.contains("method")) {
    FUZZ_CHECK(!m.contains("id"));
    const std::string method = m["method"].get<std::string>();
    FUZZ_CHECK(method == "notifications/progress" || method == "notifications/tasks/status");
    FUZZ_CHECK(m.contains("params") && m["params"].is_object());
    return std::nullopt;
  }
  FUZZ_CHECK(m.contains("id"));
  const json& id = m["id"];
  FUZZ_CHECK(id.is_null() || id.is_string() || id.is_number_integer());
  FUZZ_CHECK(m.contains("result") != m.contains("error"));
  if (m.contains("result")) {
    FUZZ_CHECK(!id.is_null() && m["result"].is_object());
  } else {
    const json& e = m["error"];
    FUZZ_CHECK(e.is_object() && e.contains("code") && e["code"].is_number_integer());
    FUZZ_CHECK(e.contains("message") && e["message"].is_string());
    FUZZ_CHECK(documented_code(e["code"].get<int>()));
  }
  return id.dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Env& e = env();
  std::string tenant;
  Handles handles = e.begin_input(tenant);
  const jsonrpc::Limits limits{e.policy.server.message_max_bytes, e.policy.server.json_max_depth};
  Capture out;
  std::map<std::string, int> expected, answered;  // by id.dump()
  std::set<std::string> cancelled;
  {
    mcp::Session session(*e.ctx, out, tenant);
    std::string_view rest(reinterpret_cast<const char*>(data), size);
    for (size_t n = 0; n < kLinesMax && !rest.empty(); ++n) {
      const size_t end = rest.find('\n');
      const std::string line = substitute(std::string(rest.substr(0, end)), handles);
      rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);

      // What the line asks for, read as the session reads it.
      const std::string version = session.version();
      jsonrpc::Parsed parsed = jsonrpc::parse_line(line, limits);
      bool may_start = !version.empty();
      std::optional<std::pair<json, std::string>> initialize;  // its id and protocolVersion
      if (parsed.whole_line_failed || (parsed.is_batch && !mcp::batches_supported(version))) {
        ++expected[json(parsed.whole_line_failed ? std::get<jsonrpc::Failure>(parsed.items[0]).id : json()).dump()];
      } else {
        for (auto& item : parsed.items) {
          if (auto* f = std::get_if<jsonrpc::Failure>(&item)) {
            ++expected[f->id.dump()];
            continue;
          }
          auto& m = std::get<jsonrpc::Message>(item);
          if (m.kind == jsonrpc::Message::Kind::kRequest) {
            ++expected[m.id.dump()];
            if (!parsed.is_batch && is_stateless(m)) may_start = true;
            if (!parsed.is_batch && m.method == "initialize" && m.params.is_object() &&
                m.params.contains("protocolVersion") && m.params["protocolVersion"].is_string())
              initialize.emplace(m.id, m.params["protocolVersion"].get<std::string>());
          } else if (m.kind == jsonrpc::Message::Kind::kNotification && m.method == "notifications/cancelled" &&
                     m.params.is_object() && m.params.contains("requestId")) {
            cancelled.insert(m.params["requestId"].dump());
          }
        }
      }
      {
        std::lock_guard lock(e.watch.mu);
        e.watch.may_start = may_start;
        e.watch.tenant = tenant;
        e.watch.artifact = handles.text_artifact;
      }

      try {
        session.handle_line(line);
      } catch (const std::exception& x) {
        std::fprintf(stderr, "handle_line threw: %s\n", x.what());
        FUZZ_CHECK(!"handle_line threw");
      }
      session.drain();
      e.tasks->drain();  // tasks/result waiters answer from the task's thread

      for (const json& sent : out.take()) {
        const bool batch = sent.is_array();
        FUZZ_CHECK(!batch || (parsed.is_batch && !sent.empty()));
        for (const json& m : batch ? sent : json::array({sent})) {
          auto id = check_message(m);
          if (!id) continue;
          ++answered[*id];
          if (m.contains("result") && m["result"].contains("task") && m["result"]["task"].is_object() &&
              m["result"]["task"].contains("taskId"))
            handles.task = m["result"]["task"]["taskId"].get<std::string>();
          // Negotiation: the client's version when we speak it, else our latest.
          if (initialize && m["id"] == initialize->first && m.contains("result")) {
            bool known = false;
            for (const char* v : mcp::kSupportedVersions) known = known || initialize->second == v;
            FUZZ_CHECK(m["result"]["protocolVersion"] == (known ? initialize->second : mcp::kLatestVersion));
          }
        }
      }
    }
  }
  // Everything has answered: the session drained as it ended.
  for (const json& sent : out.take())
    for (const json& m : sent.is_array() ? sent : json::array({sent}))
      if (auto id = check_message(m)) ++answered[*id];
  std::set<std::string> ids;
  for (auto& [id, _] : expected) ids.insert(id);
  for (auto& [id, _] : answered) ids.insert(id);
  for (const std::string& id : ids) {
    const int want = expected[id], got = answered[id];
    if (cancelled.count(id))
      FUZZ_CHECK(got <= want);
    else if (got != want) {
      std::fprintf(stderr, "id %s: %d request(s), %d response(s)\n", id.c_str(), want, got);
      FUZZ_CHECK(got == want);
    }
  }
  return 0;
}
