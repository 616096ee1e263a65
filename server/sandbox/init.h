// The sandbox's pid 1. Runs in the child after clone: waits for the id maps,
// builds the filesystem, starts the program, reaps everything, kills the whole
// namespace when the program ends or the parent says so, and reports back.
#pragma once
#include <vector>

#include "server/sandbox/mounts.h"
#include "server/sandbox/placement.h"
#include "server/sandbox/rlimits.h"
#include "server/sandbox/seccomp.h"
#include "server/sandbox/spec.h"

namespace sandbox::init {

struct ChildContext {
  const LaunchSpec* spec;
  const mounts::Plan* plan;
  int report_sock;                 // SOCK_SEQPACKET to the runner parent
  int stdout_write;                // pipe ends the program gets as fd 1 and 2
  int stderr_write;
  std::vector<char*> argv;         // null-terminated, built in the parent
  std::vector<char*> envp;
  const seccomp::Program* seccomp;  // compiled in the parent
  const rlimits::Table* rlimits;
  int last_cap;                      // highest capability number on this kernel
  int landlock_abi;                  // 0: Landlock not used
  const placement::Cpus* cpus;       // the zygote's CPUs, restored after go
};

[[noreturn]] void run_in_child(const ChildContext& ctx);

}  // namespace sandbox::init
