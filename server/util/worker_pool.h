// Worker threads for the server. WorkerPool: a fixed pool with a bounded
// queue, owned by one component. CallPool: threads shared by every protocol
// session, each session submitting through a Lane that caps its own calls.
// submit() never blocks: a full queue is reported so the caller can answer
// "busy" instead of hanging. Threads are joined in the destructors.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace util {

class WorkerPool {
 public:
  WorkerPool(int threads, size_t max_queued);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // False when max_queued tasks are already waiting.
  bool submit(std::function<void()> task);
  // Blocks until every submitted task has finished.
  void drain();

 private:
  void work();

  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<std::function<void()>> queue_;
  size_t max_queued_;
  size_t running_ = 0;
  bool stopping_ = false;
  std::vector<std::jthread> threads_;
};

// Threads start on demand, one when a call is ready and no thread is idle, up
// to threads_max, and stay until the pool ends: the count follows the peak of
// calls running at once, never the number of sessions. Ready calls run in the
// order they became ready, whatever their lane.
class CallPool {
  struct LaneState;

 public:
  explicit CallPool(size_t threads_max);
  ~CallPool();  // every Lane must have ended before
  CallPool(const CallPool&) = delete;
  CallPool& operator=(const CallPool&) = delete;

  // One session's share: at most running_max of its calls ready or running,
  // queued_max more waiting behind them in the lane.
  class Lane {
   public:
    ~Lane();  // drains
    Lane(const Lane&) = delete;
    Lane& operator=(const Lane&) = delete;
    // False when running_max + queued_max calls of this lane are in flight.
    bool submit(std::function<void()> task);
    // Blocks until every call submitted to this lane has finished.
    void drain();

   private:
    friend class CallPool;
    Lane(CallPool& pool, std::shared_ptr<LaneState> state) : pool_(pool), state_(std::move(state)) {}
    CallPool& pool_;
    std::shared_ptr<LaneState> state_;
  };
  std::unique_ptr<Lane> make_lane(size_t running_max, size_t queued_max);

  // Threads started so far (for tests and logs).
  size_t threads();

 private:
  struct Ready {
    std::shared_ptr<LaneState> lane;
    std::function<void()> task;
  };
  bool submit(const std::shared_ptr<LaneState>& lane, std::function<void()> task);
  void drain(LaneState& lane);
  // With mu_ held: a call became ready; starts a thread if none is free for
  // it. False (and the call dropped) when no thread exists or can start.
  bool make_ready(Ready r);
  void work();

  const size_t threads_max_;
  std::mutex mu_;
  std::condition_variable cv_;       // a call is ready, or the pool is stopping
  std::condition_variable idle_cv_;  // some lane's last call finished
  std::deque<Ready> ready_;
  size_t idle_threads_ = 0;
  bool stopping_ = false;
  std::vector<std::jthread> threads_;
};

}  // namespace util
