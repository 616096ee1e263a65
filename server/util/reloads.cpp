// Reload steps (reloads.h).
#include "server/util/reloads.h"

#include <algorithm>
#include <spdlog/spdlog.h>

namespace util {

void Reloads::add(const std::string& name, Step step) {
  std::lock_guard lock(mu_);
  steps_.emplace_back(name, std::move(step));
}

void Reloads::remove(const std::string& name) {
  std::lock_guard one(running_);  // a step running now ends first: its owner may go next
  std::lock_guard lock(mu_);
  steps_.erase(std::remove_if(steps_.begin(), steps_.end(), [&](const auto& s) { return s.first == name; }),
               steps_.end());
}

bool Reloads::run() {
  std::lock_guard one(running_);
  std::vector<std::pair<std::string, Step>> steps;
  {
    std::lock_guard lock(mu_);
    steps = steps_;
  }
  bool ok = true;
  for (auto& [name, step] : steps) {
    auto done = step();
    if (done) {
      spdlog::info("reload: {}: {}", name, *done);
    } else {
      ok = false;
      spdlog::error("reload: {}: not reloaded, what was in force stays: {}", name, done.error().message);
    }
  }
  return ok;
}

}  // namespace util
