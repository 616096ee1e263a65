// What a reload (SIGHUP, `systemctl reload`) reloads: named steps, each run
// in turn on the reloading thread. A step says what it changed, or why it
// changed nothing: a failed step keeps what was in force and the others
// still run. Thread-safe; steps may be added and removed while others run.
#pragma once
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "server/util/result.h"

namespace util {

class Reloads {
 public:
  // A summary of what changed ("unchanged", "3 tokens"), or why nothing did.
  using Step = std::function<util::Result<std::string>()>;
  void add(const std::string& name, Step step);
  // Waits for a reload running now: the step's owner may be destroyed after.
  void remove(const std::string& name);
  // Every step, each logged ("reload: tokens: 3 tokens (was 2)", or "reload:
  // policy: not reloaded, the running one stays: ..."). True when none failed.
  bool run();

 private:
  std::mutex mu_;  // the list; a run copies it first
  std::vector<std::pair<std::string, Step>> steps_;
  std::mutex running_;  // one reload at a time
};

}  // namespace util
