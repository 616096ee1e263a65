// The broker's job path with a fake runner (tests/fakes/fake_runner.cpp,
// built as build/fake-runner beside the parser helper): a request is
// admitted, recorded, launched, read back from the runner's lines, its files
// taken through the parser helper and the gate, and its key replayed. No
// sandbox is built; what the runner says is what the job code asks for.
#include <doctest/doctest.h>

#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/broker/jobs.h"
#include "server/policy/live.h"
#include "server/policy/policy.h"
#include "server/store/store.h"
#include "tests/unit/paths.h"

using nlohmann::json;

namespace {

const std::string kFakeRunner = unit::build_path("/fake-runner");

struct Fixture {
  std::string dir;
  std::unique_ptr<policy::Live> live;
  std::unique_ptr<store::Store> store;
  std::unique_ptr<broker::Jobs> jobs;

  Fixture() {
    spdlog::set_level(spdlog::level::err);
    char tmpl[] = "/tmp/throwbox-job-path-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    auto p = policy::load_file(unit::source_path("/policies/default.json"));
    REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
    p->pool.enabled = false;  // every job cold: one fake runner each
    live = std::make_unique<policy::Live>(std::make_shared<const policy::Policy>(std::move(*p)));
    store = std::make_unique<store::Store>(dir);
    jobs = std::make_unique<broker::Jobs>(*live, *store, kFakeRunner, json::object());
    jobs->reclaim_leftovers();
    jobs->start_pool();  // the parser helper and a spare (fake) runner
  }
  ~Fixture() {
    jobs.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  util::Result<broker::JobResult> run(const std::string& code, const std::string& key = "",
                                      std::shared_ptr<broker::Cancellation> cancel = nullptr) {
    broker::JobRequest r;
    r.tenant = "alice";
    r.runtime = "python";
    r.code = code;
    r.idempotency_key = key;
    r.cancel = std::move(cancel);
    return jobs->run(r);
  }
};

bool have_runtime() { return ::access("/usr/bin/python3", X_OK) == 0 && ::access(kFakeRunner.c_str(), X_OK) == 0; }

}  // namespace

TEST_CASE("a job's status, exit code and output are what its runner said, and the ledger keeps them") {
  REQUIRE_MESSAGE(have_runtime(), "needs /usr/bin/python3 and build/fake-runner (scripts/test builds it)");
  Fixture f;
  auto r = f.run("stdout hello\nstderr careful\nexit 3\n");
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  CHECK(r->outcome.status == sandbox::Status::failed);
  CHECK(r->outcome.exit_code == 3);
  CHECK(r->outcome.stdout_text == "hello\n");
  CHECK(r->outcome.stderr_text == "careful\n");
  CHECK(r->job_id.size() == 32);
  auto row = f.jobs->find_record("alice", r->job_id);
  REQUIRE(row);
  CHECK(row->status == "failed");
  CHECK_FALSE(f.jobs->find_record("mallory", r->job_id));  // another tenant's id is unknown
}

TEST_CASE("a runner that ends without an outcome, or says something else, never reads as success") {
  REQUIRE_MESSAGE(have_runtime(), "needs /usr/bin/python3 and build/fake-runner (scripts/test builds it)");
  Fixture f;
  for (const char* code : {"stdout partial\ndie\n", "garbage\n"}) {
    CAPTURE(code);
    auto r = f.run(code);
    if (r.ok()) {
      CHECK(r->outcome.status == sandbox::Status::sandbox_error);
      CHECK_FALSE(r->outcome.error.empty());
    } else {
      CHECK(r.error().code == util::ErrorCode::kInternal);
    }
  }
}

TEST_CASE("a key names one run: a repeat replays it, another request under it conflicts") {
  REQUIRE_MESSAGE(have_runtime(), "needs /usr/bin/python3 and build/fake-runner (scripts/test builds it)");
  Fixture f;
  auto first = f.run("stdout once\n", "key-1");
  REQUIRE(first.ok());
  auto again = f.run("stdout once\n", "key-1");
  REQUIRE(again.ok());
  CHECK(again->job_id == first->job_id);
  CHECK(again->outcome.stdout_text == "once\n");
  auto other = f.run("stdout twice\n", "key-1");
  REQUIRE_FALSE(other.ok());
  CHECK(other.error().code == util::ErrorCode::kConflict);
}

TEST_CASE("a cancelled job ends cancelled: the runner is told, the job does not run on") {
  REQUIRE_MESSAGE(have_runtime(), "needs /usr/bin/python3 and build/fake-runner (scripts/test builds it)");
  Fixture f;
  auto cancel = std::make_shared<broker::Cancellation>();
  std::thread canceller([cancel] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cancel->cancel();
  });
  auto r = f.run("wait\n", "", cancel);
  canceller.join();
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  CHECK(r->outcome.status == sandbox::Status::cancelled);
}

TEST_CASE("the files a job wrote pass the gate: an accepted one is stored, a refused one is not") {
  REQUIRE_MESSAGE(have_runtime(), "needs /usr/bin/python3 and build/fake-runner (scripts/test builds it)");
  Fixture f;
  auto r = f.run("file totals.csv region,total\nfile tool.exe MZ\n");
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  REQUIRE(r->artifacts.size() == 2);
  const broker::ArtifactSummary* csv = nullptr;
  const broker::ArtifactSummary* exe = nullptr;
  for (auto& a : r->artifacts) (a.name == "totals.csv" ? csv : exe) = &a;
  REQUIRE(csv);
  REQUIRE(exe);
  CHECK(csv->verdict == artifacts::VerdictKind::kAccepted);
  REQUIRE(csv->artifact_id);
  CHECK(csv->media_type == "text/csv");
  auto stored = f.store->get_artifact("alice", *csv->artifact_id);
  REQUIRE(stored.ok());
  CHECK(exe->verdict == artifacts::VerdictKind::kRejected);
  CHECK_FALSE(exe->artifact_id);
  CHECK_FALSE(exe->reason.empty());
}

TEST_CASE("a runtime the policy does not offer is refused before any runner starts") {
  REQUIRE_MESSAGE(have_runtime(), "needs /usr/bin/python3 and build/fake-runner (scripts/test builds it)");
  Fixture f;
  broker::JobRequest r;
  r.tenant = "alice";
  r.runtime = "cobol";
  r.code = "stdout never\n";
  auto result = f.jobs->run(r);
  REQUIRE_FALSE(result.ok());
  CHECK(result.error().message.find("runtime: \"cobol\" is not offered here") != std::string::npos);
}

TEST_CASE("progress lines reach the caller while the job runs") {
  REQUIRE_MESSAGE(have_runtime(), "needs /usr/bin/python3 and build/fake-runner (scripts/test builds it)");
  Fixture f;
  broker::JobRequest r;
  r.tenant = "alice";
  r.runtime = "python";
  r.code = "progress\nstdout done\n";
  std::vector<json> seen;
  r.on_progress = [&](const json& p) { seen.push_back(p); };
  auto result = f.jobs->run(r);
  REQUIRE(result.ok());
  REQUIRE_FALSE(seen.empty());
  CHECK(seen[0].contains("elapsed_ms"));
}
