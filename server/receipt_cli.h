// `throwbox receipt key|verify|replay`: a receipt's key, its signature, and
// the same code run again on the same inputs, compared hash by hash.
// Runs in main() before any server thread.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace receipt_cli {

// args: what follows "receipt". Returns the exit status: 0 valid (verify) or
// every hash the same (replay), 1 invalid or some differ; a usage or
// start-up error throws std::invalid_argument (usage) or std::runtime_error.
int run(const std::vector<std::string>& args, const std::string& default_state_dir, const std::string& default_policy,
        const std::function<std::string()>& runner_exe);

}  // namespace receipt_cli
