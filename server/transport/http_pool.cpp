// The HTTP endpoint's workers and the server they serve with (http_pool.h).
#include "server/transport/http_pool.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <system_error>

namespace transport::http {
namespace {

// Set while a connection is served by the overflow path: answer 503 at once.
thread_local bool t_overloaded = false;

// The request a worker is serving, and its length as the intake
// saw it (0: unknown).
thread_local const DeadlineStream* t_serving = nullptr;
thread_local size_t t_serving_bytes = 0;
// The request being served has an Authorization line cpp-httplib cannot read.
thread_local bool t_authorization_too_long = false;

}  // namespace

bool serving_overloaded() { return t_overloaded; }
bool authorization_too_long() { return t_authorization_too_long; }

BoundedQueue::BoundedQueue(size_t workers, size_t max_queued) : max_(max_queued) {
  serve_.threads_max = workers;
  reject_.threads_max = kRejectWorkers;
  reject_.overloaded = true;
}

void BoundedQueue::enqueue(std::function<void()> fn) {
  if (!submit(fn)) spdlog::error("http: a task was dropped (no worker)");
}

bool BoundedQueue::submit(std::function<void()>& fn) {
  std::lock_guard lock(mu_);
  Workers* to = serve_.queue.size() < max_ ? &serve_ : reject_.queue.size() < max_ ? &reject_ : nullptr;
  if (!to || !worker_for_one_more(*to)) return false;
  to->queue.push_back(std::move(fn));
  cv_.notify_all();
  return true;
}

void BoundedQueue::shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (auto& t : threads) t.join();
}

bool BoundedQueue::worker_for_one_more(Workers& w) {
  if (stopping_) return false;
  if (w.queue.size() < w.idle) return true;
  if (w.started >= w.threads_max) return w.started > 0;
  try {
    threads_.emplace_back([this, &w] { work(w); });
    ++w.started;
    return true;
  } catch (const std::system_error& e) {
    spdlog::warn("http: cannot start a worker ({}); {} running", e.what(), w.started);
    return w.started > 0;
  }
}

void BoundedQueue::work(Workers& w) {
  std::unique_lock lock(mu_);
  for (;;) {
    ++w.idle;
    cv_.wait(lock, [&] { return stopping_ || !w.queue.empty(); });
    --w.idle;
    if (w.queue.empty()) return;
    std::function<void()> fn = std::move(w.queue.front());
    w.queue.pop_front();
    lock.unlock();
    t_overloaded = w.overloaded;
    fn();
    t_overloaded = false;
    fn = nullptr;  // the connection's state goes outside the lock
    lock.lock();
  }
}

bool IntakeServer::serve_one(Connection& c) {
  const size_t expected = c.request_bytes;
  const bool last = ++c.requests >= kKeepAliveRequestsMax || !is_running() || t_overloaded || expected == 0;
  DeadlineStream strm(c, std::chrono::seconds(kReadTimeoutS), std::chrono::seconds(kReadTimeoutS));
  t_serving = &strm;
  t_serving_bytes = expected;
  t_authorization_too_long = c.authorization_too_long;
  bool closed = false;
  const bool ok = process_request(strm, last, closed, nullptr);
  t_serving = nullptr;
  t_authorization_too_long = false;
  return ok && !closed && !last && !strm.deadline_passed() && strm.bytes_read() == expected;
}

void IntakeServer::say_if_closing(httplib::Response& res) {
  if (t_serving && t_serving->bytes_read() != t_serving_bytes) res.set_header("Connection", "close");
}

}  // namespace transport::http
