// `throwbox doctor`: probes the host for each isolation layer, prints what is
// available, why not and the fix, then runs one real job through the runner.
// Runs in main() before any server thread.
#pragma once
#include <string>

#include "server/policy/policy.h"

namespace doctor {

// Returns the process exit status: 0 when every layer the policy requires is
// present and the probe job completed, 1 otherwise.
int run(const policy::Policy& policy, const std::string& state_dir, const std::string& runner_exe);

}  // namespace doctor
