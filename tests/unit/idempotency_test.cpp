// The idempotency rule without a runner: a fake ledger and fake runs. A
// repeated key with the same request never runs twice; a different request
// under a used key is a conflict, whether the first call is running or ended.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "server/broker/idempotency.h"
#include "server/broker/job_records.h"

namespace {

const std::string kConflict =
    "idempotency_key: \"k\" was already used for a different request (runtime, code, input_ids, timeout_s, "
    "network, workspace_id, artifact_ids or checks differ); use a new key for a new request";

// A ledger of ended jobs, by tenant and key.
struct FakeLedger {
  std::mutex mu;
  std::map<std::string, broker::LedgerRow> rows;
  std::atomic<int> reads{0};
  void put(const std::string& tenant, const std::string& key, const std::string& sha, const std::string& job_id) {
    broker::JobResult r;
    r.job_id = job_id;
    r.outcome.status = sandbox::Status::completed;
    r.outcome.stdout_text = "recorded\n";
    broker::LedgerRow row;
    row.job_id = job_id;
    row.tenant = tenant;
    row.idempotency_key = key;
    row.request_sha256 = sha;
    row.status = "completed";
    row.result = broker::recorded_result(r);
    std::lock_guard lock(mu);
    rows[tenant + '/' + key] = row;
  }
  broker::Idempotency::FindRecorded finder() {
    return [this](const std::string& tenant, const std::string& key) -> std::optional<broker::LedgerRow> {
      ++reads;
      std::lock_guard lock(mu);
      auto it = rows.find(tenant + '/' + key);
      if (it == rows.end()) return std::nullopt;
      return it->second;
    };
  }
};

broker::JobResult ran(const std::string& job_id) {
  broker::JobResult r;
  r.job_id = job_id;
  r.outcome.status = sandbox::Status::completed;
  return r;
}

}  // namespace

TEST_CASE("request_sha256: everything that changes what runs, nothing else") {
  broker::JobRequest a;
  a.tenant = "alice";
  a.runtime = "python";
  a.code = "print(1)";
  broker::JobRequest b = a;
  b.tenant = "bob";
  b.idempotency_key = "other";
  CHECK(broker::request_sha256(a) == broker::request_sha256(b));
  CHECK(broker::request_sha256(a).size() == 64);
  for (auto change :
       {+[](broker::JobRequest& r) { r.runtime = "sh"; }, +[](broker::JobRequest& r) { r.code += " "; },
        +[](broker::JobRequest& r) { r.input_ids = {"i"}; }, +[](broker::JobRequest& r) { r.timeout_s = 5; },
        +[](broker::JobRequest& r) { r.network = "web"; }, +[](broker::JobRequest& r) { r.workspace_id = "w"; },
        +[](broker::JobRequest& r) { r.artifact_ids = {"a"}; }}) {
    broker::JobRequest c = a;
    change(c);
    CHECK(broker::request_sha256(c) != broker::request_sha256(a));
  }
}

TEST_CASE("no key: every call runs, and the ledger is not read") {
  FakeLedger ledger;
  broker::Idempotency keys(ledger.finder());
  int runs = 0;
  auto run = [&] { return util::Result<broker::JobResult>(ran("j" + std::to_string(++runs))); };
  CHECK(keys.run("alice", "", "sha", run)->job_id == "j1");
  CHECK(keys.run("alice", "", "sha", run)->job_id == "j2");
  CHECK(runs == 2);
  CHECK(ledger.reads == 0);
}

TEST_CASE("same key, same request, after it ended: the recorded result, not a second run") {
  FakeLedger ledger;
  ledger.put("alice", "k", "sha1", "first");
  broker::Idempotency keys(ledger.finder());
  int runs = 0;
  auto got = keys.run("alice", "k", "sha1", [&] {
    ++runs;
    return util::Result<broker::JobResult>(ran("x"));
  });
  REQUIRE(got.ok());
  CHECK(runs == 0);
  CHECK(got->job_id == "first");
  CHECK(got->outcome.status == sandbox::Status::completed);
  CHECK(got->outcome.stdout_text == "recorded\n");
}

TEST_CASE("same key, different request, after it ended: a conflict") {
  FakeLedger ledger;
  ledger.put("alice", "k", "sha1", "first");
  broker::Idempotency keys(ledger.finder());
  int runs = 0;
  auto got = keys.run("alice", "k", "sha2", [&] {
    ++runs;
    return util::Result<broker::JobResult>(ran("x"));
  });
  REQUIRE_FALSE(got.ok());
  CHECK(runs == 0);
  CHECK(got.error().code == util::ErrorCode::kConflict);
  CHECK(got.error().message == kConflict);
}

TEST_CASE("keys are per tenant") {
  FakeLedger ledger;
  ledger.put("alice", "k", "sha1", "alices");
  broker::Idempotency keys(ledger.finder());
  auto got = keys.run("bob", "k", "sha2", [] { return util::Result<broker::JobResult>(ran("bobs")); });
  REQUIRE(got.ok());
  CHECK(got->job_id == "bobs");
}

TEST_CASE("a new key runs once; its run's error is returned as is") {
  FakeLedger ledger;
  broker::Idempotency keys(ledger.finder());
  auto got = keys.run("alice", "k", "sha1", [] {
    return util::Result<broker::JobResult>(util::make_error(util::ErrorCode::kBusy, "busy: retry in 3 s"));
  });
  REQUIRE_FALSE(got.ok());
  CHECK(got.error().code == util::ErrorCode::kBusy);
  CHECK(got.error().message == "busy: retry in 3 s");
  CHECK(ledger.reads == 1);
}

namespace {

// Repeats arriving while the first call runs: the same request waits for and
// shares its result, a different one is refused at once. Without find_first
// the first call's run says when its row is in (recorded()).
void concurrent_repeats(bool find_first) {
  FakeLedger ledger;
  broker::Idempotency keys(ledger.finder());
  std::promise<void> let_go;
  std::shared_future<void> go = let_go.get_future().share();
  std::promise<void> running;
  std::atomic<int> runs{0};
  auto first = std::async(std::launch::async, [&] {
    return keys.run(
        "alice", "k", "sha1",
        [&] {
          ++runs;
          if (!find_first) keys.recorded("alice", "k");
          running.set_value();
          go.wait();  // the repeats arrive while this runs
          return util::Result<broker::JobResult>(ran("shared"));
        },
        find_first);
  });
  running.get_future().wait();
  auto same = std::async(std::launch::async, [&] {
    return keys.run(
        "alice", "k", "sha1",
        [&] {
          ++runs;
          return util::Result<broker::JobResult>(ran("second"));
        },
        find_first);
  });
  // A different request is refused while the first still runs.
  auto other = keys.run(
      "alice", "k", "sha2",
      [&] {
        ++runs;
        return util::Result<broker::JobResult>(ran("third"));
      },
      find_first);
  REQUIRE_FALSE(other.ok());
  CHECK(other.error().code == util::ErrorCode::kConflict);
  CHECK(other.error().message == kConflict);
  CHECK(same.wait_for(std::chrono::milliseconds(50)) == std::future_status::timeout);  // waits for the first
  let_go.set_value();
  auto a = first.get();
  auto b = same.get();
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->job_id == "shared");
  CHECK(b->job_id == "shared");
  CHECK(runs == 1);
  CHECK(ledger.reads == (find_first ? 1 : 0));
}

}  // namespace

TEST_CASE("concurrent repeats: the same request shares the first run, a different one conflicts") {
  concurrent_repeats(true);
}

TEST_CASE("no lock is held across the ledger read: another key proceeds meanwhile") {
  std::promise<void> reading;
  std::promise<void> let_go;
  std::shared_future<void> go = let_go.get_future().share();
  broker::Idempotency keys([&](const std::string&, const std::string& key) -> std::optional<broker::LedgerRow> {
    if (key == "slow") {
      reading.set_value();
      go.wait();
    }
    return std::nullopt;
  });
  auto slow = std::async(std::launch::async, [&] {
    return keys.run("alice", "slow", "sha", [] { return util::Result<broker::JobResult>(ran("slow")); });
  });
  reading.get_future().wait();
  auto fast = std::async(std::launch::async, [&] {
    return keys.run("alice", "fast", "sha", [] { return util::Result<broker::JobResult>(ran("fast")); });
  });
  const bool fast_done = fast.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  let_go.set_value();
  CHECK(fast_done);
  CHECK(fast.get()->job_id == "fast");
  CHECK(slow.get()->job_id == "slow");
}

TEST_CASE("a first call that throws releases its repeats with an error and frees the key") {
  FakeLedger ledger;
  broker::Idempotency keys(ledger.finder());
  CHECK_THROWS(
      keys.run("alice", "k", "sha1", []() -> util::Result<broker::JobResult> { throw std::runtime_error("boom"); }));
  auto again = keys.run("alice", "k", "sha1", [] { return util::Result<broker::JobResult>(ran("again")); });
  REQUIRE(again.ok());
  CHECK(again->job_id == "again");
}

// Several servers sharing one ledger: the key's job may run on another.

TEST_CASE("a key whose job runs on another server: the repeat waits for its end and replays it, never runs") {
  FakeLedger ledger;
  ledger.put("alice", "k", "sha1", "theirs");
  {
    std::lock_guard lock(ledger.mu);
    ledger.rows["alice/k"].status = "running";
    ledger.rows["alice/k"].result = nullptr;
    ledger.rows["alice/k"].limits = {{"timeout_ms", 5000}};
  }
  broker::Idempotency keys(ledger.finder());
  std::atomic<int> runs{0};
  auto waiting = std::async(std::launch::async, [&] {
    return keys.run("alice", "k", "sha1", [&] {
      ++runs;
      return util::Result<broker::JobResult>(ran("mine"));
    });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(waiting.wait_for(std::chrono::milliseconds(0)) == std::future_status::timeout);  // still waiting
  ledger.put("alice", "k", "sha1", "theirs");                                            // the other server's job ends
  auto got = waiting.get();
  REQUIRE(got.ok());
  CHECK(runs == 0);
  CHECK(got->job_id == "theirs");
  CHECK(got->outcome.stdout_text == "recorded\n");
  CHECK(ledger.reads > 2);  // it read the ledger while it waited
}

TEST_CASE("a key another server's call took first (the row insert lost the race): wait for that job, replay it") {
  FakeLedger ledger;
  broker::Idempotency keys(ledger.finder());
  int runs = 0;
  auto got = keys.run("alice", "k", "sha1", [&]() -> util::Result<broker::JobResult> {
    ++runs;
    // Between this call's read and its row, another server wrote the key's
    // row and finished its job.
    ledger.put("alice", "k", "sha1", "theirs");
    return broker::key_taken();
  });
  REQUIRE(got.ok());
  CHECK(runs == 1);  // it was about to run and did not: its row was refused
  CHECK(got->job_id == "theirs");
  // A different request under the taken key is a conflict.
  FakeLedger other;
  broker::Idempotency keys2(other.finder());
  auto conflict = keys2.run("alice", "k", "sha2", [&]() -> util::Result<broker::JobResult> {
    other.put("alice", "k", "sha1", "theirs");
    return broker::key_taken();
  });
  REQUIRE_FALSE(conflict.ok());
  CHECK(conflict.error().code == util::ErrorCode::kConflict);
  CHECK(conflict.error().message == kConflict);
}

TEST_CASE("another server's job that never ends: the wait is bounded and answers busy") {
  FakeLedger ledger;
  ledger.put("alice", "k", "sha1", "theirs");
  {
    std::lock_guard lock(ledger.mu);
    ledger.rows["alice/k"].status = "running";
    // A timeout far in the past of the wait's bound: only the grace is left.
    ledger.rows["alice/k"].limits = {{"timeout_ms", -59'500}};
  }
  broker::Idempotency keys(ledger.finder());
  auto got = keys.run("alice", "k", "sha1", [&] { return util::Result<broker::JobResult>(ran("mine")); });
  REQUIRE_FALSE(got.ok());
  CHECK(got.error().code == util::ErrorCode::kBusy);
  CHECK(got.error().message.find("still running on another server") != std::string::npos);
}

// Without find_first (a shared ledger): the key is read by the run's own row
// insert; the rule is the same.
TEST_CASE("key read by the run's insert: a new key runs once and the ledger is not read first") {
  FakeLedger ledger;
  broker::Idempotency keys(ledger.finder());
  int runs = 0;
  auto got = keys.run(
      "alice", "k", "sha1",
      [&]() -> util::Result<broker::JobResult> {
        ++runs;
        keys.recorded("alice", "k");
        return ran("mine");
      },
      false);
  REQUIRE(got.ok());
  CHECK(got->job_id == "mine");
  CHECK(runs == 1);
  CHECK(ledger.reads == 0);
  // Its error after its row was in is returned as is, with no read either.
  auto busy = keys.run(
      "alice", "k2", "sha1",
      [&]() -> util::Result<broker::JobResult> {
        keys.recorded("alice", "k2");
        return util::make_error(util::ErrorCode::kBusy, "busy: retry in 3 s");
      },
      false);
  REQUIRE_FALSE(busy.ok());
  CHECK(busy.error().message == "busy: retry in 3 s");
  CHECK(ledger.reads == 0);
}

TEST_CASE("key read by the run's insert: a recorded key is replayed or refused, never run again") {
  FakeLedger ledger;
  ledger.put("alice", "k", "sha1", "first");
  broker::Idempotency keys(ledger.finder());
  // The insert finds the key: the same request replays its recorded result.
  auto replay = keys.run(
      "alice", "k", "sha1", [&]() -> util::Result<broker::JobResult> { return broker::key_taken(); }, false);
  REQUIRE(replay.ok());
  CHECK(replay->job_id == "first");
  CHECK(replay->outcome.stdout_text == "recorded\n");
  // A different request is a conflict.
  auto conflict = keys.run(
      "alice", "k", "sha2", [&]() -> util::Result<broker::JobResult> { return broker::key_taken(); }, false);
  REQUIRE_FALSE(conflict.ok());
  CHECK(conflict.error().message == kConflict);
  // A run that fails before its row is in (an input deleted since the
  // first call, a busy server): the recorded job is still replayed.
  auto input_gone = []() -> util::Result<broker::JobResult> {
    return util::make_error(util::ErrorCode::kNotFound, "input_ids: \"in1\": no such input");
  };
  auto gone = keys.run("alice", "k", "sha1", input_gone, false);
  REQUIRE(gone.ok());
  CHECK(gone->job_id == "first");
  // With no recorded row, that error is the answer.
  auto fresh = keys.run("alice", "new", "sha1", input_gone, false);
  REQUIRE_FALSE(fresh.ok());
  CHECK(fresh.error().code == util::ErrorCode::kNotFound);
}

TEST_CASE("key read by the run's insert: concurrent repeats share the run or conflict once its row is in") {
  concurrent_repeats(false);
}
