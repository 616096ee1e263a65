// The runner's one entry point: build the sandbox for a launch spec, run the
// program in it, and return the outcome. The only place that clones or execs.
// Runs in the single-threaded runner process, never in the server.
#pragma once
#include "server/sandbox/spec.h"

namespace sandbox::launcher {

Outcome launch(const LaunchSpec& spec);

}  // namespace sandbox::launcher
