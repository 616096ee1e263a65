// WorkerPool and CallPool. One mutex per pool guards its queues and every
// lane's counters: a hold moves a few pointers (or starts a thread), never
// runs a task.
#include "server/util/worker_pool.h"

#include <spdlog/spdlog.h>

#include <system_error>

namespace util {

WorkerPool::WorkerPool(int threads, size_t max_queued) : max_queued_(max_queued) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  threads_.clear();  // jthread joins
}

bool WorkerPool::submit(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (queue_.size() >= max_queued_) return false;
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

void WorkerPool::drain() {
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && running_ == 0; });
}

void WorkerPool::work() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    task();
    {
      std::lock_guard lock(mu_);
      --running_;
    }
    idle_cv_.notify_all();
  }
}

// Guarded by the pool's mu_.
struct CallPool::LaneState {
  size_t running_max = 1;
  size_t queued_max = 0;
  size_t active = 0;                          // ready in the pool or running
  std::deque<std::function<void()>> waiting;  // beyond running_max, in order
};

CallPool::CallPool(size_t threads_max) : threads_max_(threads_max > 0 ? threads_max : 1) {}

CallPool::~CallPool() {
  std::vector<std::jthread> threads;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  threads.clear();  // jthread joins once the ready calls have run
}

std::unique_ptr<CallPool::Lane> CallPool::make_lane(size_t running_max, size_t queued_max) {
  auto state = std::make_shared<LaneState>();
  state->running_max = running_max > 0 ? running_max : 1;
  state->queued_max = queued_max;
  return std::unique_ptr<Lane>(new Lane(*this, std::move(state)));
}

size_t CallPool::threads() {
  std::lock_guard lock(mu_);
  return threads_.size();
}

CallPool::Lane::~Lane() { drain(); }
bool CallPool::Lane::submit(std::function<void()> task) { return pool_.submit(state_, std::move(task)); }
void CallPool::Lane::drain() { pool_.drain(*state_); }

bool CallPool::submit(const std::shared_ptr<LaneState>& lane, std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (lane->active < lane->running_max) {
      if (!make_ready(Ready{lane, std::move(task)})) return false;
      ++lane->active;
    } else if (lane->waiting.size() < lane->queued_max) {
      lane->waiting.push_back(std::move(task));
      return true;
    } else {
      return false;
    }
  }
  cv_.notify_one();
  return true;
}

bool CallPool::make_ready(Ready r) {
  ready_.push_back(std::move(r));
  // Every idle thread will take one ready call; start one for the rest.
  if (stopping_ || ready_.size() <= idle_threads_ || threads_.size() >= threads_max_) return true;
  try {
    threads_.emplace_back([this] { work(); });
  } catch (const std::system_error& e) {
    // No thread to be had (RLIMIT_NPROC, memory): the call waits for a
    // running thread, or is refused when there is none.
    spdlog::warn("call pool: cannot start a thread ({}); {} running", e.what(), threads_.size());
    if (threads_.empty()) {
      ready_.pop_back();
      return false;
    }
  }
  return true;
}

void CallPool::drain(LaneState& lane) {
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [&] { return lane.active == 0 && lane.waiting.empty(); });
}

void CallPool::work() {
  std::unique_lock lock(mu_);
  for (;;) {
    ++idle_threads_;
    cv_.wait(lock, [&] { return stopping_ || !ready_.empty(); });
    --idle_threads_;
    if (ready_.empty()) return;  // stopping and nothing left
    Ready r = std::move(ready_.front());
    ready_.pop_front();
    lock.unlock();
    r.task();
    r.task = nullptr;  // its captures go before the lane can be seen idle
    lock.lock();
    LaneState& lane = *r.lane;
    if (!lane.waiting.empty()) {
      // The lane's next call joins the back of the line, behind other
      // lanes'; this thread is about to take a ready call, so none starts.
      std::function<void()> next = std::move(lane.waiting.front());
      lane.waiting.pop_front();
      ready_.push_back(Ready{std::move(r.lane), std::move(next)});
    } else if (--lane.active == 0) {
      idle_cv_.notify_all();
    }
  }
}

}  // namespace util
