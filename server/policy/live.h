// The policy in force. A call takes a snapshot at its start and keeps it to
// its end; a reload (SIGHUP) replaces it whole, for the calls that start
// after. Only sections a running server can take over may differ
// (reload_problems): the rest needs a restart. Thread-safe.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/policy/policy.h"

namespace policy {

class Live {
 public:
  explicit Live(std::shared_ptr<const Policy> policy) : policy_(std::move(policy)) {}
  std::shared_ptr<const Policy> get() const {
    std::lock_guard lock(mu_);
    return policy_;
  }
  // Which policy a thing was made under (a warm sandbox): a reload counts one up.
  uint64_t generation() const {
    std::lock_guard lock(mu_);
    return generation_;
  }
  void set(std::shared_ptr<const Policy> policy) {
    std::lock_guard lock(mu_);
    policy_ = std::move(policy);
    ++generation_;
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const Policy> policy_;
  uint64_t generation_ = 0;
};

// The sections a reload may change: limits, admission and network.
extern const char* const kReloadableSections[];
// The top-level sections of the policy file whose values differ.
std::vector<std::string> changed_sections(const Policy& running, const Policy& next);
// Why `next` cannot replace `running` without a restart: each changed
// section that is not reloadable, named; empty when it can.
std::vector<std::string> reload_problems(const Policy& running, const Policy& next);

}  // namespace policy
