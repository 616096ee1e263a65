// A thread that runs a task every interval (a janitor pass) until stopped.
// stop() and the destructor wake it at once and wait for a pass in progress.
#pragma once
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <stop_token>
#include <thread>
#include <utility>

namespace util {

class Periodic {
 public:
  Periodic() = default;
  Periodic(std::chrono::milliseconds interval, std::function<void()> task)
      : thread_([interval, task = std::move(task)](std::stop_token stop) {
          std::mutex m;
          std::condition_variable_any cv;
          std::unique_lock lock(m);
          // wait_for returns early (false) only when a stop is requested.
          while (!cv.wait_for(lock, stop, interval, [] { return false; })) {
            if (stop.stop_requested()) return;
            task();
          }
        }) {}
  Periodic(Periodic&&) = default;
  Periodic& operator=(Periodic&&) = default;
  ~Periodic() { stop(); }

  void stop() {
    thread_.request_stop();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::jthread thread_;
};

}  // namespace util
