// A fixed pool of worker threads with a bounded queue. Owned by the protocol
// session; submit() never blocks: a full queue is reported so the caller can
// answer "busy" instead of hanging. Threads are joined in the destructor.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
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

}  // namespace util
