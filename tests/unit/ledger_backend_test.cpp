// The ledger's contract, run against every backend (ledger_backends.h):
// SQLite always, PostgreSQL where a test cluster is named (the database
// suite, tests/database/run). Cases whose names start "ledger backends:" are
// the ones the database suite runs.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>

#include "server/broker/job_records.h"
#include "server/broker/ledger.h"
#include "server/broker/ledger_pg.h"
#include "server/util/database_uri.h"
#include "tests/unit/ledger_backends.h"

namespace {

broker::LedgerRow row(const std::string& id, const std::string& key, const std::string& tenant = "t1") {
  broker::LedgerRow r;
  r.job_id = id;
  r.tenant = tenant;
  r.runtime = "python";
  r.code_sha256 = std::string(64, 'a');
  r.inputs = nlohmann::json::array({{{"input_id", "i1"}, {"name", "a.csv"}, {"sha256", std::string(64, 'c')}}});
  r.limits = {{"timeout_ms", 1000}};
  r.idempotency_key = key;
  r.request_sha256 = std::string(64, 'b');
  return r;
}

// A job recorded and ended, completed.
void record_ended(broker::Ledger& l, const broker::LedgerRow& r) {
  REQUIRE(l.record_start(r).ok());
  REQUIRE(l.record_end(r.job_id, "completed", nlohmann::json::object()).ok());
}

store::TaskRow task(const std::string& id, const std::string& tenant, int64_t created) {
  store::TaskRow r;
  r.task_id = id;
  r.tenant = tenant;
  r.tool = "run_code";
  r.created_ms = r.updated_ms = created;
  r.ttl_ms = 1000;
  r.expires_ms = created + 1000;
  return r;
}

broker::WorkspaceRow workspace(const std::string& id, const std::string& tenant, int64_t now, int64_t ttl) {
  broker::WorkspaceRow w;
  w.workspace_id = id;
  w.tenant = tenant;
  w.created_ms = now;
  w.ttl_ms = ttl;
  w.expires_ms = now + ttl;
  return w;
}

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A server that dies without a word: a child process opens the ledger with
// a lease of lease_ms, does `work`, and ends with _exit (no destructor: its
// lease is never given back nor renewed). Forked while this process has no
// other thread (every ledger of earlier cases is gone). REQUIREs that `work`
// returned true there.
void lose_a_server(const unit::LedgerBackend& b, int64_t lease_ms, const std::function<bool(broker::Ledger&)>& work) {
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    broker::LedgerConfig config{b.where};
    config.lease_ms = lease_ms;
    auto a = broker::Ledger::open(config);
    ::_exit(a.ok() && work(**a) ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
}

}  // namespace

TEST_CASE("ledger backends: a job is recorded before it starts and updated when it ends") {
  for (auto& b : unit::ledger_backends()) {
    CAPTURE(b->name);
    auto l = b->open();
    CHECK(std::string(l->backend()) == b->name);
    CHECK(l->ping().ok());
    REQUIRE(l->record_start(row("j1", "k1")).ok());
    auto found = l->find("t1", "j1");
    REQUIRE(found);
    CHECK(found->status == "running");
    CHECK(found->inputs == row("j1", "k1").inputs);
    CHECK(found->limits["timeout_ms"] == 1000);
    CHECK(found->result.is_null());
    REQUIRE(l->record_end("j1", "completed", {{"outcome", {{"status", "completed"}}}}).ok());
    found = l->find_by_key("t1", "k1");
    REQUIRE(found);
    CHECK(found->job_id == "j1");
    CHECK(found->status == "completed");
    CHECK(found->result["outcome"]["status"] == "completed");
    CHECK(found->ended_ms >= found->created_ms);
    CHECK_FALSE(l->find("t2", "j1"));  // another tenant's job reads as unknown
    CHECK_FALSE(l->find("t1", "nope"));
  }
}

TEST_CASE("ledger backends: a recorded result keeps its cut counts; an older row reads them as 0") {
  for (auto& b : unit::ledger_backends()) {
    CAPTURE(b->name);
    auto l = b->open();
    broker::JobResult r;
    r.job_id = "j1";
    r.outcome.status = sandbox::Status::failed;
    r.outcome.exited = true;
    r.outcome.exit_code = 1;
    r.outcome.stdout_text = "head\n[throwbox: 1234567 bytes cut here (stdout over its 65536-byte cap)]\ntail \xff\n";
    r.outcome.stdout_truncated = true;
    r.outcome.stdout_cut_bytes = 1234567;
    REQUIRE(l->record_start(row("j1", "k1")).ok());
    REQUIRE(l->record_end("j1", "failed", broker::recorded_result(r)).ok());
    auto found = l->find("t1", "j1");
    REQUIRE(found);
    broker::JobResult back = broker::job_result_from_row(*found);
    CHECK(back.outcome.status == sandbox::Status::failed);
    CHECK(back.outcome.stdout_truncated);
    CHECK(back.outcome.stdout_cut_bytes == 1234567);
    CHECK(back.outcome.stderr_cut_bytes == 0);
    // Bytes that are not UTF-8 are stored replaced, the same on both backends.
    CHECK(back.outcome.stdout_text.find("tail \xef\xbf\xbd") != std::string::npos);

    nlohmann::json old = broker::recorded_result(r);
    old["outcome"].erase("stdout_cut_bytes");
    REQUIRE(l->record_start(row("j2", "k2")).ok());
    REQUIRE(l->record_end("j2", "failed", old).ok());
    back = broker::job_result_from_row(*l->find("t1", "j2"));
    CHECK(back.outcome.stdout_cut_bytes == 0);
  }
}

TEST_CASE("ledger backends: an idempotency key is one row per tenant; a second is a conflict") {
  for (auto& b : unit::ledger_backends()) {
    CAPTURE(b->name);
    auto l = b->open();
    REQUIRE(l->record_start(row("j1", "same")).ok());
    auto again = l->record_start(row("j2", "same"));
    REQUIRE_FALSE(again.ok());
    CHECK(again.error().code == util::ErrorCode::kConflict);
    CHECK_FALSE(l->find("t1", "j2"));  // nothing half-written
    CHECK(l->record_start(row("j3", "same", "t2")).ok());
    CHECK(l->find_by_key("t2", "same")->job_id == "j3");
    CHECK_FALSE(l->find_by_key("t3", "same"));
    // Jobs without a key never collide.
    CHECK(l->record_start(row("j4", "")).ok());
    CHECK(l->record_start(row("j5", "")).ok());
    // A job id is unique too, and that is not a key conflict's message.
    auto dup = l->record_start(row("j4", ""));
    CHECK_FALSE(dup.ok());
  }
}

TEST_CASE("ledger backends: concurrent first calls with one key: exactly one row wins") {
  for (auto& b : unit::ledger_backends()) {
    CAPTURE(b->name);
    // Two ledgers: on PostgreSQL two replicas, on SQLite two connections.
    auto a = b->open();
    auto c = b->open();
    for (int round = 0; round < 20; ++round) {
      const std::string key = "k" + std::to_string(round);
      std::promise<void> go;
      std::shared_future<void> start = go.get_future().share();
      auto first = std::async(std::launch::async, [&] {
        start.wait();
        return a->record_start(row("a" + std::to_string(round), key)).ok();
      });
      auto second = std::async(std::launch::async, [&] {
        start.wait();
        return c->record_start(row("c" + std::to_string(round), key)).ok();
      });
      go.set_value();
      const bool x = first.get(), y = second.get();
      CHECK(x != y);
      auto winner = c->find_by_key("t1", key);
      REQUIRE(winner);
      CHECK(winner->job_id == (x ? "a" : "c") + std::to_string(round));
    }
  }
}

TEST_CASE("ledger backends: an end moves only a running row; expiry removes ended rows past their ttl") {
  for (auto& b : unit::ledger_backends()) {
    CAPTURE(b->name);
    auto l = b->open();
    REQUIRE(l->record_start(row("j1", "")).ok());
    REQUIRE(l->record_end("j1", "completed", nlohmann::json::object({{"n", 1}})).ok());
    // A late second end (a lost server's job ending after it was failed) changes nothing.
    REQUIRE(l->record_end("j1", "failed", nlohmann::json::object({{"n", 2}})).ok());
    CHECK(l->find("t1", "j1")->status == "completed");
    CHECK(l->find("t1", "j1")->result["n"] == 1);
    REQUIRE(l->record_start(row("j2", "")).ok());
    CHECK(l->expire(3600) == 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    CHECK(l->expire(1) == 1);  // j1 ended over a second ago; j2 runs
    CHECK_FALSE(l->find("t1", "j1"));
    CHECK(l->find("t1", "j2"));
  }
}

TEST_CASE("ledger backends: an expiry of more rows than one statement takes removes them all") {
  for (auto& b : unit::ledger_backends()) {
    CAPTURE(b->name);
    auto l = b->open();
    for (int i = 0; i < 700; ++i) record_ended(*l, row("e" + std::to_string(i), ""));
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    CHECK(l->expire(1) == 700);
    CHECK_FALSE(l->find("t1", "e699"));
  }
}

// However many jobs a tenant runs, the ledger keeps a bounded number of its
// ended rows: the oldest go first (their keys with them), running rows and
// other tenants' rows stay.
TEST_CASE("ledger backends: a trim keeps each tenant's newest ended rows up to the bound") {
  for (auto& b : unit::ledger_backends()) {
    CAPTURE(b->name);
    auto l = b->open();
    for (int i = 0; i < 1200; ++i) record_ended(*l, row("a" + std::to_string(10000 + i), i == 0 ? "first-key" : ""));
    REQUIRE(l->record_start(row("a-running", "")).ok());
    for (int i = 0; i < 3; ++i) record_ended(*l, row("b" + std::to_string(i), "", "t2"));
    CHECK(l->trim(1000) == 200);
    CHECK(l->trim(1000) == 0);
    CHECK_FALSE(l->find("t1", "a10000"));
    CHECK_FALSE(l->find_by_key("t1", "first-key"));  // the key went with its row
    CHECK_FALSE(l->find("t1", "a10199"));
    CHECK(l->find("t1", "a10200"));
    CHECK(l->find("t1", "a11199"));
    CHECK(l->find("t1", "a-running"));
    CHECK(l->find("t2", "b0"));
    // t1 keeps 2 ended rows (998 go, in two statements) and its running row; t2 keeps 2 of 3.
    CHECK(l->trim(2) == 999);
    CHECK(l->find("t1", "a11199"));
    CHECK(l->find("t1", "a11198"));
    CHECK_FALSE(l->find("t1", "a11197"));
    CHECK(l->find("t1", "a-running"));
    CHECK_FALSE(l->find("t2", "b0"));
  }
}

TEST_CASE("ledger backends: a gone server's running jobs and working tasks fail; the ledger survives reopening") {
  for (auto& b : unit::ledger_backends()) {
    CAPTURE(b->name);
    {
      auto l = b->open();
      REQUIRE(l->record_start(row("j1", "k1")).ok());
      REQUIRE(l->record_start(row("j2", "")).ok());
      REQUIRE(l->record_end("j2", "completed", nlohmann::json::object()).ok());
      REQUIRE(l->task_insert(task("a", "t1", 100)).ok());
    }
    auto l = b->open(1000);
    // PostgreSQL: the first server gave its lease back as it stopped, which
    // failed its running job then; SQLite: the next start does it.
    CHECK(l->fail_interrupted("the server stopped") == (b->shared() ? 0 : 1));
    auto j1 = l->find_by_key("t1", "k1");
    REQUIRE(j1);
    CHECK(j1->status == "failed");
    const std::string why = j1->result["interrupted"];
    if (b->shared())
      CHECK(why.rfind("replica lost", 0) == 0);
    else
      CHECK(why == "the server stopped");
    CHECK(broker::job_result_from_row(*j1).outcome.error == why);
    CHECK(l->find("t1", "j2")->status == "completed");
    // SQLite: at once. PostgreSQL: the first server never asked for its tasks
    // to be failed (no task layer), so they go as a lost server's do, by the
    // second's lease rounds once it has held its lease a whole lease (1 s).
    const size_t failed = l->task_fail_interrupted("stopped", {{"isError", true}}, 500, 10'000);
    for (int i = 0; b->shared() && i < 50 && l->task_find("t1", "a", 0)->status == "working"; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK(failed == (b->shared() ? 0 : 1));
    CHECK(l->task_find("t1", "a", 0)->status == "failed");
    if (!b->shared()) CHECK(l->task_find("t1", "a", 0)->expires_ms == 10'500);
    if (!b->shared()) {
      struct stat st {};
      REQUIRE(::stat(b->where.c_str(), &st) == 0);
      CHECK((st.st_mode & 0777) == 0600);
    }
  }
}

TEST_CASE("ledger backends: task rows are tenant-scoped, end once, page in order and expire") {
  for (auto& b : unit::ledger_backends()) {
    CAPTURE(b->name);
    auto l = b->open();
    REQUIRE(l->task_insert(task("a", "t1", 100)).ok());
    REQUIRE(l->task_insert(task("b", "t1", 200)).ok());
    REQUIRE(l->task_insert(task("c", "t2", 300)).ok());
    CHECK_FALSE(l->task_insert(task("a", "t2", 400)).ok());  // ids are unique across tenants
    CHECK(l->task_find("t1", "a", 0));
    CHECK_FALSE(l->task_find("t2", "a", 0));
    CHECK(l->task_count("t1", 0) == 2);
    auto page = l->task_list("t1", 100, "a", 10, 0);
    REQUIRE(page.size() == 1);
    CHECK(page[0].task_id == "b");
    CHECK(l->task_list("t1", 0, "", 1, 0).size() == 1);

    store::TaskRow done = task("a", "t1", 100);
    done.status = "completed";
    done.updated_ms = 150;
    done.expires_ms = 1100;
    done.result = {{"isError", false}};
    CHECK(*l->task_finish(done) == true);
    done.status = "cancelled";
    CHECK(*l->task_finish(done) == false);  // terminal stays terminal
    CHECK(l->task_find("t1", "a", 0)->status == "completed");
    CHECK(l->task_find("t1", "a", 0)->result["isError"] == false);
    REQUIRE(l->task_set_result("a", {{"late", true}}).ok());
    CHECK(l->task_find("t1", "a", 0)->result["late"] == true);

    CHECK_FALSE(l->task_find("t1", "a", 1100));  // past expiry: reads as absent
    CHECK(l->task_expire("t2", 1100) == 0);
    CHECK(l->task_expire("", 1100) == 1);
    CHECK(l->task_count("t1", 0) == 1);
    REQUIRE(l->task_delete("b").ok());
    CHECK(l->task_count("t1", 0) == 0);
  }
}

TEST_CASE("ledger backends: workspace rows open, count, are used, expire and close once") {
  for (auto& b : unit::ledger_backends()) {
    CAPTURE(b->name);
    auto l = b->open();
    const int64_t now = wall_ms();
    REQUIRE(l->workspace_insert(workspace("w1", "t1", now, 60'000)).ok());
    REQUIRE(l->workspace_insert(workspace("w2", "t1", now, 10)).ok());
    REQUIRE(l->workspace_insert(workspace("w3", "t2", now, 60'000)).ok());
    CHECK(l->workspace_find("t1", "w1", now));
    CHECK_FALSE(l->workspace_find("t2", "w1", now));
    CHECK(l->workspace_count("t1") == 2);
    REQUIRE(l->workspace_used("w1", 4096, now + 120'000).ok());
    auto w1 = l->workspace_find("t1", "w1", now);
    REQUIRE(w1);
    CHECK(w1->uses == 1);
    CHECK(w1->size_bytes == 4096);
    CHECK(w1->expires_ms == now + 120'000);
    auto expired = l->workspace_expired(now + 1000);
    REQUIRE(expired.size() == 1);
    CHECK(expired[0].workspace_id == "w2");
    CHECK(l->workspace_open_ids().size() == 3);
    CHECK(*l->workspace_close("t1", "w2", now, "expired") == true);
    CHECK(*l->workspace_close("t1", "w2", now, "close_workspace") == false);
    CHECK(*l->workspace_close("t1", "w3", now, "close_workspace") == false);  // not t1's
    CHECK(l->workspace_count("t1") == 1);
    CHECK_FALSE(l->workspace_find("t1", "w2", now));
    CHECK(l->workspace_forget(3600) == 0);  // closed a moment ago
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(l->workspace_forget(0) == 1);
    CHECK(l->workspace_open_ids().size() == 2);
  }
}

// What only a shared database has: several replicas, their leases, its schema.

TEST_CASE("ledger backends: a live replica's rows stay; a dead replica's fail as lost once its lease runs out") {
  for (auto& b : unit::ledger_backends()) {
    if (!b->shared()) continue;
    CAPTURE(b->name);
    // Replica A dies without leaving, a job running and a task working.
    lose_a_server(*b, 1500, [](broker::Ledger& a) {
      return a.record_start(row("lost", "k-lost")).ok() && a.task_insert(task("lost-task", "t1", 100)).ok();
    });

    auto live = b->open(3000);   // replica B, alive
    auto other = b->open(3000);  // replica C, alive
    REQUIRE(live->record_start(row("alive", "")).ok());
    REQUIRE(other->task_fail_interrupted("stopped", {{"isError", true}}, 0, 1000) <= 1);
    // C's recovery never touches B's running job, however often it runs.
    for (int i = 0; i < 3; ++i) other->fail_interrupted("the server stopped");
    CHECK(live->find("t1", "alive")->status == "running");
    // A's rows fail once its lease (1.5 s) has run out: C's lease rounds do
    // it without being asked.
    std::string status_now;
    for (int i = 0; i < 100 && status_now != "failed"; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      status_now = other->find("t1", "lost")->status;
    }
    CHECK(status_now == "failed");
    auto lost = other->find_by_key("t1", "k-lost");
    REQUIRE(lost);
    CHECK(lost->result["interrupted"].get<std::string>().rfind("replica lost", 0) == 0);
    auto lost_task = other->task_find("t1", "lost-task", 0);
    REQUIRE(lost_task);
    CHECK(lost_task->status == "failed");
    CHECK(live->find("t1", "alive")->status == "running");
    // B ends its job normally.
    REQUIRE(live->record_end("alive", "completed", nlohmann::json::object()).ok());
    CHECK(other->find("t1", "alive")->status == "completed");
  }
}

TEST_CASE("ledger backends: a replica that stops cleanly gives its lease back at once") {
  for (auto& b : unit::ledger_backends()) {
    if (!b->shared()) continue;
    auto keep = b->open();
    {
      auto going = b->open(60'000);  // a lease far longer than this case
      REQUIRE(going->record_start(row("j1", "")).ok());
    }
    // Not a minute later: at once.
    CHECK(keep->find("t1", "j1")->status == "failed");
  }
}

TEST_CASE("ledger backends: the schema is migrated once by concurrent replicas; a newer one is refused") {
  for (auto& b : unit::ledger_backends()) {
    if (!b->shared()) continue;
    std::vector<std::future<bool>> opening;
    for (int i = 0; i < 4; ++i)
      opening.push_back(std::async(std::launch::async, [&] { return broker::Ledger::open(b->where).ok(); }));
    for (auto& f : opening) CHECK(f.get());
    CHECK(unit::pg_exec(b->database, "SELECT count(*) FROM throwbox_schema") ==
          std::to_string(broker::pg_schema_version()));
    unit::pg_exec(b->database,
                  "INSERT INTO throwbox_schema VALUES (" + std::to_string(broker::pg_schema_version() + 1) + ", 0)");
    auto refused = broker::Ledger::open(b->where);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().message.find("newer than this throwbox knows") != std::string::npos);
  }
}

TEST_CASE("ledger backends: a job's end writes its whole row when a database crash lost its start") {
  for (auto& b : unit::ledger_backends()) {
    if (!b->shared()) continue;
    auto l = b->open();
    REQUIRE(l->record_start(row("j1", "")).ok());
    // What a crash of the database can do to a start without a key (a
    // server records it with its slot, unflushed): gone, while the job runs.
    CHECK(unit::pg_exec(b->database, "DELETE FROM jobs WHERE job_id = 'j1' RETURNING job_id") == "j1");
    REQUIRE(l->record_end("j1", "completed", {{"outcome", {{"status", "completed"}}}}).ok());
    auto found = l->find("t1", "j1");
    REQUIRE(found);
    CHECK(found->status == "completed");
    CHECK(found->runtime == row("j1", "").runtime);
    CHECK(found->inputs == row("j1", "").inputs);
    CHECK(found->limits["timeout_ms"] == 1000);
    CHECK(found->result["outcome"]["status"] == "completed");
    CHECK(found->ended_ms >= found->created_ms);
    CHECK(found->created_ms > 0);
    // An end still moves only a running row: one failed meanwhile (its
    // server judged lost) stays failed.
    REQUIRE(l->record_start(row("j2", "")).ok());
    unit::pg_exec(b->database, "UPDATE jobs SET status = 'failed', ended_ms = 1 WHERE job_id = 'j2'");
    REQUIRE(l->record_end("j2", "completed", nlohmann::json::object()).ok());
    CHECK(l->find("t1", "j2")->status == "failed");
  }
}

TEST_CASE("ledger backends: a connection the database dropped is replaced; a read goes on") {
  for (auto& b : unit::ledger_backends()) {
    if (!b->shared()) continue;
    auto l = b->open();
    REQUIRE(l->record_start(row("j1", "")).ok());
    CHECK(l->find("t1", "j1"));
    const std::string killed = unit::pg_exec(
        b->database,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'throwbox' AND "
        "datname = current_database()");
    CHECK(std::stoi(killed) >= 1);
    auto again = l->find("t1", "j1");
    REQUIRE(again);
    CHECK(again->job_id == "j1");
    CHECK(l->ping().ok());
  }
}

TEST_CASE("ledger backends: tenant slots hold across servers, wait in arrival order, and a full line is busy") {
  using S = broker::Ledger::SlotState;
  for (auto& b : unit::ledger_backends()) {
    CAPTURE(b->name);
    auto a = b->open();
    auto c = b->open();
    if (!b->shared()) {
      // One server: its own admission counts; the ledger grants every slot.
      for (int i = 0; i < 5; ++i) CHECK(*a->slot_take("j" + std::to_string(i), "t1", 2, 1) == S::kRunning);
      continue;
    }
    // Two servers, a tenant limit of 2, a line of 2.
    CHECK(*a->slot_take("j1", "t1", 2, 2) == S::kRunning);
    CHECK(*c->slot_take("j2", "t1", 2, 2) == S::kRunning);
    CHECK(*a->slot_take("j3", "t1", 2, 2) == S::kQueued);
    CHECK(*c->slot_take("j4", "t1", 2, 2) == S::kQueued);
    CHECK(*a->slot_take("j5", "t1", 2, 2) == S::kBusy);     // the line is full
    CHECK(*c->slot_take("o1", "t2", 2, 2) == S::kRunning);  // another tenant has its own slots
    CHECK(*c->slot_take("j4", "t1", 2, 2) == S::kQueued);   // asking again does not jump the line
    // j1 ends on server A: its recorded end gives the slot back, and the
    // first in line (j3, not j4) moves up.
    REQUIRE(a->record_start(row("j1", "")).ok());
    REQUIRE(a->record_end("j1", "completed", nlohmann::json::object()).ok());
    CHECK(*c->slot_take("j4", "t1", 2, 2) == S::kQueued);
    CHECK(*a->slot_take("j3", "t1", 2, 2) == S::kRunning);
    c->slot_release("j2");  // a call that failed before its job ran
    CHECK(*c->slot_take("j4", "t1", 2, 2) == S::kRunning);
    CHECK(*a->slot_take("j6", "t1", 2, 2) == S::kQueued);
  }
}

TEST_CASE(
    "ledger backends: a job without a key is recorded with its slot; a slot given back before it started takes "
    "its row along") {
  using S = broker::Ledger::SlotState;
  for (auto& b : unit::ledger_backends()) {
    CAPTURE(b->name);
    auto a = b->open();
    const broker::LedgerRow r1 = row("j1", ""), r2 = row("j2", ""), r3 = row("j3", "");
    CHECK(*a->slot_take("j1", "t1", 1, 4, &r1) == S::kRunning);
    if (b->shared()) {
      auto found = a->find("t1", "j1");  // recorded with the slot
      REQUIRE(found);
      CHECK(found->status == "running");
      CHECK(found->inputs == r1.inputs);
      CHECK(*a->slot_take("j2", "t1", 1, 4, &r2) == S::kQueued);
      CHECK_FALSE(a->find("t1", "j2"));  // in line: no row yet
    }
    REQUIRE(a->record_start(r1).ok());  // answered at once where recorded with the slot
    REQUIRE(a->record_end("j1", "completed", nlohmann::json::object()).ok());
    CHECK(a->find("t1", "j1")->status == "completed");
    if (!b->shared()) continue;
    CHECK(*a->slot_take("j2", "t1", 1, 4, &r2) == S::kRunning);  // moved up: recorded now
    CHECK(a->find("t1", "j2"));
    a->slot_release("j2");  // the call failed before its job started
    CHECK_FALSE(a->find("t1", "j2"));
    CHECK(unit::pg_exec(b->database, "SELECT count(*) FROM tenant_slots") == "0");
    // Released after its start was recorded: the row stays (its end is what ends it).
    CHECK(*a->slot_take("j3", "t1", 1, 4, &r3) == S::kRunning);
    REQUIRE(a->record_start(r3).ok());
    a->slot_release("j3");
    CHECK(a->find("t1", "j3"));
    // With a key: the row is the key's; a second job with the same key (on
    // another server) is refused a conflict and holds no slot; the same take
    // sent again (a lost connection) finds its own row.
    auto c = b->open();
    const broker::LedgerRow k1 = row("k1", "key1", "t2"), k2 = row("k2", "key1", "t2");
    CHECK(*a->slot_take("k1", "t2", 2, 4, &k1) == S::kRunning);
    CHECK(a->find_by_key("t2", "key1")->job_id == "k1");
    auto taken = c->slot_take("k2", "t2", 2, 4, &k2);
    REQUIRE_FALSE(taken.ok());
    CHECK(taken.error().code == util::ErrorCode::kConflict);
    CHECK(unit::pg_exec(b->database, "SELECT count(*) FROM tenant_slots WHERE job_id = 'k2'") == "0");
    // Refused at once even where the tenant's slots are all taken: the
    // key is read before a place in line is.
    auto full = c->slot_take("k2", "t2", 1, 4, &k2);
    REQUIRE_FALSE(full.ok());
    CHECK(full.error().code == util::ErrorCode::kConflict);
    CHECK(unit::pg_exec(b->database, "SELECT count(*) FROM tenant_slots WHERE job_id = 'k2'") == "0");
    CHECK(*a->slot_take("k1", "t2", 2, 4, &k1) == S::kRunning);
    REQUIRE(a->record_start(k1).ok());
    REQUIRE(a->record_end("k1", "completed", nlohmann::json::object()).ok());
    CHECK(a->find_by_key("t2", "key1")->status == "completed");
  }
}

TEST_CASE("ledger backends: a lost server's tenant slots come back once its lease runs out") {
  using S = broker::Ledger::SlotState;
  for (auto& b : unit::ledger_backends()) {
    if (!b->shared()) continue;
    lose_a_server(*b, 1000, [](broker::Ledger& a) {
      return *a.slot_take("x1", "t1", 2, 4) == S::kRunning && *a.slot_take("x2", "t1", 2, 4) == S::kRunning;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // its lease has run out
    // A server that has not yet renewed its own lease for a whole lease (just
    // started, or back from a database outage in which every lease ran out)
    // frees no other server's slots: the dead server's two still count.
    auto live = b->open(3000);
    CHECK(*live->slot_take("y1", "t1", 2, 4) == S::kQueued);
    S got = S::kQueued;
    for (int i = 0; i < 100 && got != S::kRunning; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      got = *live->slot_take("y1", "t1", 2, 4);
    }
    CHECK(got == S::kRunning);
  }
}

TEST_CASE("ledger backends: a server that stops cleanly gives its tenant slots back at once") {
  using S = broker::Ledger::SlotState;
  for (auto& b : unit::ledger_backends()) {
    if (!b->shared()) continue;
    auto live = b->open();
    {
      auto going = b->open();
      CHECK(*going->slot_take("g1", "t1", 1, 4) == S::kRunning);
      CHECK(*live->slot_take("h1", "t1", 1, 4) == S::kQueued);
    }  // closed: its lease given back, its running rows failed, its slots freed
    CHECK(*live->slot_take("h1", "t1", 1, 4) == S::kRunning);
  }
}

TEST_CASE("ledger backends: a workspace is held by one server at a time; a held one is neither closed nor expired") {
  for (auto& b : unit::ledger_backends()) {
    CAPTURE(b->name);
    auto a = b->open();
    auto c = b->open();
    const int64_t now = wall_ms();
    REQUIRE(a->workspace_insert(workspace("w1", "t1", now, 60'000)).ok());
    REQUIRE(a->workspace_insert(workspace("w2", "t1", now - 120'000, 60'000)).ok());  // expired a minute ago
    CHECK(*a->workspace_hold("t1", "w1"));
    if (!b->shared()) continue;                   // one server: its Workspaces keeps the one call at a time
    CHECK_FALSE(*c->workspace_hold("t1", "w1"));  // another server's call: busy
    CHECK_FALSE(*c->workspace_hold("t2", "w1"));  // another tenant's: never
    CHECK(*c->workspace_close("t1", "w1", now, "close_workspace") == false);
    CHECK(c->workspace_find("t1", "w1", now));  // still open
    CHECK(*a->workspace_hold("t1", "w2"));
    CHECK(c->workspace_expired(now).empty());  // w2 is expired but held
    a->workspace_unhold("w1");
    a->workspace_unhold("w2");
    CHECK(c->workspace_expired(now).size() == 1);
    CHECK(*c->workspace_hold("t1", "w1"));
    c->workspace_unhold("w1");
    CHECK(*c->workspace_close("t1", "w1", now, "close_workspace") == true);
    CHECK_FALSE(*a->workspace_hold("t1", "w1"));  // closed
  }
}

TEST_CASE("ledger backends: a lost server's workspace hold goes with its lease") {
  for (auto& b : unit::ledger_backends()) {
    if (!b->shared()) continue;
    {
      auto setup = b->open();
      REQUIRE(setup->workspace_insert(workspace("w1", "t1", wall_ms(), 600'000)).ok());
    }
    lose_a_server(*b, 1000, [](broker::Ledger& a) { return *a.workspace_hold("t1", "w1"); });
    auto live = b->open();
    bool held = *live->workspace_hold("t1", "w1");
    CHECK_FALSE(held);  // the dead server's lease still runs
    for (int i = 0; i < 100 && !held; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      held = *live->workspace_hold("t1", "w1");
    }
    CHECK(held);
  }
}

TEST_CASE("ledger backends: an unreachable database is a clear error at open") {
  unit::TempDir none("pg-none");  // a socket directory with no server in it
  auto l = broker::Ledger::open("postgresql:///nothing?host=" + none.path + "&connect_timeout=2");
  REQUIRE_FALSE(l.ok());
  CHECK(l.error().message.find("cannot connect") != std::string::npos);
}

TEST_CASE("database URIs: a password is refused and never shown") {
  CHECK(util::is_database_uri("postgresql://db.example/throwbox"));
  CHECK(util::is_database_uri("postgres://db.example/throwbox"));
  CHECK_FALSE(util::is_database_uri("/var/lib/throwbox/ledger.sqlite3"));
  CHECK(util::database_uri_problem("postgresql://tb@db.example:5432/throwbox?sslmode=verify-full").empty());
  CHECK(util::database_uri_problem("postgresql:///throwbox?host=/run/postgresql").empty());
  CHECK(util::database_uri_problem("postgresql://tb:s3cret@db.example/throwbox").find("password") != std::string::npos);
  CHECK(
      util::database_uri_problem("postgresql://db.example/throwbox?sslmode=require&password=s3cret").find("password") !=
      std::string::npos);
  CHECK(util::database_uri_problem("mysql://db.example/x").find("not a PostgreSQL") != std::string::npos);
  CHECK(util::redact_database_uri("postgresql://tb:s3cret@db.example/throwbox") ==
        "postgresql://tb:***@db.example/throwbox");
  CHECK(util::redact_database_uri("postgresql://db/x?password=s3cret&sslmode=require") ==
        "postgresql://db/x?password=***&sslmode=require");
  auto refused = broker::Ledger::open("postgresql://tb:s3cret@127.0.0.1:1/throwbox");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("s3cret") == std::string::npos);
  CHECK(refused.error().code == util::ErrorCode::kInvalidArgument);
}
