// Where a new sandbox's pid 1 and the zygote that made it run while the
// sandbox is built. clone queues pid 1 on its parent's own CPU, where it waits
// until the parent has written the id maps and made the job's cgroup, and
// waking an idle CPU for either of them costs about 1 ms on a VM's halted
// vCPU. So pid 1 keeps the zygote's CPU and runs at once, and the zygote
// moves to another allowed CPU for its part of the set-up (which has about
// 1 ms to spare) and then exits. pid 1 takes its whole CPU set back before
// anything of the program exists. Hints only: every call is best effort and
// no layer depends on them.
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
// In pid 1 once go arrived: every CPU the zygote had. Async-signal-safe.
void restore_in_child(const Cpus& cpus);

}  // namespace sandbox::placement
