// The MCP task registry (protocol::Tasks) over a real ledger in a temp dir:
// lifecycle, listing, cancellation, expiry on a fake clock, tenant isolation,
// persistence and crash recovery. The work is a plain function: no sandbox.
#include <doctest/doctest.h>

#include <poll.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "server/broker/ledger.h"
#include "server/protocol/tasks.h"
#include "tests/unit/temp_dir.h"

using nlohmann::json;

namespace {

struct TempDir : unit::TempDir {
  TempDir() : unit::TempDir("tasks") {}
  std::string db() const { return path + "/ledger.sqlite3"; }
};

std::unique_ptr<broker::Ledger> open_ledger(const TempDir& d) {
  auto l = broker::Ledger::open(d.db());
  REQUIRE_MESSAGE(l.ok(), (l.ok() ? "" : l.error().message));
  return std::move(*l);
}

// A clock the test moves by hand.
struct Clock {
  std::atomic<int64_t> ms{1'764'000'000'000};
  std::function<int64_t()> fn() {
    return [this] { return ms.load(); };
  }
};

protocol::TasksOptions options(Clock& clock) {
  protocol::TasksOptions o;
  o.ttl_default_ms = 60'000;
  o.ttl_max_ms = 600'000;
  o.per_tenant_max = 300;
  o.workers = 4;
  o.queue_max = 300;
  o.keep_after_end_ms = 0;
  o.janitor_interval_s = 3600;
  o.now_ms = clock.fn();
  spdlog::set_level(spdlog::level::warn);
  return o;
}

// What run_code returns for a finished job.
json job_result(const std::string& job_id, const std::string& status, int exit_code) {
  return {
      {"content", json::array({{{"type", "text"}, {"text", "{}"}}})},
      {"structuredContent", {{"job_id", job_id}, {"status", status}, {"exit_code", exit_code}, {"signal", nullptr}}},
      {"isError", false}};
}

protocol::Tasks::Work returning(json result) {
  return [result](const std::shared_ptr<broker::Cancellation>&, const std::string&) { return result; };
}

// Blocks until the task is cancelled (the way a job's runner watches the fd)
// or `gate` opens, then returns what the tool would.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::atomic<int> started{0};
  void release() {
    {
      std::lock_guard lock(mu);
      open = true;
    }
    cv.notify_all();
  }
  protocol::Tasks::Work work() {
    return [this](const std::shared_ptr<broker::Cancellation>& cancel, const std::string&) -> json {
      ++started;
      for (;;) {
        pollfd p{cancel->fd(), POLLIN, 0};
        if (::poll(&p, 1, 10) > 0) return job_result("j-cancelled", "cancelled", 137);
        std::lock_guard lock(mu);
        if (open) return job_result("j-gated", "completed", 0);
      }
    };
  }
};

void wait_until(const std::function<bool()>& pred) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!pred()) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

TEST_CASE("a task starts working and ends completed with the tool's result") {
  TempDir d;
  Clock clock;
  protocol::Tasks tasks(open_ledger(d), options(clock));
  auto created = tasks.start("alice", "run_code", std::nullopt, returning(job_result("j1", "completed", 0)));
  REQUIRE(created.ok());
  CHECK(created->status == "working");
  CHECK(created->task_id.size() == 32);
  CHECK(created->ttl_ms == 60'000);
  tasks.drain();

  auto got = tasks.get("alice", created->task_id);
  REQUIRE(got.ok());
  CHECK(got->status == "completed");
  CHECK(got->status_message == "job j1 completed, exit 0");
  CHECK(got->result["structuredContent"]["job_id"] == "j1");

  json t = protocol::task_json(*got, 1000);
  CHECK(t["taskId"] == created->task_id);
  CHECK(t["status"] == "completed");
  CHECK(t["ttl"] == 60'000);
  CHECK(t["pollInterval"] == 1000);
  CHECK(t["statusMessage"] == "job j1 completed, exit 0");
  std::regex iso(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)");
  CHECK(std::regex_match(t["createdAt"].get<std::string>(), iso));
  CHECK(std::regex_match(t["lastUpdatedAt"].get<std::string>(), iso));
  CHECK(t["createdAt"] == "2025-11-24T16:00:00.000Z");  // the fake clock: 1764000000000 ms
}

TEST_CASE("an isError result makes the task failed with the error text; a throwing work too") {
  TempDir d;
  Clock clock;
  protocol::Tasks tasks(open_ledger(d), options(clock));
  auto busy = tasks.start("alice", "run_code", std::nullopt,
                          returning(protocol::error_call_result("busy: 4 jobs running and 16 waiting")));
  auto thrown = tasks.start("alice", "run_code", std::nullopt,
                            [](const std::shared_ptr<broker::Cancellation>&, const std::string&) -> json {
                              throw std::runtime_error("disk on fire");
                            });
  REQUIRE(busy.ok());
  REQUIRE(thrown.ok());
  tasks.drain();
  auto a = tasks.get("alice", busy->task_id);
  CHECK(a->status == "failed");
  CHECK(a->status_message == "busy: 4 jobs running and 16 waiting");
  CHECK(a->result["isError"] == true);
  auto b = tasks.get("alice", thrown->task_id);
  CHECK(b->status == "failed");
  CHECK(b->status_message.find("internal error") == 0);
  CHECK(b->status_message.find("disk on fire") == std::string::npos);  // what() never reaches a client
}

TEST_CASE("ttl: the default when none is asked, the ceiling above it") {
  TempDir d;
  Clock clock;
  protocol::Tasks tasks(open_ledger(d), options(clock));
  auto none = tasks.start("alice", "run_code", std::nullopt, returning(job_result("j", "completed", 0)));
  auto asked = tasks.start("alice", "run_code", 5000.0, returning(job_result("j", "completed", 0)));
  auto huge = tasks.start("alice", "run_code", 1e15, returning(job_result("j", "completed", 0)));
  REQUIRE((none.ok() && asked.ok() && huge.ok()));
  CHECK(none->ttl_ms == 60'000);
  CHECK(asked->ttl_ms == 5000);
  CHECK(huge->ttl_ms == 600'000);
  tasks.drain();
}

TEST_CASE("tasks/list pages through a tenant's tasks in creation order") {
  TempDir d;
  Clock clock;
  protocol::Tasks tasks(open_ledger(d), options(clock));
  std::vector<std::string> ids;
  for (int i = 0; i < 205; ++i) {
    if (i % 7 == 0) clock.ms += 1;  // several tasks share a millisecond: the id breaks the tie
    auto t = tasks.start("alice", "run_code", std::nullopt, returning(job_result("j", "completed", 0)));
    REQUIRE(t.ok());
    ids.push_back(t->task_id);
  }
  REQUIRE(tasks.start("bob", "run_code", std::nullopt, returning(job_result("j", "completed", 0))).ok());
  tasks.drain();

  std::vector<std::string> seen;
  std::vector<size_t> sizes;
  std::string cursor;
  do {
    auto page = tasks.list("alice", cursor);
    REQUIRE(page.ok());
    sizes.push_back(page->tasks.size());
    for (auto& t : page->tasks) {
      CHECK(t.tenant == "alice");
      seen.push_back(t.task_id);
    }
    cursor = page->next_cursor;
  } while (!cursor.empty());
  CHECK(sizes == std::vector<size_t>{100, 100, 5});
  CHECK(std::set<std::string>(seen.begin(), seen.end()).size() == 205);
  CHECK(std::set<std::string>(seen.begin(), seen.end()) == std::set<std::string>(ids.begin(), ids.end()));
  for (size_t i = 1; i < seen.size(); ++i) {
    auto a = tasks.get("alice", seen[i - 1]), b = tasks.get("alice", seen[i]);
    CHECK((a->created_ms < b->created_ms || (a->created_ms == b->created_ms && a->task_id < b->task_id)));
  }

  auto bob = tasks.list("bob", "");
  REQUIRE(bob.ok());
  CHECK(bob->tasks.size() == 1);
  CHECK(bob->next_cursor.empty());

  for (std::string bad : {"x", "bm90IGEgY3Vyc29y", "MTIzLnh5eg=="}) {  // not base64; "not a cursor"; "123.xyz"
    auto r = tasks.list("alice", bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == util::ErrorCode::kInvalidArgument);
    CHECK(r.error().message == "Invalid params: invalid cursor");
  }
}

TEST_CASE("cancel: cancelled before the answer, the job is told, and it stays cancelled") {
  TempDir d;
  Clock clock;
  protocol::Tasks tasks(open_ledger(d), options(clock));
  Gate gate;
  auto t = tasks.start("alice", "run_code", std::nullopt, gate.work());
  REQUIRE(t.ok());
  wait_until([&] { return gate.started.load() == 1; });

  std::vector<store::TaskRow> notified;
  std::mutex mu;
  auto awaited = tasks.await_result("alice", t->task_id, [&](const store::TaskRow& r) {
    std::lock_guard lock(mu);
    notified.push_back(r);
  });
  REQUIRE(awaited.ok());
  CHECK_FALSE(awaited->ready);

  auto c = tasks.cancel("alice", t->task_id);
  REQUIRE(c.ok());
  CHECK(c->status == "cancelled");
  {
    std::lock_guard lock(mu);
    REQUIRE(notified.size() == 1);  // the waiting tasks/result is answered at the cancel
    CHECK(notified[0].status == "cancelled");
    CHECK(notified[0].result["isError"] == true);
  }
  CHECK(tasks.get("alice", t->task_id)->status == "cancelled");

  tasks.drain();  // the work saw the cancellation and returned the tool's result
  auto after = tasks.get("alice", t->task_id);
  CHECK(after->status == "cancelled");
  CHECK(after->result["structuredContent"]["job_id"] == "j-cancelled");

  auto again = tasks.cancel("alice", t->task_id);
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().code == util::ErrorCode::kInvalidArgument);
  CHECK(again.error().message == "Cannot cancel task: already in terminal status 'cancelled'");

  auto done = tasks.start("alice", "run_code", std::nullopt, returning(job_result("j2", "completed", 0)));
  tasks.drain();
  auto late = tasks.cancel("alice", done->task_id);
  REQUIRE_FALSE(late.ok());
  CHECK(late.error().message == "Cannot cancel task: already in terminal status 'completed'");
  CHECK(tasks.get("alice", done->task_id)->status == "completed");
}

TEST_CASE("await_result: a waiter fires once at the end; a forgotten one never; a terminal task is ready") {
  TempDir d;
  Clock clock;
  protocol::Tasks tasks(open_ledger(d), options(clock));
  Gate gate;
  auto t = tasks.start("alice", "run_code", std::nullopt, gate.work());
  REQUIRE(t.ok());
  std::atomic<int> kept{0}, forgotten{0};
  std::string kept_status;
  auto a = tasks.await_result("alice", t->task_id, [&](const store::TaskRow& r) {
    kept_status = r.status;
    ++kept;
  });
  auto b = tasks.await_result("alice", t->task_id, [&](const store::TaskRow&) { ++forgotten; });
  REQUIRE((a.ok() && b.ok()));
  CHECK(a->waiter != b->waiter);
  tasks.forget_waiter("alice", t->task_id, b->waiter);
  gate.release();
  tasks.drain();
  CHECK(kept.load() == 1);
  CHECK(kept_status == "completed");
  CHECK(forgotten.load() == 0);

  auto ready = tasks.await_result("alice", t->task_id, [&](const store::TaskRow&) { ++forgotten; });
  REQUIRE(ready.ok());
  REQUIRE(ready->ready);
  CHECK(ready->ready->result["structuredContent"]["job_id"] == "j-gated");
  CHECK(forgotten.load() == 0);
}

TEST_CASE("expiry: terminal tasks vanish after their ttl, working ones never") {
  TempDir d;
  Clock clock;
  protocol::Tasks tasks(open_ledger(d), options(clock));
  auto done = tasks.start("alice", "run_code", 1000.0, returning(job_result("j", "completed", 0)));
  Gate gate;
  auto working = tasks.start("alice", "run_code", 0.0, gate.work());
  REQUIRE((done.ok() && working.ok()));
  wait_until([&] { return tasks.get("alice", done->task_id)->status == "completed"; });

  clock.ms += 999;
  CHECK(tasks.get("alice", done->task_id).ok());
  clock.ms += 1;
  // Expired reads as unknown at once, before any deletion, with the one message.
  auto gone = tasks.get("alice", done->task_id);
  REQUIRE_FALSE(gone.ok());
  CHECK(gone.error().code == util::ErrorCode::kNotFound);
  CHECK(gone.error().message == protocol::kTaskNotFound);
  CHECK(tasks.list("alice", "")->tasks.size() == 1);
  CHECK(tasks.expire() == 1);

  clock.ms += 3'600'000;
  CHECK(tasks.expire() == 0);  // still working: never deleted
  CHECK(tasks.get("alice", working->task_id)->status == "working");
  gate.release();
  wait_until([&] { return tasks.running() == 0; });
  CHECK_FALSE(tasks.get("alice", working->task_id).ok());  // ended past its ttl (keep_after_end_ms = 0 here)
  CHECK(tasks.expire() == 1);
}

TEST_CASE("a result outlives a ttl that ran out while its job ran, by keep_after_end_ms") {
  TempDir d;
  Clock clock;
  auto o = options(clock);
  o.keep_after_end_ms = 60'000;
  protocol::Tasks tasks(open_ledger(d), o);
  Gate gate;
  auto t = tasks.start("alice", "run_code", 10.0, gate.work());
  REQUIRE(t.ok());
  clock.ms += 5000;
  gate.release();
  tasks.drain();
  clock.ms += 59'999;
  CHECK(tasks.get("alice", t->task_id)->status == "completed");
  clock.ms += 1;
  CHECK_FALSE(tasks.get("alice", t->task_id).ok());
}

TEST_CASE("tenant isolation: another tenant's task is exactly an unknown one") {
  TempDir d;
  Clock clock;
  protocol::Tasks tasks(open_ledger(d), options(clock));
  Gate gate;
  auto t = tasks.start("alice", "run_code", std::nullopt, gate.work());
  REQUIRE(t.ok());
  const std::string unknown = "0123456789abcdef0123456789abcdef";
  for (const std::string& id : {t->task_id, unknown, std::string("../etc/passwd"), std::string("")}) {
    CAPTURE(id);
    auto g = tasks.get("bob", id);
    auto c = tasks.cancel("bob", id);
    auto a = tasks.await_result("bob", id, [](const store::TaskRow&) { FAIL("no waiter for another tenant"); });
    REQUIRE_FALSE(g.ok());
    REQUIRE_FALSE(c.ok());
    REQUIRE_FALSE(a.ok());
    for (auto* e : {&g.error(), &c.error(), &a.error()}) {
      CHECK(e->code == util::ErrorCode::kNotFound);
      CHECK(e->message == protocol::kTaskNotFound);
    }
  }
  CHECK(tasks.list("bob", "")->tasks.empty());
  tasks.forget_waiter("bob", t->task_id, 1);                   // harmless
  CHECK(tasks.get("alice", t->task_id)->status == "working");  // bob's cancel did nothing
  gate.release();
  tasks.drain();
  CHECK(tasks.get("alice", t->task_id)->status == "completed");
}

TEST_CASE("a tenant's retained tasks are capped; other tenants are not affected") {
  TempDir d;
  Clock clock;
  auto o = options(clock);
  o.per_tenant_max = 2;
  protocol::Tasks tasks(open_ledger(d), o);
  REQUIRE(tasks.start("alice", "run_code", 1000.0, returning(job_result("j", "completed", 0))).ok());
  REQUIRE(tasks.start("alice", "run_code", 1000.0, returning(job_result("j", "completed", 0))).ok());
  tasks.drain();
  auto third = tasks.start("alice", "run_code", 1000.0, returning(job_result("j", "completed", 0)));
  REQUIRE_FALSE(third.ok());
  CHECK(third.error().code == util::ErrorCode::kBusy);
  CHECK(third.error().message.rfind("busy: 2 tasks are retained for this tenant", 0) == 0);
  CHECK(tasks.start("bob", "run_code", std::nullopt, returning(job_result("j", "completed", 0))).ok());
  clock.ms += 1000;  // alice's two expire: room again
  CHECK(tasks.start("alice", "run_code", std::nullopt, returning(job_result("j", "completed", 0))).ok());
  tasks.drain();
}

TEST_CASE("a full pool refuses a task at once, and leaves no row behind") {
  TempDir d;
  Clock clock;
  auto o = options(clock);
  o.workers = 1;
  o.queue_max = 1;
  protocol::Tasks tasks(open_ledger(d), o);
  Gate gate;
  auto running = tasks.start("alice", "run_code", std::nullopt, gate.work());
  REQUIRE(running.ok());
  wait_until([&] { return gate.started.load() == 1; });
  auto queued = tasks.start("alice", "run_code", std::nullopt, gate.work());
  REQUIRE(queued.ok());
  auto refused = tasks.start("alice", "run_code", std::nullopt, gate.work());
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == util::ErrorCode::kBusy);
  CHECK(tasks.list("alice", "")->tasks.size() == 2);
  gate.release();
  tasks.drain();
  CHECK(tasks.get("alice", queued->task_id)->status == "completed");
}

TEST_CASE("persistence: results survive a restart; tasks a crash left working become failed") {
  TempDir d;
  Clock clock;
  std::string done_id;
  {
    protocol::Tasks tasks(open_ledger(d), options(clock));
    auto t = tasks.start("alice", "run_code", std::nullopt, returning(job_result("j-kept", "completed", 0)));
    REQUIRE(t.ok());
    done_id = t->task_id;
  }  // the destructor waits for the task to end
  // What a killed server leaves: a row still working (written on another connection).
  store::TaskRow orphan;
  orphan.task_id = "fedcba9876543210fedcba9876543210";
  orphan.tenant = "alice";
  orphan.tool = "run_code";
  orphan.status = "working";
  orphan.status_message = "running run_code";
  orphan.created_ms = orphan.updated_ms = clock.ms.load();
  orphan.ttl_ms = 60'000;
  orphan.expires_ms = orphan.created_ms + orphan.ttl_ms;
  REQUIRE(open_ledger(d)->task_insert(orphan).ok());

  clock.ms += 10;
  protocol::Tasks tasks(open_ledger(d), options(clock));
  auto kept = tasks.get("alice", done_id);
  REQUIRE(kept.ok());
  CHECK(kept->status == "completed");
  CHECK(kept->result["structuredContent"]["job_id"] == "j-kept");

  auto failed = tasks.get("alice", orphan.task_id);
  REQUIRE(failed.ok());
  CHECK(failed->status == "failed");
  CHECK(failed->status_message == protocol::kTaskInterrupted);
  CHECK(failed->updated_ms == orphan.created_ms + 10);
  CHECK(failed->result["isError"] == true);
  CHECK(failed->result["content"][0]["text"].get<std::string>().find(protocol::kTaskInterrupted) == 0);
  CHECK(tasks.cancel("alice", orphan.task_id).error().code == util::ErrorCode::kInvalidArgument);
  auto ready = tasks.await_result("alice", orphan.task_id, [](const store::TaskRow&) {});
  REQUIRE(ready.ok());
  CHECK(ready->ready);
}

TEST_CASE("task_status_message names the job, its status and exit code or signal") {
  CHECK(protocol::task_status_message(job_result("abc", "failed", 3)) == "job abc failed, exit 3");
  json sig = job_result("abc", "timed_out", 0);
  sig["structuredContent"]["exit_code"] = nullptr;
  sig["structuredContent"]["signal"] = "SIGKILL";
  CHECK(protocol::task_status_message(sig) == "job abc timed_out, signal SIGKILL");
  CHECK(protocol::task_status_message(protocol::error_call_result("runtime: unknown")) == "runtime: unknown");
  CHECK(protocol::task_status_message(json{{"content", json::array()}, {"isError", false}}) == "completed");
}

TEST_CASE("extension_task_json: the tasks extension's shape of each status (SEP-2663)") {
  store::TaskRow row;
  row.task_id = "0123456789abcdef0123456789abcdef";
  row.tenant = "alice";
  row.tool = "run_code";
  row.created_ms = 1'764'000'000'000;
  row.updated_ms = row.created_ms + 1500;
  row.ttl_ms = 60'000;

  row.status = "working";
  row.status_message = "running run_code";
  json w = protocol::extension_task_json(row, 1000, true);
  CHECK(w["status"] == "working");
  CHECK(w["ttlMs"] == 60'000);
  CHECK(w["pollIntervalMs"] == 1000);
  CHECK(w["createdAt"] == "2025-11-24T16:00:00.000Z");
  CHECK(w["lastUpdatedAt"] == "2025-11-24T16:00:01.500Z");
  for (const char* absent : {"ttl", "pollInterval", "result", "error", "inputRequests", "requestState", "task"})
    CHECK_MESSAGE(!w.contains(absent), absent);

  // A tool that ran and answered isError is completed; its result says so.
  row.status = "failed";
  row.status_message = "runtime: unknown";
  row.result = protocol::error_call_result("runtime: unknown");
  json e = protocol::extension_task_json(row, 1000, true);
  CHECK(e["status"] == "completed");
  CHECK(e["result"]["isError"] == true);
  CHECK(!e.contains("error"));
  // The CreateTaskResult form never inlines.
  CHECK(!protocol::extension_task_json(row, 1000, false).contains("result"));

  row.status = "completed";
  row.result = job_result("j1", "completed", 0);
  json c = protocol::extension_task_json(row, 1000, true);
  CHECK(c["status"] == "completed");
  CHECK(c["result"]["structuredContent"]["job_id"] == "j1");
  CHECK(!c["result"].contains("_meta"));

  // Only the server stopping under a task is a JSON-RPC error: failed, no result.
  row.status = "failed";
  row.status_message = protocol::kTaskInterrupted;
  row.result = protocol::error_call_result(std::string(protocol::kTaskInterrupted) + "; its job did not finish.");
  json f = protocol::extension_task_json(row, 1000, true);
  CHECK(f["status"] == "failed");
  CHECK(!f.contains("result"));
  CHECK(f["error"]["code"] == -32603);
  CHECK(f["error"]["message"].get<std::string>().find(protocol::kTaskInterrupted) != std::string::npos);
  CHECK(!protocol::extension_task_json(row, 1000, false).contains("error"));

  row.status = "cancelled";
  row.status_message = "cancelled by tasks/cancel";
  json x = protocol::extension_task_json(row, 1000, true);
  CHECK(x["status"] == "cancelled");
  CHECK(!x.contains("result"));
  CHECK(!x.contains("error"));
}

TEST_CASE("a task cancelled elsewhere while its work ends: that stands, and waiters are told it") {
  // Another server (here a second handle on the same ledger) makes the row
  // cancelled; the work then ends before this server hears of it.
  TempDir d;
  Clock clock;
  protocol::Tasks tasks(open_ledger(d), options(clock));
  Gate gate;
  auto t = tasks.start("alice", "run_code", std::nullopt, gate.work());
  REQUIRE(t.ok());
  wait_until([&] { return gate.started.load() == 1; });
  std::string told;
  json told_result;
  auto a = tasks.await_result("alice", t->task_id, [&](const store::TaskRow& r) {
    told = r.status;
    told_result = r.result;
  });
  REQUIRE(a.ok());
  auto elsewhere = open_ledger(d);
  store::TaskRow row = *elsewhere->task_find("alice", t->task_id, clock.ms.load());
  row.status = "cancelled";
  row.status_message = "cancelled by tasks/cancel";
  row.result = protocol::error_call_result("cancelled elsewhere");
  REQUIRE(*elsewhere->task_finish(row));
  gate.release();
  tasks.drain();
  CHECK(told == "cancelled");
  CHECK(told_result["structuredContent"]["job_id"] == "j-gated");  // the tool's own result
  auto now = tasks.get("alice", t->task_id);
  REQUIRE(now.ok());
  CHECK(now->status == "cancelled");
  CHECK(now->result["structuredContent"]["job_id"] == "j-gated");
}

namespace {

// A ledger whose task_finish waits at a gate while `hold` is set: a round
// trip to a slow database, for as long as the test likes.
struct SlowFinishStore : store::TaskStore {
  std::unique_ptr<broker::Ledger> inner;
  std::mutex mu;
  std::condition_variable cv;
  bool hold = false;
  int waiting = 0;
  explicit SlowFinishStore(std::unique_ptr<broker::Ledger> l) : inner(std::move(l)) {}
  void release() {
    {
      std::lock_guard lock(mu);
      hold = false;
    }
    cv.notify_all();
  }
  util::Result<bool> task_finish(const store::TaskRow& row) override {
    {
      std::unique_lock lock(mu);
      if (hold) {
        ++waiting;
        cv.notify_all();
        cv.wait(lock, [&] { return !hold; });
      }
    }
    return inner->task_finish(row);
  }
  util::Status task_insert(const store::TaskRow& row) override { return inner->task_insert(row); }
  util::Status task_set_result(const std::string& id, const json& result) override {
    return inner->task_set_result(id, result);
  }
  util::Status task_delete(const std::string& id) override { return inner->task_delete(id); }
  std::optional<store::TaskRow> task_find(const std::string& tenant, const std::string& id, int64_t now) override {
    return inner->task_find(tenant, id, now);
  }
  std::vector<store::TaskRow> task_list(const std::string& tenant, int64_t after, const std::string& after_id,
                                        size_t limit, int64_t now) override {
    return inner->task_list(tenant, after, after_id, limit, now);
  }
  uint64_t task_count(const std::string& tenant, int64_t now) override { return inner->task_count(tenant, now); }
  size_t task_fail_interrupted(const std::string& m, const json& r, int64_t now, int64_t keep) override {
    return inner->task_fail_interrupted(m, r, now, keep);
  }
  size_t task_expire(const std::string& tenant, int64_t now) override { return inner->task_expire(tenant, now); }
  bool shared() const override { return inner->shared(); }
  std::vector<store::TaskRow> tasks_ended(const std::vector<std::string>& ids) override {
    return inner->tasks_ended(ids);
  }
};

}  // namespace

TEST_CASE("a task's end and a cancel hold no lock across the ledger: other tenants go on meanwhile") {
  TempDir d;
  Clock clock;
  auto owned = std::make_unique<SlowFinishStore>(open_ledger(d));
  SlowFinishStore& store = *owned;
  protocol::Tasks tasks(std::move(owned), options(clock));
  Gate gate, never;  // the second task ends only when cancelled
  auto slow_end = tasks.start("alice", "run_code", std::nullopt, gate.work());
  auto to_cancel = tasks.start("alice", "run_code", std::nullopt, never.work());
  REQUIRE(slow_end.ok());
  REQUIRE(to_cancel.ok());
  wait_until([&] { return gate.started.load() == 1 && never.started.load() == 1; });
  {
    std::lock_guard lock(store.mu);
    store.hold = true;
  }
  // A cancel whose ledger write waits, and a task's end whose write waits too.
  auto cancelling = std::async(std::launch::async, [&] { return tasks.cancel("alice", to_cancel->task_id); });
  gate.release();
  wait_until([&] {
    std::lock_guard lock(store.mu);
    return store.waiting == 2;
  });
  // Meanwhile bob starts a task, awaits it, reads it and lists: none waits
  // for alice's writes (each would, were the registry locked across them).
  auto bob = std::async(std::launch::async, [&] {
    auto t = tasks.start("bob", "run_code", std::nullopt, returning(job_result("j-bob", "completed", 0)));
    REQUIRE(t.ok());
    std::atomic<bool> told{false};
    auto a = tasks.await_result("bob", t->task_id, [&](const store::TaskRow&) { told = true; });
    REQUIRE(a.ok());
    CHECK(tasks.get("bob", t->task_id).ok());
    CHECK(tasks.list("bob", "").ok());
    return tasks.running();
  });
  REQUIRE(bob.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  bob.get();
  store.release();
  auto cancelled = cancelling.get();
  REQUIRE(cancelled.ok());
  CHECK(cancelled->status == "cancelled");
  tasks.drain();
  CHECK(tasks.get("alice", to_cancel->task_id)->status == "cancelled");
  CHECK(tasks.get("alice", slow_end->task_id)->status == "completed");
}
