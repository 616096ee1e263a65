// Landlock: writes only beneath /work, /tmp, /outputs (and the /dev nodes);
// with ABI 6+, no abstract-unix-socket or signal reach outside the domain.
// The ruleset is built by sandbox pid 1 after pivot_root; the program child
// enforces it on itself.
#pragma once

namespace sandbox::landlock {

// The kernel's Landlock ABI version, 0 when unavailable (disabled or too old).
int abi_version();

// In pid 1 after pivot_root: a ruleset fd, or -errno with *step naming the call.
int build_ruleset_in_child(int abi, const char** step);
// In the program child, after no_new_privs. Returns 0 or errno.
int restrict_self_in_child(int ruleset_fd);

}  // namespace sandbox::landlock
