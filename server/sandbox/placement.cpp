// CPU placement while a sandbox is built (see placement.h).
#include "server/sandbox/placement.h"

namespace sandbox::placement {
namespace {
// Fails only when a cpuset change left none of the CPUs: the scheduler's own
// choice then stands, which is slower at worst.
void set(pid_t pid, const cpu_set_t& s) { (void)::sched_setaffinity(pid, sizeof s, &s); }
}  // namespace

Cpus allowed_in_parent() {
  Cpus c;
  CPU_ZERO(&c.set);
  if (::sched_getaffinity(0, sizeof c.set, &c.set) != 0 || CPU_COUNT(&c.set) < 2) return c;
  const int here = ::sched_getcpu();
  if (here >= 0 && here < CPU_SETSIZE && CPU_ISSET(here, &c.set)) c.here = here;
  return c;
}

void keep_child_here_in_parent(pid_t child, const Cpus& cpus) {
  if (cpus.here < 0) return;
  cpu_set_t only;
  CPU_ZERO(&only);
  CPU_SET(cpus.here, &only);
  set(child, only);
}

void move_self_away_in_parent(const Cpus& cpus) {
  if (cpus.here < 0) return;
  cpu_set_t others = cpus.set;
  CPU_CLR(cpus.here, &others);
  set(0, others);
}

void restore_in_child(const Cpus& cpus) {
  if (cpus.here >= 0) set(0, cpus.set);
}

}  // namespace sandbox::placement
