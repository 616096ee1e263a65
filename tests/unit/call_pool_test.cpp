// util::CallPool: threads start on demand up to the pool's
// maximum, whatever the number of lanes; a lane's quota refuses calls beyond
// it; a lane's waiting calls queue behind other lanes' ready ones; drain waits.
#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/util/worker_pool.h"

namespace {

// Calls block on a gate until the test opens it.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  int waiting = 0;
  void pass() {
    std::unique_lock lock(mu);
    ++waiting;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
  }
  void release() {
    {
      std::lock_guard lock(mu);
      open = true;
    }
    cv.notify_all();
  }
  // Generous: a slow machine still gets there, a hang fails the test.
  bool await_waiting(int n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(30), [&] { return waiting >= n; });
  }
};

// The order calls ran in.
struct Log {
  std::mutex mu;
  std::vector<std::string> order;
  void add(const std::string& s) {
    std::lock_guard lock(mu);
    order.push_back(s);
  }
};

}  // namespace

TEST_CASE("no thread starts before a call, and never more than the maximum for many lanes") {
  util::CallPool pool(3);
  std::vector<std::unique_ptr<util::CallPool::Lane>> lanes;
  for (int i = 0; i < 20; ++i) lanes.push_back(pool.make_lane(8, 32));
  CHECK(pool.threads() == 0);
  Gate gate;
  for (auto& lane : lanes) REQUIRE(lane->submit([&] { gate.pass(); }));
  REQUIRE(gate.await_waiting(3));
  CHECK(pool.threads() == 3);
  gate.release();
  for (auto& lane : lanes) lane->drain();
  CHECK(gate.waiting == 20);
  CHECK(pool.threads() == 3);
}

TEST_CASE("a lane refuses calls beyond running_max + queued_max and takes them again once they end") {
  util::CallPool pool(8);
  auto lane = pool.make_lane(2, 1);
  Gate gate;
  REQUIRE(lane->submit([&] { gate.pass(); }));
  REQUIRE(lane->submit([&] { gate.pass(); }));
  REQUIRE(gate.await_waiting(2));
  CHECK(lane->submit([&] { gate.pass(); }));  // waits in the lane
  CHECK_FALSE(lane->submit([] {}));           // beyond the quota
  CHECK(pool.threads() == 2);                 // the lane's running_max, not the pool's maximum
  gate.release();
  lane->drain();
  CHECK(gate.waiting == 3);
  CHECK(lane->submit([] {}));
}

TEST_CASE("a lane's waiting calls run behind another lane's ready call") {
  util::CallPool pool(1);
  auto a = pool.make_lane(1, 3);
  auto b = pool.make_lane(1, 3);
  Gate gate;
  Log log;
  REQUIRE(a->submit([&] {
    gate.pass();
    log.add("a1");
  }));
  REQUIRE(gate.await_waiting(1));
  REQUIRE(a->submit([&] { log.add("a2"); }));
  REQUIRE(a->submit([&] { log.add("a3"); }));
  REQUIRE(b->submit([&] { log.add("b1"); }));
  gate.release();
  a->drain();
  b->drain();
  CHECK(log.order == std::vector<std::string>{"a1", "b1", "a2", "a3"});
}

TEST_CASE("a lane ending drains its calls; the pool ends after it") {
  Log log;
  {
    util::CallPool pool(2);
    auto lane = pool.make_lane(1, 4);
    for (int i = 0; i < 5; ++i) REQUIRE(lane->submit([&log, i] { log.add(std::to_string(i)); }));
  }
  CHECK(log.order == std::vector<std::string>{"0", "1", "2", "3", "4"});
}
