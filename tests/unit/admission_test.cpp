// broker::Admission: queued jobs are admitted in arrival order, the
// first whose tenant has room; a release wakes the waiter it hands the slot
// to; a cancellation wakes a queued job at once; the busy texts are unchanged.
// Bounds are generous (a hang fails, a slow machine does not).
#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/broker/admission.h"
#include "server/broker/jobs.h"

namespace {

using namespace std::chrono_literals;
constexpr auto kGenerous = 30s;

policy::Admission limits(uint64_t running_max, uint64_t per_tenant_max, uint64_t queued_max) {
  policy::Admission a;
  a.jobs_running_max = running_max;
  a.jobs_running_per_tenant_max = per_tenant_max;
  a.jobs_queued_max = queued_max;
  return a;
}

// Until `queued` jobs wait (or the generous bound passes).
bool await_queued(broker::Admission& a, uint64_t queued) {
  const auto until = std::chrono::steady_clock::now() + kGenerous;
  while (a.load().queued != queued) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

struct Order {
  std::mutex mu;
  std::vector<std::string> seen;
  void add(const std::string& s) {
    std::lock_guard lock(mu);
    seen.push_back(s);
  }
};

}  // namespace

TEST_CASE("queued jobs are admitted in the order they arrived") {
  broker::Admission a(limits(1, 1, 8));
  REQUIRE(a.acquire("t", nullptr));
  Order order;
  std::vector<std::future<void>> waiters;
  for (int i = 1; i <= 5; ++i) {
    // Each job in turn admitted runs, notes itself and ends (release hands its slot on).
    waiters.push_back(std::async(std::launch::async, [&a, &order, i] {
      REQUIRE(a.acquire("t", nullptr));
      order.add(std::to_string(i));
      a.release("t", 0);
    }));
    REQUIRE(await_queued(a, static_cast<uint64_t>(i)));  // arrival order is the order of i
  }
  a.release("t", 0);
  for (auto& w : waiters) REQUIRE(w.wait_for(kGenerous) == std::future_status::ready);
  CHECK(order.seen == std::vector<std::string>{"1", "2", "3", "4", "5"});
  CHECK(a.load().running == 0);
  CHECK(a.load().queued == 0);
}

TEST_CASE("a release wakes the queued job it hands the slot to") {
  broker::Admission a(limits(1, 1, 4));
  REQUIRE(a.acquire("t", nullptr));
  auto waiter = std::async(std::launch::async, [&a] { return a.acquire("t", nullptr).ok(); });
  REQUIRE(await_queued(a, 1));
  CHECK(waiter.wait_for(100ms) == std::future_status::timeout);  // no slot, no admission
  a.release("t", 0);
  REQUIRE(waiter.wait_for(kGenerous) == std::future_status::ready);
  CHECK(waiter.get());
  CHECK(a.load().running == 1);
  a.release("t", 0);
}

TEST_CASE("a tenant at its own limit does not hold up a later tenant with room") {
  broker::Admission a(limits(2, 1, 4));
  REQUIRE(a.acquire("x", nullptr));
  auto x2 = std::async(std::launch::async, [&a] { return a.acquire("x", nullptr).ok(); });
  REQUIRE(await_queued(a, 1));
  CHECK(a.acquire("y", nullptr));  // a free slot, and x's waiter cannot use it
  CHECK(a.load().queued == 1);
  a.release("x", 0);
  REQUIRE(x2.wait_for(kGenerous) == std::future_status::ready);
  CHECK(x2.get());
  a.release("x", 0);
  a.release("y", 0);
  CHECK(a.load().running == 0);
}

TEST_CASE("a cancellation wakes a queued job at once, and its place goes to the next") {
  broker::Admission a(limits(1, 1, 4));
  REQUIRE(a.acquire("t", nullptr));
  auto cancel = std::make_shared<broker::Cancellation>();
  auto first = std::async(std::launch::async, [&a, cancel] { return a.acquire("t", cancel); });
  REQUIRE(await_queued(a, 1));
  auto second = std::async(std::launch::async, [&a] { return a.acquire("t", nullptr).ok(); });
  REQUIRE(await_queued(a, 2));
  cancel->cancel();
  REQUIRE(first.wait_for(kGenerous) == std::future_status::ready);
  auto s = first.get();
  REQUIRE_FALSE(s);
  CHECK(s.error().code == util::ErrorCode::kCancelled);
  CHECK(s.error().message == "cancelled while queued");
  CHECK(a.load().queued == 1);
  a.release("t", 0);
  REQUIRE(second.wait_for(kGenerous) == std::future_status::ready);
  CHECK(second.get());
  a.release("t", 0);
}

TEST_CASE("the busy answers keep their texts") {
  broker::Admission a(limits(1, 1, 1));
  REQUIRE(a.acquire("t", nullptr));
  auto cancel = std::make_shared<broker::Cancellation>();
  auto queued = std::async(std::launch::async, [&a, cancel] { return a.acquire("t", cancel); });
  REQUIRE(await_queued(a, 1));
  auto full = a.acquire("t", nullptr);
  REQUIRE_FALSE(full);
  CHECK(full.error().code == util::ErrorCode::kBusy);
  CHECK(full.error().message == "busy: 1 jobs running and 1 waiting (the policy's limits); retry in a few seconds");
  cancel->cancel();
  REQUIRE(queued.wait_for(kGenerous) == std::future_status::ready);
  a.release("t", 0);

  policy::Admission budget = limits(4, 4, 4);
  budget.cpu_seconds_per_tenant_per_hour = 1;
  broker::Admission b(budget);
  REQUIRE(b.acquire("t", nullptr));
  b.release("t", 1500);
  auto spent = b.acquire("t", nullptr);
  REQUIRE_FALSE(spent);
  CHECK(spent.error().code == util::ErrorCode::kBusy);
  const std::string prefix = "busy: this tenant's CPU budget of 1 CPU seconds per hour is spent; retry in ";
  CHECK(spent.error().message.starts_with(prefix));
  CHECK(spent.error().message.ends_with(" s"));
  const std::string seconds =
      spent.error().message.substr(prefix.size(), spent.error().message.size() - prefix.size() - 2);
  CHECK((seconds == "3600" || seconds == "3601"));
}
