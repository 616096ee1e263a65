// MCP tasks (2025-11-25): a task-augmented tools/call runs in the background on
// this registry's own pool (a task outlives the session that made it) and is
// polled, awaited, listed and cancelled by taskId. Every lookup takes the
// tenant; rows live in the ledger database. Callbacks run without its lock.
#pragma once
#include <array>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/broker/job.h"
#include "server/store/task_store.h"
#include "server/policy/policy.h"
#include "server/util/periodic.h"
#include "server/util/result.h"
#include "server/util/worker_pool.h"

namespace protocol {

using broker::Cancellation;
using store::TaskRow;

// One answer for unknown, expired, malformed and foreign ids alike.
inline constexpr const char* kTaskNotFound =
    "Failed to retrieve task: unknown taskId (it does not exist, has expired, or belongs to another tenant)";
inline constexpr const char* kTaskInterrupted = "the server stopped while the task ran";

struct TasksOptions {
  int64_t ttl_default_ms = 3600 * 1000;
  int64_t ttl_max_ms = 86400 * 1000;
  uint64_t per_tenant_max = 256;  // retained tasks, any status
  int workers = 20;               // tasks running at once; more wait in the queue
  size_t queue_max = 20;
  int64_t poll_interval_ms = 1000;     // suggested to clients
  int64_t keep_after_end_ms = 60'000;  // a result outlives a ttl that ran out mid-job
  uint64_t janitor_interval_s = 300;
  int64_t watch_interval_ms = 250;  // shared ledger: how often ends elsewhere are looked for
  size_t page_size = 100;           // tasks/list
  std::function<int64_t()> now_ms;  // wall clock; tests move it
};
TasksOptions tasks_options(const policy::Policy& policy);

// The MCP Task object of a row (tasks/get, tasks/list, CreateTaskResult.task).
nlohmann::json task_json(const TaskRow& row, int64_t poll_interval_ms);
// The same row as the tasks extension (io.modelcontextprotocol/tasks, MCP
// 2026-07-28) shows it: ttlMs and pollIntervalMs; a tool that answered with
// isError is "completed" (its result says so), "failed" is kept for a task the
// server could not finish (a JSON-RPC error). `detailed` (tasks/get) inlines
// the result of a completed task and the error of a failed one.
nlohmann::json extension_task_json(const TaskRow& row, int64_t poll_interval_ms, bool detailed);
// "job <id> completed, exit 0", or the error text of an isError result.
std::string task_status_message(const nlohmann::json& call_result);
// A CallToolResult with isError and one text item.
nlohmann::json error_call_result(const std::string& message);

class Tasks {
 public:
  // The task's work: returns its CallToolResult. `cancel` fires on tasks/cancel.
  using Work = std::function<nlohmann::json(const std::shared_ptr<Cancellation>& cancel, const std::string& task_id)>;
  // Told the row once it is terminal (with its result).
  using Listener = std::function<void(const TaskRow& row)>;

  struct Page {
    std::vector<TaskRow> tasks;
    std::string next_cursor;  // "" on the last page
  };
  struct Awaited {
    std::optional<TaskRow> ready;  // terminal already: no waiter was registered
    uint64_t waiter = 0;
  };

  // Fails the tasks a crash left working, then starts the janitor.
  Tasks(std::unique_ptr<store::TaskStore> ledger, TasksOptions options);
  ~Tasks();  // waits for running tasks
  Tasks(const Tasks&) = delete;
  Tasks& operator=(const Tasks&) = delete;

  // A reload's admission.tasks_per_tenant_max, for the tasks started from now on.
  void set_per_tenant_max(uint64_t per_tenant_max);
  // Errors: "busy" (tenant cap or a full pool), "internal".
  util::Result<TaskRow> start(const std::string& tenant, const std::string& tool, std::optional<double> ttl_ms,
                              Work work, Listener on_terminal = {});
  // Errors below: "not_found" (kTaskNotFound), "invalid_argument", "internal".
  util::Result<TaskRow> get(const std::string& tenant, const std::string& task_id);
  util::Result<Page> list(const std::string& tenant, const std::string& cursor);
  // Kills the work and makes the task cancelled before returning.
  util::Result<TaskRow> cancel(const std::string& tenant, const std::string& task_id);
  // tasks/result: the terminal row now, or `on_ready` later from another thread.
  util::Result<Awaited> await_result(const std::string& tenant, const std::string& task_id, Listener on_ready);
  void forget_waiter(const std::string& tenant, const std::string& task_id, uint64_t waiter);
  // Deletes terminal tasks past their expiry; the janitor calls it too.
  size_t expire();
  // Blocks until every started task has ended.
  void drain();
  size_t running();
  int64_t poll_interval_ms() const { return options_.poll_interval_ms; }

 private:
  struct Live;
  // A tasks/result here for a task working on another server (shared ledger).
  struct Remote {
    std::string tenant;
    std::string task_id;
    uint64_t waiter = 0;
    Listener on_ready;
  };
  void run(const std::string& task_id, const Work& work, const std::shared_ptr<Cancellation>& cancel);
  std::optional<TaskRow> find(const std::string& tenant, const std::string& task_id, int64_t now);
  // Shared ledger: every watch interval, which of the tasks awaited here or
  // running here ended in the ledger; the awaited are told, a running one
  // cancelled through another server is cancelled here.
  void watch();
  std::mutex& tenant_lock(const std::string& tenant);

  std::unique_ptr<store::TaskStore> ledger_;
  TasksOptions options_;
  // Status changes (with their ledger writes) and the maps below. Reads of
  // the ledger (get, list, awaiting) take no lock.
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Live>> live_;  // working tasks of this process, by id
  std::vector<Remote> remote_;                         // under mu_
  uint64_t next_waiter_ = 0;
  // A tenant's count-then-insert at start, one at a time per tenant (not one
  // at a time for all: those are database round trips).
  std::array<std::mutex, 32> tenant_locks_;
  // Declared last: destroyed first, so no task runs against freed members.
  util::WorkerPool pool_;
  util::Periodic janitor_;
  util::Periodic watcher_;  // shared ledger only
};

}  // namespace protocol
