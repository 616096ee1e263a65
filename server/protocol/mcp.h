// One MCP session: lifecycle, tools/*, resources/* and tasks/* dispatch, and the
// stateless 2026-07-28 requests of a session never initialized. Called by a
// transport's reader thread; tools/call runs on a call pool (the server's, or
// the session's own) so a slow run_code never holds up tools/list. Responses
// may leave out of order.
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/protocol/audit.h"
#include "server/protocol/tasks.h"
#include "server/policy/live.h"
#include "server/protocol/jsonrpc.h"
#include "server/protocol/logging.h"
#include "server/util/reloads.h"
#include "server/util/worker_pool.h"
#include "tools/registry.h"

namespace protocol::mcp {

using nlohmann::json;

// Legacy revisions: a session opened by the initialize handshake.
inline constexpr const char* kSupportedVersions[] = {"2025-03-26", "2025-06-18", "2025-11-25"};
inline constexpr const char* kLatestVersion = "2025-11-25";
// Modern revision: no handshake, the version and client capabilities ride in
// every request's _meta (MCP 2026-07-28, basic/versioning).
inline constexpr const char* kStatelessVersion = "2026-07-28";
// JSON-RPC batching was removed from MCP in 2025-06-18; 2025-03-26 still has
// it. The refusal's text, for the session and the HTTP transport alike.
inline bool batches_supported(std::string_view version) { return version == "2025-03-26"; }
std::string batch_refusal(const std::string& version);
inline constexpr const char* kMetaProtocolVersion = "io.modelcontextprotocol/protocolVersion";
inline constexpr const char* kMetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities";
inline constexpr const char* kMetaServerInfo = "io.modelcontextprotocol/serverInfo";

// MCP 2026-07-28 error codes (basic/index, error codes).
constexpr int kHeaderMismatch = -32020;
constexpr int kMissingRequiredClientCapability = -32021;
constexpr int kUnsupportedProtocolVersion = -32022;

// Chooses the client's version when supported, else the newest we speak.
std::string negotiate_version(const std::string& requested);
// Every version this server speaks, newest first (server/discover, -32022's data).
nlohmann::json supported_versions();
// The request's _meta protocol version (any JSON type), or null when absent:
// present means a stateless 2026-07-28-style request.
nlohmann::json request_version(const nlohmann::json& params);
// What a 2026-07-28 request's _meta lacks of its required keys (the
// protocol version, the client capabilities object), as an Invalid params
// message; nullopt when both are there.
std::optional<std::string> stateless_meta_problem(const nlohmann::json& params);
// UnsupportedProtocolVersionError for `requested` (a JSON value, shown as sent).
nlohmann::json unsupported_version_error(const nlohmann::json& id, const nlohmann::json& requested);
std::string instructions_text(const policy::Policy& policy);

// Where a session's outgoing messages go; thread-safe.
class Outbox {
 public:
  virtual ~Outbox() = default;
  virtual void send(const json& message) = 0;
};

struct ServerContext {
  policy::Live& policy;  // the policy in force: a call keeps the snapshot it started with
  store::Store& store;
  broker::Broker& broker;
  const tools::Registry& tools;
  protocol::Audit* audit = nullptr;  // one record per tools/call when set
  protocol::Tasks* tasks = nullptr;  // MCP tasks for 2025-11-25 sessions when set
  // Threads for tools/call shared by every session when set (HTTP); else each
  // session starts its own, at most its quota (stdio's one session).
  util::CallPool* calls = nullptr;
  // What a reload (SIGHUP) runs, when set; a transport adds its own steps.
  util::Reloads* reloads = nullptr;
};

// The protocol version that has tasks (MCP 2025-11-25, basic/utilities/tasks).
inline constexpr const char* kTasksVersion = "2025-11-25";
// From 2026-07-28 tasks are an extension a request opts into in its
// _meta client capabilities (io.modelcontextprotocol/tasks, SEP-2663).
inline constexpr const char* kTasksExtension = "io.modelcontextprotocol/tasks";

// Callbacks that may outlive a session (task progress, status, tasks/result
// waiters) run only while `alive`, under `mu`; the session's destructor
// clears it, waiting for a callback in progress.
struct Liveness {
  std::mutex mu;
  bool alive = true;
};

class Session {
 public:
  // Quota: `calls_max` tools/call running at once (0: the policy's
  // concurrent_calls_max; a per-request session of the HTTP transport needs
  // one), four times as many waiting; beyond them a call is answered busy.
  Session(ServerContext& server, Outbox& outbox, std::string tenant, int calls_max = 0);
  ~Session();

  void handle_line(std::string_view line);
  // The same for a message the transport already parsed (with the same limits).
  void handle_parsed(jsonrpc::Parsed parsed);
  // A message over the cap, dropped unread; id as the transport's scan read it (else null).
  void handle_oversized(size_t bytes, const json& id = nullptr);
  // Waits for every in-flight tools/call to answer.
  void drain();
  // Cancels every in-flight tools/call (the server is stopping); each still answers.
  void cancel_all();
  // The negotiated protocol version; "" before initialize was answered.
  std::string version();

 private:
  using Reply = std::function<void(json)>;
  void handle_message(const jsonrpc::Message& m, const Reply& reply);
  void handle_initialize(const jsonrpc::Message& m, const Reply& reply);
  void handle_stateless(const jsonrpc::Message& m, const Reply& reply);
  // extension_task: the request declared the tasks extension (2026-07-28), so
  // a tool that can run as a task does.
  void handle_tools_call(const jsonrpc::Message& m, const Reply& reply, bool extension_task = false);
  void handle_resources_read(const jsonrpc::Message& m, const Reply& reply, int not_found_code);
  // How a task is shown: MCP 2025-11-25's tasks, or the 2026-07-28 extension's.
  enum class TaskWire { kCore, kExtension };
  void start_task(const jsonrpc::Message& m, std::shared_ptr<const tools::Tool> tool, const std::string& name,
                  json args, std::optional<double> ttl_ms, TaskWire shape, const Reply& reply);
  void handle_tasks(const jsonrpc::Message& m, const Reply& reply);
  void handle_tasks_extension(const jsonrpc::Message& m, const Reply& reply);
  bool tasks_enabled();

  struct PendingResult {
    std::string task_id;
    uint64_t waiter = 0;
  };

  ServerContext& server_;
  Outbox& outbox_;
  std::string tenant_;
  jsonrpc::Limits limits_;
  std::mutex mu_;
  bool initialize_answered_ = false;
  std::string version_;
  // tools/call requests in flight, by JSON id, for notifications/cancelled.
  std::map<std::string, std::shared_ptr<broker::Cancellation>> in_flight_;
  std::atomic<bool> stopping_{false};  // cancel_all: cancelled calls still answer
  // tasks/result requests waiting for their task to end, by JSON id.
  std::map<std::string, PendingResult> pending_results_;
  std::shared_ptr<Liveness> liveness_ = std::make_shared<Liveness>();
  // logging/setLevel's level; shared with tasks, which outlive the session.
  std::shared_ptr<logging::Threshold> log_threshold_ = std::make_shared<logging::Threshold>();
  // tools/list's array, without and with taskSupport, without and with the
  // run view (index: task support + 2 * view); null until first asked.
  const json& tools_list(bool with_task_support, bool with_view);
  json tools_list_[4];
  bool view_ = false;  // the client declared MCP Apps (io.modelcontextprotocol/ui) at initialize
  std::unique_ptr<util::CallPool> own_calls_;    // when the server has no shared pool
  std::unique_ptr<util::CallPool::Lane> calls_;  // this session's quota; ends before own_calls_
};

}  // namespace protocol::mcp
