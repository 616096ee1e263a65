// The audit log (size-bounded rotation, what a record holds) and what only
// the SQLite ledger has (reads beside a write in progress). The ledger's
// contract on every backend: ledger_backend_test.cpp. Temp files only.
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
#include "server/broker/ledger.h"
#include "tests/unit/temp_dir.h"

namespace {
struct TempDir : unit::TempDir {
  TempDir() : unit::TempDir("ledger") {}
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
