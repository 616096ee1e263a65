// The job ledger (SQLite) and the audit log: records, keys, crash recovery,
// size-bounded rotation, reads beside a write in progress. Temp files only.
#include <doctest/doctest.h>

#include <stdlib.h>
#include <sys/stat.h>

#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>

#include "server/protocol/audit.h"
#include "server/broker/job_records.h"
#include "server/broker/ledger.h"

namespace {
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/throwbox-ledger-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

broker::LedgerRow row(const std::string& id, const std::string& key) {
  broker::LedgerRow r;
  r.job_id = id;
  r.tenant = "t1";
  r.runtime = "python";
  r.code_sha256 = std::string(64, 'a');
  r.inputs = nlohmann::json::array();
  r.limits = {{"timeout_ms", 1000}};
  r.idempotency_key = key;
  r.request_sha256 = std::string(64, 'b');
  return r;
}
}  // namespace

TEST_CASE("a job is recorded before it starts and updated when it ends") {
  TempDir d;
  auto ledger = broker::Ledger::open(d.path + "/ledger.sqlite3");
  REQUIRE(ledger.ok());
  REQUIRE((*ledger)->record_start(row("j1", "k1")).ok());
  auto found = (*ledger)->find("t1", "j1");
  REQUIRE(found);
  CHECK(found->status == "running");
  REQUIRE((*ledger)->record_end("j1", "completed", {{"outcome", {{"status", "completed"}}}}).ok());
  found = (*ledger)->find_by_key("t1", "k1");
  REQUIRE(found);
  CHECK(found->status == "completed");
  CHECK(found->result["outcome"]["status"] == "completed");
  CHECK(found->ended_ms >= found->created_ms);
}

// HTTP GET /jobs/<id> and an idempotent repeat answer from the stored row.
TEST_CASE("a recorded result keeps its cut counts through the ledger; an older row reads them as 0") {
  TempDir d;
  auto ledger = broker::Ledger::open(d.path + "/ledger.sqlite3");
  REQUIRE(ledger.ok());
  broker::JobResult r;
  r.job_id = "j1";
  r.outcome.status = sandbox::Status::failed;
  r.outcome.exited = true;
  r.outcome.exit_code = 1;
  r.outcome.stdout_text = "head\n[throwbox: 1234567 bytes cut here (stdout over its 65536-byte cap)]\ntail\n";
  r.outcome.stdout_truncated = true;
  r.outcome.stdout_cut_bytes = 1234567;
  r.outcome.stderr_cut_bytes = 0;
  REQUIRE((*ledger)->record_start(row("j1", "k1")).ok());
  REQUIRE((*ledger)->record_end("j1", "failed", broker::recorded_result(r)).ok());
  auto found = (*ledger)->find("t1", "j1");
  REQUIRE(found);
  broker::JobResult back = broker::job_result_from_row(*found);
  CHECK(back.outcome.status == sandbox::Status::failed);
  CHECK(back.outcome.stdout_text == r.outcome.stdout_text);
  CHECK(back.outcome.stdout_truncated);
  CHECK(back.outcome.stdout_cut_bytes == 1234567);
  CHECK(back.outcome.stderr_cut_bytes == 0);

  nlohmann::json old = broker::recorded_result(r);
  old["outcome"].erase("stdout_cut_bytes");
  old["outcome"].erase("stderr_cut_bytes");
  REQUIRE((*ledger)->record_start(row("j2", "k2")).ok());
  REQUIRE((*ledger)->record_end("j2", "failed", old).ok());
  found = (*ledger)->find("t1", "j2");
  REQUIRE(found);
  back = broker::job_result_from_row(*found);
  CHECK(back.outcome.status == sandbox::Status::failed);
  CHECK(back.outcome.stdout_text == r.outcome.stdout_text);
  CHECK(back.outcome.stdout_cut_bytes == 0);
}

TEST_CASE("idempotency keys are per tenant and unique within one") {
  TempDir d;
  auto ledger = broker::Ledger::open(d.path + "/ledger.sqlite3");
  REQUIRE(ledger.ok());
  REQUIRE((*ledger)->record_start(row("j1", "same")).ok());
  CHECK_FALSE((*ledger)->record_start(row("j2", "same")).ok());
  auto other = row("j3", "same");
  other.tenant = "t2";
  CHECK((*ledger)->record_start(other).ok());
  CHECK_FALSE((*ledger)->find_by_key("t3", "same"));
  CHECK_FALSE((*ledger)->find("t2", "j1"));  // another tenant's job reads as unknown
}

TEST_CASE("jobs left running by a crash become failed on recovery, and the ledger survives reopening") {
  TempDir d;
  {
    auto ledger = broker::Ledger::open(d.path + "/ledger.sqlite3");
    REQUIRE(ledger.ok());
    REQUIRE((*ledger)->record_start(row("j1", "")).ok());
    REQUIRE((*ledger)->record_start(row("j2", "")).ok());
    REQUIRE((*ledger)->record_end("j2", "completed", nlohmann::json::object()).ok());
  }
  auto ledger = broker::Ledger::open(d.path + "/ledger.sqlite3");
  REQUIRE(ledger.ok());
  CHECK((*ledger)->fail_interrupted("server stopped") == 1);
  CHECK((*ledger)->find("t1", "j1")->status == "failed");
  CHECK((*ledger)->find("t1", "j1")->result["interrupted"] == "server stopped");
  CHECK((*ledger)->find("t1", "j2")->status == "completed");
  struct stat st {};
  REQUIRE(::stat((d.path + "/ledger.sqlite3").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
}

TEST_CASE("the audit log rotates at its size bound and keeps one previous file") {
  TempDir d;
  protocol::Audit audit(d.path + "/audit.log", 400);
  for (int i = 0; i < 20; ++i) audit.append({{"tool", "run_code"}, {"n", i}});
  CHECK(std::filesystem::exists(d.path + "/audit.log.1"));
  CHECK(std::filesystem::file_size(d.path + "/audit.log") <= 400);
  CHECK(std::filesystem::file_size(d.path + "/audit.log.1") <= 400);
  std::ifstream in(d.path + "/audit.log");
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    CHECK(j.contains("time"));
    ++lines;
  }
  CHECK(lines > 0);
}

TEST_CASE("audit records hash code and never carry its text") {
  nlohmann::json args{{"runtime", "python"}, {"code", "print('secret-code')"}, {"input_ids", {"x"}}};
  nlohmann::json result{
      {"isError", false},
      {"structuredContent", {{"job_id", "j"}, {"status", "completed"}, {"artifacts", nlohmann::json::array()}}}};
  auto r = protocol::audit_record("t1", "run_code", args, result, 12);
  CHECK(r.dump().find("secret-code") == std::string::npos);
  CHECK(r["code_sha256"].get<std::string>().size() == 64);
  CHECK(r["job_status"] == "completed");
  CHECK(r["duration_ms"] == 12);
  CHECK_FALSE(r.contains("job_stdout_cut_bytes"));
  result["structuredContent"]["stdout_truncated"] = true;
  result["structuredContent"]["stdout_cut_bytes"] = 4096;
  r = protocol::audit_record("t1", "run_code", args, result, 12);
  CHECK(r["job_stdout_truncated"] == true);
  CHECK(r["job_stdout_cut_bytes"] == 4096);
}

TEST_CASE("task rows: tenant-scoped reads, one terminal transition, recovery and expiry touch the right rows") {
  TempDir d;
  auto ledger = broker::Ledger::open(d.path + "/ledger.sqlite3");
  REQUIRE(ledger.ok());
  auto& l = **ledger;
  auto task = [](const std::string& id, const std::string& tenant, int64_t created) {
    store::TaskRow r;
    r.task_id = id;
    r.tenant = tenant;
    r.tool = "run_code";
    r.created_ms = r.updated_ms = created;
    r.ttl_ms = 1000;
    r.expires_ms = created + 1000;
    return r;
  };
  REQUIRE(l.task_insert(task("a", "t1", 100)).ok());
  REQUIRE(l.task_insert(task("b", "t1", 200)).ok());
  REQUIRE(l.task_insert(task("c", "t2", 300)).ok());
  CHECK_FALSE(l.task_insert(task("a", "t2", 400)).ok());  // ids are unique across tenants

  CHECK(l.task_find("t1", "a", 0));
  CHECK_FALSE(l.task_find("t2", "a", 0));
  CHECK(l.task_count("t1", 0) == 2);
  auto page = l.task_list("t1", 100, "a", 10, 0);
  REQUIRE(page.size() == 1);
  CHECK(page[0].task_id == "b");

  store::TaskRow done = task("a", "t1", 100);
  done.status = "completed";
  done.updated_ms = 150;
  done.expires_ms = 1100;
  done.result = {{"isError", false}};
  CHECK(*l.task_finish(done) == true);
  done.status = "cancelled";
  CHECK(*l.task_finish(done) == false);  // terminal stays terminal
  CHECK(l.task_find("t1", "a", 0)->status == "completed");
  CHECK(l.task_find("t1", "a", 0)->result["isError"] == false);

  CHECK(l.task_fail_interrupted("stopped", {{"isError", true}}, 500, 10'000) == 2);  // b and c, not a
  auto b = l.task_find("t1", "b", 0);
  CHECK(b->status == "failed");
  CHECK(b->status_message == "stopped");
  CHECK(b->expires_ms == 10'500);
  CHECK(l.task_find("t1", "a", 0)->status == "completed");

  CHECK_FALSE(l.task_find("t1", "a", 1100));  // past expiry: reads as absent
  CHECK(l.task_expire("t2", 1100) == 0);
  CHECK(l.task_expire("", 1100) == 1);
  CHECK(l.task_count("t1", 0) == 1);
}

TEST_CASE("a read does not wait behind a write in progress") {
  TempDir d;
  const std::string path = d.path + "/ledger.sqlite3";
  auto ledger = broker::Ledger::open(path);
  REQUIRE(ledger.ok());
  REQUIRE((*ledger)->record_start(row("j1", "k1")).ok());
  // Another connection holds SQLite's write lock, so the ledger's next write
  // waits (busy_timeout) while it holds the ledger's write side.
  sqlite3* other = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &other) == SQLITE_OK);
  REQUIRE(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK);
  std::atomic<bool> written{false};
  auto writer = std::async(std::launch::async, [&] {
    auto s = (*ledger)->record_start(row("j2", "k2"));
    written = true;
    return s.ok();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the write is under way
  auto found = (*ledger)->find("t1", "j1");
  const bool write_still_pending = !written.load();
  REQUIRE(sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(other);
  REQUIRE(found);
  CHECK(found->job_id == "j1");
  CHECK(write_still_pending);
  CHECK(writer.get());
  CHECK((*ledger)->find("t1", "j2"));  // and the read after the write sees it
}
