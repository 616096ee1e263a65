// Where a new sandbox's pid 1 and its runner run while the sandbox is built.
// clone queues pid 1 on the runner's own CPU, where it waits until the runner
// has written the id maps and made the job's cgroup, and waking an idle CPU
// for either of them costs about 1 ms on a VM's halted vCPU. So pid 1 keeps
// the runner's CPU and runs at once, and the runner moves to another allowed
// CPU for its part of the set-up (which has about 1 ms to spare). Both take
// their whole CPU set back before anything of the program exists. Hints only:
// every call is best effort and no layer depends on them.
#pragma once
#include <sched.h>
#include <sys/types.h>

namespace sandbox::placement {

// The CPUs this process may run on, read before the clone; `here` is the CPU
// it runs on then (-1: no hint, e.g. a single CPU or more than cpu_set_t holds).
struct Cpus {
  cpu_set_t set;
  int here = -1;
};
Cpus allowed_in_parent();

// After the clone, before go: pid 1 on `here` only.
void keep_child_here_in_parent(pid_t child, const Cpus& cpus);
// After go: this process on the other allowed CPUs, leaving `here` to pid 1.
void move_self_away_in_parent(const Cpus& cpus);
// After start, and when the set-up failed: this process on every allowed CPU.
void restore_self_in_parent(const Cpus& cpus);
// In pid 1 once go arrived: every CPU the runner had. Async-signal-safe.
void restore_in_child(const Cpus& cpus);

}  // namespace sandbox::placement
