// The parser helper's own confinement, one step a function, run by the
// helper on itself before it reads any request (server/parser/main.cpp lists them in
// order). What it leaves: no file system (an empty read-only root, every file
// access refused by Landlock), no network (an empty network namespace), an
// identity of its own (a root server's: a uid of the sandbox range; a normal
// user's: its own, in a user namespace), no capability, and a system call
// allowlist. Each step fails closed: its error names the call.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <string>

#include "server/helper/wire.h"
#include "server/util/result.h"

namespace parser::confine {

using helper::Identity;

// New mount, network, IPC and UTS namespaces (and a user namespace mapping
// the user's own ids, for a normal user).
util::Status unshare_namespaces(const Identity& id);
// A small tmpfs as the root (pivot_root), the host's tree detached, then read-only.
util::Status pivot_to_empty_root();
// Root: no supplementary group, then the identity's gid and uid.
util::Status become(const Identity& id);
// Every capability gone: a normal user's in its user namespace are dropped;
// a root server's went with become(), which is checked.
util::Status drop_capabilities(const Identity& id);
// No core dump, no ptrace of it by its uid's other processes, no privilege to gain.
util::Status harden_process();
// Landlock, where the kernel has it: every file access right handled, none
// granted; with ABI 6, no signal or abstract socket outside the domain.
// Returns the ABI used (0: none on this kernel).
util::Result<int> deny_all_files();
// The zygote's system calls: what serving, forking and setting up a child take.
util::Status install_zygote_filter();
// A child's, stacked on the zygote's: no fork, no new filter, no limit changes.
util::Status install_child_filter();
// A child's resources: address space, CPU seconds, descriptors, no files written.
util::Status limit_child(uint64_t address_space_bytes, uint64_t cpu_seconds);

}  // namespace parser::confine
