// The task registry. One mutex orders every status change with its ledger
// write, so a cancel and a finishing job cannot both win; callbacks (waiters,
// status listeners) are called after it is released, never under it. Reads
// of the ledger (get, list, awaiting) take no lock, and a start holds only
// its tenant's.
#include "server/protocol/tasks.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <spdlog/spdlog.h>

#include "server/util/base64.h"
#include "server/util/random.h"
#include "server/util/text.h"
#include "server/util/wall_clock.h"

namespace protocol {

using nlohmann::json;

namespace {

constexpr size_t kStatusMessageMaxBytes = 1024;

using util::iso8601;
using util::wall_ms;

// Ids are util::random_id(): 32 lowercase hex digits. Anything else is unknown.
bool well_formed_id(const std::string& id) {
  return id.size() == 32 && id.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// The cursor names the last task of a page; clients treat it as opaque.
std::string encode_cursor(const TaskRow& last) {
  return util::base64_encode(std::to_string(last.created_ms) + "." + last.task_id);
}

bool decode_cursor(const std::string& cursor, int64_t& created_ms, std::string& task_id) {
  auto text = util::base64_decode(cursor);
  if (!text) return false;
  size_t dot = text->find('.');
  if (dot == 0 || dot == std::string::npos || dot > 18) return false;
  std::string digits = text->substr(0, dot);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return false;
  task_id = text->substr(dot + 1);
  if (!well_formed_id(task_id)) return false;
  created_ms = std::stoll(digits);
  return true;
}

util::Error not_found() { return util::make_error(util::ErrorCode::kNotFound, kTaskNotFound); }

}  // namespace

struct Tasks::Live {
  std::string tenant;
  std::string tool;
  int64_t created_ms = 0;
  int64_t ttl_ms = 0;
  std::shared_ptr<Cancellation> cancel;
  Listener on_terminal;
  std::vector<std::pair<uint64_t, Listener>> waiters;
  bool cancelled = false;  // by tasks/cancel: the row is already terminal
};

TasksOptions tasks_options(const policy::Policy& policy) {
  TasksOptions o;
  o.ttl_default_ms = static_cast<int64_t>(policy.retention.tasks_ttl_s) * 1000;
  o.ttl_max_ms = static_cast<int64_t>(policy.retention.tasks_ttl_max_s) * 1000;
  o.per_tenant_max = policy.admission.tasks_per_tenant_max;
  // One thread for every job the broker would admit (running or queued): a
  // task never waits for a thread while its job could run. Jobs still
  // answers busy beyond its own limits.
  o.workers = static_cast<int>(policy.admission.jobs_running_max + policy.admission.jobs_queued_max);
  o.queue_max = static_cast<size_t>(o.workers);
  o.janitor_interval_s = policy.retention.janitor_interval_s;
  return o;
}

json task_json(const TaskRow& row, int64_t poll_interval_ms) {
  json t{{"taskId", row.task_id},
         {"status", row.status},
         {"createdAt", iso8601(row.created_ms)},
         {"lastUpdatedAt", iso8601(row.updated_ms)},
         {"ttl", row.ttl_ms},
         {"pollInterval", poll_interval_ms}};
  if (!row.status_message.empty()) t["statusMessage"] = row.status_message;
  return t;
}

json extension_task_json(const TaskRow& row, int64_t poll_interval_ms, bool detailed) {
  // Only a task the server stopped under has no result of its tool.
  const bool interrupted = row.status == "failed" && row.status_message == kTaskInterrupted;
  const std::string status = row.status == "failed" && !interrupted ? "completed" : row.status;
  json t{{"taskId", row.task_id},
         {"status", status},
         {"createdAt", iso8601(row.created_ms)},
         {"lastUpdatedAt", iso8601(row.updated_ms)},
         {"ttlMs", row.ttl_ms},
         {"pollIntervalMs", poll_interval_ms}};
  if (!row.status_message.empty()) t["statusMessage"] = row.status_message;
  if (!detailed) return t;
  if (status == "completed")
    t["result"] = row.result.is_object() ? row.result : error_call_result("task " + row.task_id + " " + row.status);
  if (interrupted)
    t["error"] = {
        {"code", -32603},
        {"message", std::string("Internal error: ") + kTaskInterrupted + "; its job did not finish. Run it again."}};
  return t;
}

std::string task_status_message(const json& r) {
  if (!r.is_object()) return "failed";
  if (r.value("isError", false)) {
    for (auto& item : r.value("content", json::array()))
      if (item.is_object() && item.value("type", "") == "text" && item.contains("text") && item["text"].is_string())
        return std::string(util::utf8_prefix(item["text"].get_ref<const std::string&>(), kStatusMessageMaxBytes));
    return "failed";
  }
  const json sc = r.value("structuredContent", json::object());
  if (!sc.is_object() || !sc.contains("job_id") || !sc.contains("status")) return "completed";
  std::string m = "job " + sc.value("job_id", "") + " " + sc.value("status", "");
  if (sc.contains("exit_code") && sc["exit_code"].is_number_integer())
    m += ", exit " + std::to_string(sc["exit_code"].get<int64_t>());
  else if (sc.contains("signal") && sc["signal"].is_string())
    m += ", signal " + sc["signal"].get<std::string>();
  return m;
}

json error_call_result(const std::string& message) {
  return {{"content", json::array({{{"type", "text"}, {"text", message}}})}, {"isError", true}};
}

Tasks::Tasks(std::unique_ptr<store::TaskStore> ledger, TasksOptions options)
    : ledger_(std::move(ledger)), options_(std::move(options)), pool_(options_.workers, options_.queue_max) {
  if (!options_.now_ms) options_.now_ms = wall_ms;
  // Their work died with the old process (its runners with PR_SET_PDEATHSIG).
  size_t failed = ledger_->task_fail_interrupted(
      kTaskInterrupted, error_call_result(std::string(kTaskInterrupted) + "; its job did not finish. Run it again."),
      options_.now_ms(), options_.keep_after_end_ms);
  if (failed) spdlog::warn("{} task(s) were working when the server last stopped: recorded as failed", failed);
  janitor_ = util::Periodic(std::chrono::seconds(options_.janitor_interval_s), [this] { expire(); });
  if (ledger_->shared())
    watcher_ = util::Periodic(std::chrono::milliseconds(options_.watch_interval_ms), [this] { watch(); });
}

Tasks::~Tasks() {
  watcher_.stop();
  janitor_.stop();
  pool_.drain();
}

std::mutex& Tasks::tenant_lock(const std::string& tenant) {
  return tenant_locks_[std::hash<std::string>{}(tenant) % tenant_locks_.size()];
}

void Tasks::watch() {
  std::vector<std::string> ids;
  {
    std::lock_guard lock(mu_);
    for (const auto& r : remote_) ids.push_back(r.task_id);
    for (const auto& [id, live] : live_)
      if (!live->cancelled) ids.push_back(id);
  }
  if (ids.empty()) return;
  const std::vector<TaskRow> ended = ledger_->tasks_ended(ids);
  if (ended.empty()) return;
  std::vector<std::pair<Listener, TaskRow>> tell;
  {
    std::lock_guard lock(mu_);
    for (const TaskRow& row : ended) {
      for (auto it = remote_.begin(); it != remote_.end();) {
        if (it->task_id == row.task_id && it->tenant == row.tenant) {
          tell.emplace_back(std::move(it->on_ready), row);
          it = remote_.erase(it);
        } else {
          ++it;
        }
      }
      // Running here, cancelled through another server: killed as a
      // tasks/cancel here kills it.
      auto it = live_.find(row.task_id);
      if (it == live_.end() || row.status != "cancelled" || it->second->cancelled) continue;
      Live& live = *it->second;
      live.cancelled = true;
      live.cancel->cancel();
      for (auto& [_, w] : live.waiters) tell.emplace_back(std::move(w), row);
      live.waiters.clear();
      if (live.on_terminal) tell.emplace_back(std::move(live.on_terminal), row);
      live.on_terminal = nullptr;
      spdlog::info("task {} cancelled through another server", row.task_id);
    }
  }
  for (auto& [f, row] : tell) f(row);
}

void Tasks::set_per_tenant_max(uint64_t per_tenant_max) {
  std::lock_guard lock(mu_);
  options_.per_tenant_max = per_tenant_max;
}

util::Result<TaskRow> Tasks::start(const std::string& tenant, const std::string& tool, std::optional<double> ttl_ms,
                                   Work work, Listener on_terminal) {
  // The client may ask; the policy's ceiling decides (MCP tasks: receivers MAY override ttl).
  int64_t ttl = options_.ttl_default_ms;
  if (ttl_ms && std::isfinite(*ttl_ms) && *ttl_ms >= 0)
    ttl = *ttl_ms >= static_cast<double>(options_.ttl_max_ms) ? options_.ttl_max_ms : static_cast<int64_t>(*ttl_ms);
  auto cancel = std::make_shared<Cancellation>();
  TaskRow row;
  {
    std::lock_guard tenant_guard(tenant_lock(tenant));
    uint64_t per_tenant_max = 0;
    {
      std::lock_guard lock(mu_);
      per_tenant_max = options_.per_tenant_max;
    }
    const int64_t now = options_.now_ms();
    ledger_->task_expire(tenant, now);
    const uint64_t retained = ledger_->task_count(tenant, now);
    if (retained >= per_tenant_max)
      return util::make_error(util::ErrorCode::kBusy,
                              "busy: " + std::to_string(retained) +
                                  " tasks are retained for this tenant (the most is " + std::to_string(per_tenant_max) +
                                  "); fetch their results and wait for some to expire, or call without a task");
    row.task_id = util::random_id();
    row.tenant = tenant;
    row.tool = tool;
    row.status = "working";
    row.status_message = "running " + tool;
    row.created_ms = row.updated_ms = now;
    row.ttl_ms = ttl;
    row.expires_ms = now + ttl;
    // Known here before its row is in the ledger: whoever reads the row finds it running.
    auto live = std::make_unique<Live>();
    live->tenant = tenant;
    live->tool = tool;
    live->created_ms = now;
    live->ttl_ms = ttl;
    live->cancel = cancel;
    live->on_terminal = std::move(on_terminal);
    {
      std::lock_guard lock(mu_);
      live_[row.task_id] = std::move(live);
    }
    if (auto s = ledger_->task_insert(row); !s) {
      spdlog::error("task {}: {}", row.task_id, s.error().message);
      std::lock_guard lock(mu_);
      live_.erase(row.task_id);
      return util::make_error(util::ErrorCode::kInternal, s.error().message);
    }
  }
  const std::string id = row.task_id;
  if (!pool_.submit([this, id, work = std::move(work), cancel] { run(id, work, cancel); })) {
    std::lock_guard lock(mu_);
    live_.erase(id);
    if (auto s = ledger_->task_delete(id); !s) spdlog::error("task {}: {}", id, s.error().message);
    return util::make_error(util::ErrorCode::kBusy,
                            "busy: " + std::to_string(options_.workers) +
                                " tasks are running and as many waiting on this server; retry in a few seconds");
  }
  spdlog::info("task {} ({}) started for tenant {}, ttl {} ms", id, tool, tenant, ttl);
  return row;
}

void Tasks::run(const std::string& task_id, const Work& work, const std::shared_ptr<Cancellation>& cancel) {
  json result;
  try {
    // Cancelled while it waited for a thread: nothing to kill, nothing to run.
    result = cancel->requested() ? error_call_result("cancelled before it started") : work(cancel, task_id);
  } catch (const std::exception& e) {
    spdlog::error("task {}: {}", task_id, e.what());
    result = error_call_result("internal error in the task; see the server log");
  }
  if (!result.is_object()) result = error_call_result("internal error in the task; see the server log");

  // The ledger decides between this end and a cancel (task_finish moves only
  // a working row), so no lock is held across its round trips: the registry
  // is locked only to read and to hand over what this task holds.
  TaskRow row;
  {
    std::lock_guard lock(mu_);
    auto it = live_.find(task_id);
    if (it == live_.end()) return;
    const Live& live = *it->second;
    row.task_id = task_id;
    row.tenant = live.tenant;
    row.tool = live.tool;
    row.created_ms = live.created_ms;
    row.ttl_ms = live.ttl_ms;
  }
  const int64_t now = options_.now_ms();
  row.status = result.value("isError", false) ? "failed" : "completed";
  row.status_message = task_status_message(result);
  row.updated_ms = now;
  row.expires_ms = std::max(row.created_ms + row.ttl_ms, now + options_.keep_after_end_ms);
  row.result = std::move(result);
  auto finished = ledger_->task_finish(row);
  if (!finished) {
    spdlog::error("task {}: {}", task_id, finished.error().message);
  } else if (!*finished) {
    // No longer working in the ledger: cancelled (here or through another
    // server), or failed as lost. That stands, and is what waiters are
    // told; a cancelled task's result is its tool's own.
    if (auto ended = ledger_->task_find(row.tenant, task_id, now)) {
      if (ended->status == "cancelled") {
        if (auto s = ledger_->task_set_result(task_id, row.result); !s)
          spdlog::error("task {}: {}", task_id, s.error().message);
        ended->result = row.result;
      }
      row = std::move(*ended);
    }
  }
  // Whoever is still listening (a cancel here told its own first).
  std::vector<Listener> tell;
  {
    std::lock_guard lock(mu_);
    auto it = live_.find(task_id);
    if (it != live_.end()) {
      for (auto& [_, w] : it->second->waiters) tell.push_back(std::move(w));
      if (it->second->on_terminal) tell.push_back(std::move(it->second->on_terminal));
      live_.erase(it);
    }
  }
  spdlog::info("task {} {}: {}", task_id, row.status, row.status_message);
  for (auto& f : tell) f(row);
}

std::optional<TaskRow> Tasks::find(const std::string& tenant, const std::string& task_id, int64_t now) {
  if (!well_formed_id(task_id)) return std::nullopt;
  return ledger_->task_find(tenant, task_id, now);
}

util::Result<TaskRow> Tasks::get(const std::string& tenant, const std::string& task_id) {
  auto row = find(tenant, task_id, options_.now_ms());
  if (!row) return not_found();
  return *row;
}

util::Result<Tasks::Page> Tasks::list(const std::string& tenant, const std::string& cursor) {
  int64_t after_created_ms = -1;
  std::string after_id;
  if (!cursor.empty() && !decode_cursor(cursor, after_created_ms, after_id))
    return util::make_error(util::ErrorCode::kInvalidArgument, "Invalid params: invalid cursor");
  Page page;
  page.tasks = ledger_->task_list(tenant, after_created_ms, after_id, options_.page_size + 1, options_.now_ms());
  if (page.tasks.size() > options_.page_size) {
    page.tasks.resize(options_.page_size);
    page.next_cursor = encode_cursor(page.tasks.back());
  }
  return page;
}

util::Result<TaskRow> Tasks::cancel(const std::string& tenant, const std::string& task_id) {
  // No lock across the ledger: its task_finish moves only a working row, so
  // of this cancel and the task's own end exactly one wins.
  const int64_t now = options_.now_ms();
  auto found = find(tenant, task_id, now);
  if (!found) return not_found();
  auto terminal = [](const std::string& status) {
    return util::make_error(util::ErrorCode::kInvalidArgument,
                            "Cannot cancel task: already in terminal status '" + status + "'");
  };
  if (found->status != "working") return terminal(found->status);
  TaskRow row = std::move(*found);
  // Terminal before the answer (MCP tasks, cancellation); the job is killed
  // the way notifications/cancelled kills it.
  row.status = "cancelled";
  row.status_message = "cancelled by tasks/cancel";
  row.updated_ms = now;
  row.expires_ms = std::max(row.created_ms + row.ttl_ms, now + options_.keep_after_end_ms);
  row.result =
      error_call_result("task " + task_id + " was cancelled by tasks/cancel before " + row.tool + " returned a result");
  auto changed = ledger_->task_finish(row);
  if (!changed) {
    spdlog::error("task {}: {}", task_id, changed.error().message);
    return util::make_error(util::ErrorCode::kInternal, changed.error().message);
  }
  if (!*changed) {
    // It ended meanwhile (its work finished, or another server cancelled it).
    auto ended = find(tenant, task_id, options_.now_ms());
    if (!ended) return not_found();
    return terminal(ended->status);
  }
  std::vector<Listener> tell;
  {
    std::lock_guard lock(mu_);
    if (auto it = live_.find(task_id); it != live_.end() && !it->second->cancelled) {
      Live& live = *it->second;
      live.cancelled = true;
      live.cancel->cancel();
      for (auto& [_, w] : live.waiters) tell.push_back(std::move(w));
      live.waiters.clear();
      if (live.on_terminal) tell.push_back(std::move(live.on_terminal));
      live.on_terminal = nullptr;
    }
  }
  spdlog::info("task {} cancelled", task_id);
  for (auto& f : tell) f(row);
  return row;
}

util::Result<Tasks::Awaited> Tasks::await_result(const std::string& tenant, const std::string& task_id,
                                                 Listener on_ready) {
  auto row = find(tenant, task_id, options_.now_ms());
  if (!row) return not_found();
  if (row->status != "working") return Awaited{std::move(row), 0};
  {
    std::lock_guard lock(mu_);
    if (auto it = live_.find(task_id); it != live_.end()) {
      const uint64_t waiter = ++next_waiter_;
      it->second->waiters.emplace_back(waiter, std::move(on_ready));
      return Awaited{std::nullopt, waiter};
    }
  }
  // Not running here: it ended meanwhile, or it runs on another server.
  row = find(tenant, task_id, options_.now_ms());
  if (!row) return not_found();
  if (row->status != "working") return Awaited{std::move(row), 0};
  if (!ledger_->shared()) {
    spdlog::error("task {} is working in the ledger but not running in this process", task_id);
    return util::make_error(util::ErrorCode::kInternal, "task " + task_id + " is not running here");
  }
  // Told by the watcher once the ledger has its end (or its server is lost).
  std::lock_guard lock(mu_);
  const uint64_t waiter = ++next_waiter_;
  remote_.push_back(Remote{tenant, task_id, waiter, std::move(on_ready)});
  return Awaited{std::nullopt, waiter};
}

void Tasks::forget_waiter(const std::string& tenant, const std::string& task_id, uint64_t waiter) {
  std::lock_guard lock(mu_);
  std::erase_if(remote_, [&](const Remote& r) { return r.waiter == waiter && r.task_id == task_id; });
  auto it = live_.find(task_id);
  if (it == live_.end() || it->second->tenant != tenant) return;
  auto& ws = it->second->waiters;
  ws.erase(std::remove_if(ws.begin(), ws.end(), [&](const auto& w) { return w.first == waiter; }), ws.end());
}

size_t Tasks::expire() {
  size_t n = ledger_->task_expire("", options_.now_ms());
  if (n) spdlog::info("janitor: removed {} expired task(s)", n);
  return n;
}

void Tasks::drain() { pool_.drain(); }

size_t Tasks::running() {
  std::lock_guard lock(mu_);
  return live_.size();
}

}  // namespace protocol
