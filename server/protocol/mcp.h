// One MCP session: lifecycle, tools/list, tools/call and tasks/* dispatch.
// Called by a transport's reader thread; tools/call runs on the session's pool
// (a task-augmented one on the task registry's) so a slow run_code never holds
// up ping or tools/list. Responses may leave out of order.
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/broker/audit.h"
#include "server/broker/tasks.h"
#include "server/protocol/jsonrpc.h"
#include "server/util/worker_pool.h"
#include "tools/registry.h"

namespace protocol::mcp {

using nlohmann::json;

inline constexpr const char* kSupportedVersions[] = {"2025-03-26", "2025-06-18", "2025-11-25"};
inline constexpr const char* kLatestVersion = "2025-11-25";

// Chooses the client's version when supported, else the newest we speak.
std::string negotiate_version(const std::string& requested);
std::string instructions_text(const policy::Policy& policy);

// Where a session's outgoing messages go; thread-safe.
class Outbox {
 public:
  virtual ~Outbox() = default;
  virtual void send(const json& message) = 0;
};

struct ServerContext {
  const policy::Policy& policy;
  store::Store& store;
  broker::Jobs& jobs;
  const tools::Registry& tools;
  broker::Audit* audit = nullptr;  // one record per tools/call when set
  broker::Tasks* tasks = nullptr;  // MCP tasks for 2025-11-25 sessions when set
};

// The protocol version that has tasks (MCP 2025-11-25, basic/utilities/tasks).
inline constexpr const char* kTasksVersion = "2025-11-25";

// Callbacks that may outlive a session (task progress, status, tasks/result
// waiters) run only while `alive`, under `mu`; the session's destructor
// clears it, waiting for a callback in progress.
struct Liveness {
  std::mutex mu;
  bool alive = true;
};

class Session {
 public:
  Session(ServerContext& server, Outbox& outbox, std::string tenant);
  ~Session();

  void handle_line(std::string_view line);
  // The same for a message the transport already parsed (with the same limits).
  void handle_parsed(jsonrpc::Parsed parsed);
  void handle_oversized(size_t bytes);
  // Waits for every in-flight tools/call to answer.
  void drain();
  // The negotiated protocol version; "" before initialize was answered.
  std::string version();

 private:
  using Reply = std::function<void(json)>;
  void handle_message(const jsonrpc::Message& m, const Reply& reply);
  void handle_initialize(const jsonrpc::Message& m, const Reply& reply);
  void handle_tools_call(const jsonrpc::Message& m, const Reply& reply);
  void handle_resources_read(const jsonrpc::Message& m, const Reply& reply);
  void start_task(const jsonrpc::Message& m, const tools::Tool& tool, const std::string& name, json args,
                  const Reply& reply);
  void handle_tasks(const jsonrpc::Message& m, const Reply& reply);
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
  // tasks/result requests waiting for their task to end, by JSON id.
  std::map<std::string, PendingResult> pending_results_;
  std::shared_ptr<Liveness> liveness_ = std::make_shared<Liveness>();
  // tools/list's array, without and with taskSupport; null until first asked.
  const json& tools_list(bool with_task_support);
  json tools_list_[2];
  util::WorkerPool pool_;
};

}  // namespace protocol::mcp
