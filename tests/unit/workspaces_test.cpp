// broker::Workspaces as a hostile tenant would try it: an expired workspace
// counts until its tree is gone and is deleted when its tenant is next seen;
// deleting one tenant's trees (close, expiry, the janitor) never holds the
// lock another tenant's open, call or close waits on.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <string>
#include <thread>

#include "server/broker/ledger.h"
#include "server/broker/workspaces.h"
#include "server/util/fs.h"
#include "tests/unit/temp_dir.h"

namespace {

struct TempDir : unit::TempDir {
  TempDir() : unit::TempDir("workspaces") {}
};

// A deletion of a tree whose path names `held` waits, while armed, until the test lets it go.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  std::string held;
  bool armed = false, entered = false, open = false;
  util::Status remove(const std::string& path) {
    std::unique_lock lock(mu);
    if (armed && path.find(held) != std::string::npos) {
      entered = true;
      cv.notify_all();
      cv.wait(lock, [&] { return open; });
    }
    lock.unlock();
    return util::remove_tree(path);
  }
  void wait_entered() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return entered; });
  }
  void release() {
    std::lock_guard lock(mu);
    open = true;
    cv.notify_all();
  }
};

policy::Workspaces small_policy() {
  policy::Workspaces p;
  p.per_tenant_max = 2;
  p.ttl_s_default = 60;
  p.ttl_s_max = 60;
  return p;
}

void fill(const std::string& dir) { std::ofstream(dir + "/data.bin") << std::string(4096, 'x'); }

size_t entries(const std::string& dir) {
  size_t n = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

// Makes the tenant's workspace expired in the ledger, as time would: its row
// again, with an expiry in the past.
void age(broker::Ledger& ledger, const std::string& tenant, const std::string& id) {
  auto row = ledger.workspace_find(tenant, id, 0);
  REQUIRE(row);
  REQUIRE(ledger.workspace_close(tenant, id, 1, "test"));
  ledger.workspace_forget(0);
  row->expires_ms = 1;
  row->closed_ms = 0;
  row->closed_by.clear();
  REQUIRE(ledger.workspace_insert(*row));
}

}  // namespace

TEST_CASE("an expired workspace counts until its tree is gone, and goes when its tenant opens again") {
  TempDir d;
  auto ledger = broker::Ledger::open(d.path + "/ledger.sqlite3");
  REQUIRE(ledger);
  const policy::Workspaces p = small_policy();
  broker::Workspaces ws(p, d.path + "/workspaces", **ledger);

  auto a = ws.open("mallory", std::nullopt);
  auto b = ws.open("mallory", std::nullopt);
  REQUIRE(a);
  REQUIRE(b);
  fill(d.path + "/workspaces/" + a->workspace_id);
  CHECK(ws.count("mallory") == 2);
  CHECK(ws.open("mallory", std::nullopt).error().code == util::ErrorCode::kBusy);

  // Expired, never closed, its tree still there: it still counts.
  age(**ledger, "mallory", a->workspace_id);
  CHECK(std::filesystem::exists(d.path + "/workspaces/" + a->workspace_id));
  CHECK((*ledger)->workspace_count("mallory") == 2);

  // The tenant's next open deletes it first, then opens: never more trees than the cap.
  auto c = ws.open("mallory", std::nullopt);
  REQUIRE(c);
  CHECK_FALSE(std::filesystem::exists(d.path + "/workspaces/" + a->workspace_id));
  CHECK(entries(d.path + "/workspaces") == 2);
  CHECK(ws.count("mallory") == 2);
  // The expired one reads as unknown, like any id that is not open.
  CHECK(ws.begin("mallory", a->workspace_id).error().code == util::ErrorCode::kNotFound);
}

TEST_CASE("an expired workspace is deleted when its tenant calls with it, not only by the janitor") {
  TempDir d;
  auto ledger = broker::Ledger::open(d.path + "/ledger.sqlite3");
  REQUIRE(ledger);
  const policy::Workspaces p = small_policy();
  broker::Workspaces ws(p, d.path + "/workspaces", **ledger);
  auto a = ws.open("mallory", std::nullopt);
  REQUIRE(a);
  fill(d.path + "/workspaces/" + a->workspace_id);
  age(**ledger, "mallory", a->workspace_id);
  CHECK(ws.begin("mallory", a->workspace_id).error().code == util::ErrorCode::kNotFound);
  CHECK(entries(d.path + "/workspaces") == 0);
  CHECK(ws.count("mallory") == 0);
}

TEST_CASE("deleting one tenant's trees holds no lock another tenant's calls take") {
  TempDir d;
  auto ledger = broker::Ledger::open(d.path + "/ledger.sqlite3");
  REQUIRE(ledger);
  const policy::Workspaces p = small_policy();
  Gate gate;
  broker::Workspaces ws(p, d.path + "/workspaces", **ledger,
                        [&](const std::string& path) { return gate.remove(path); });

  auto closing = ws.open("mallory", std::nullopt);
  auto expiring = ws.open("mallory", std::nullopt);
  auto bobs = ws.open("bob", std::nullopt);
  REQUIRE(closing);
  REQUIRE(expiring);
  REQUIRE(bobs);
  age(**ledger, "mallory", expiring->workspace_id);
  const std::string bob_id = bobs->workspace_id;

  for (const char* what : {"the janitor", "close_workspace"}) {
    CAPTURE(what);
    gate.held = std::string(what) == "close_workspace" ? closing->workspace_id : expiring->workspace_id;
    gate.armed = true;
    gate.entered = gate.open = false;
    std::future<void> slow = std::async(std::launch::async, [&] {
      if (std::string(what) == "close_workspace")
        CHECK(ws.close("mallory", closing->workspace_id));
      else
        CHECK(ws.expire(86400) == 1);
    });
    gate.wait_entered();  // mallory's tree is being deleted, and is held there
    // Bob's open, call and close go on meanwhile.
    std::future<void> bob = std::async(std::launch::async, [&] {
      auto use = ws.begin("bob", bob_id);
      REQUIRE(use);
      (*use)->finish(false, 0);
      auto another = ws.open("bob", std::nullopt);
      REQUIRE(another);
      CHECK(ws.close("bob", another->workspace_id));
    });
    const bool bob_done = bob.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
    CHECK_MESSAGE(bob_done, "bob's calls waited on mallory's deletion");
    gate.release();
    slow.get();
    if (bob_done) bob.get();
    gate.armed = false;
  }
  CHECK(ws.count("mallory") == 0);
}
