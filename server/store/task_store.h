// Where MCP tasks are kept: the rows protocol::Tasks (server/protocol/tasks.h)
// reads and writes, and the store behind them (the job ledger implements it,
// server/broker/ledger.h). Every read takes the tenant and skips terminal rows
// past expires_ms. Thread-safe.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/util/result.h"

namespace store {

// One MCP task (tasks/get's Task plus what the server keeps about it).
struct TaskRow {
  std::string task_id;
  std::string tenant;
  std::string tool;
  std::string status = "working";  // working, completed, failed, cancelled
  std::string status_message;
  int64_t created_ms = 0;  // wall clock, ms since the epoch
  int64_t updated_ms = 0;  // last status change
  int64_t ttl_ms = 0;      // as granted (reported to the client)
  int64_t expires_ms = 0;  // a terminal row is deleted after this
  nlohmann::json result;   // the CallToolResult; null while none
};

class TaskStore {
 public:
  virtual ~TaskStore() = default;
  virtual util::Status task_insert(const TaskRow& row) = 0;
  // working -> a terminal status; false when the row was no longer working.
  virtual util::Result<bool> task_finish(const TaskRow& row) = 0;
  // Replaces the result only (a cancelled task's late tool result).
  virtual util::Status task_set_result(const std::string& task_id, const nlohmann::json& result) = 0;
  virtual util::Status task_delete(const std::string& task_id) = 0;
  virtual std::optional<TaskRow> task_find(const std::string& tenant, const std::string& task_id, int64_t now_ms) = 0;
  // In creation order, strictly after (after_created_ms, after_task_id).
  virtual std::vector<TaskRow> task_list(const std::string& tenant, int64_t after_created_ms,
                                         const std::string& after_task_id, size_t limit, int64_t now_ms) = 0;
  virtual uint64_t task_count(const std::string& tenant, int64_t now_ms) = 0;
  // At start-up: tasks a crash left working become failed with `result`,
  // kept at least until now_ms + keep_ms.
  virtual size_t task_fail_interrupted(const std::string& message, const nlohmann::json& result, int64_t now_ms,
                                       int64_t keep_ms) = 0;
  // Deletes terminal tasks past their expiry; "" means every tenant.
  virtual size_t task_expire(const std::string& tenant, int64_t now_ms) = 0;
  // Shared with other servers: a task may run on any of them, and be read,
  // awaited or cancelled through any.
  virtual bool shared() const = 0;
  // Of these tasks, the rows no longer working (one round trip).
  virtual std::vector<TaskRow> tasks_ended(const std::vector<std::string>& task_ids) = 0;
};

}  // namespace store
