// Capabilities: the program child empties every set (bounding, ambient,
// inheritable, permitted, effective) and locks the securebits before execve.
#pragma once

namespace sandbox::capabilities {

// Returns 0, or the errno of the failed step with *step naming it. Async-signal-safe.
int drop_all_in_child(int last_cap, const char** step);
// /proc/sys/kernel/cap_last_cap, read in the parent (40 on current kernels).
int read_last_cap_in_parent();

}  // namespace sandbox::capabilities
