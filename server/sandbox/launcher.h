// The runner's side of one job: once its zygote built the sandbox (zygote.h),
// start and supervise the program, harvest, and return the outcome. Clones
// nothing: the zygote clones pid 1 (zygote.cpp), pid 1 clones the program
// child, which execs (pid1.cpp, program.cpp). Runs in the single-threaded runner.
#pragma once
#include <sys/types.h>

#include <string>

#include "server/sandbox/cgroups.h"
#include "server/sandbox/spec.h"
#include "server/sandbox/zygote.h"
#include "server/util/fd.h"

namespace sandbox::launcher {

class Teardown;

// cancel_fd: a signalfd (SIGTERM) or -1; readable means the job is cancelled:
// the whole tree is killed and the outcome says "cancelled".
// progress_fd: where progress lines go when spec.progress (the runner's stdout);
// a job with a network profile also hands its proxy listener over there.
// A warm spec (spec.warm) also writes {"warm":"ready"} there once the sandbox
// is built, then reads one Claim line (JSON) from claim_fd (the runner's stdin).
// A template's line also names its pid 1 and that one's start time
// ({"warm":"ready","template_pid":..,"template_start_time":..}), what a
// sandbox forked from it names (LaunchSpec::from_template_pid); it takes no
// claim and ends when cancelled, its forks' sandboxes with it.
// A cold spec starts its program only at EOF on claim_fd: the broker records
// the job while the sandbox is built and closes the runner's stdin after.
// The zygote (forked at the runner's start) got the same spec, built pid 1
// and reported (built); the runner reaped it.
Outcome launch(const LaunchSpec& spec, zygote::Channels& channels, const zygote::Report& built, Teardown& teardown,
               int cancel_fd, int progress_fd, int claim_fd = -1);

// The runner refuses a job whose spec the zygote already had: removes what it
// made (pid 1, the cgroup, the root mount point; spec null when the runner
// could not parse it, nor then could the zygote) and returns the sandbox_error.
Outcome abandon(const zygote::Report& built, const LaunchSpec* spec, std::string message);

// What is left once the outcome is known: pid 1 (and with it every namespace),
// the root mount point and the cgroup. The runner reports first and then
// finishes, so the namespace teardown is off the caller's critical path.
class Teardown {
 public:
  Teardown() = default;
  Teardown(const Teardown&) = delete;
  Teardown& operator=(const Teardown&) = delete;
  ~Teardown() { finish(); }
  void finish();
  // What the zygote made (pid 1, and with the spec the root mount point and
  // the cgroup), whatever it reported.
  void adopt(const zygote::Report& built, const LaunchSpec* spec);

 private:
  friend Outcome launch(const LaunchSpec& spec, zygote::Channels& channels, const zygote::Report& built,
                        Teardown& teardown, int cancel_fd, int progress_fd, int claim_fd);
  friend Outcome abandon(const zygote::Report& built, const LaunchSpec* spec, std::string message);
  pid_t pid_ = -1;
  bool kill_ = false;    // pid 1 never reported: SIGKILL it
  util::UniqueFd sock_;  // closing it releases a pid 1 that did report
  std::string root_;     // mount point to remove
  cgroups::Job cgroup_;
  std::string socket_;  // a template's socket path to remove
};

}  // namespace sandbox::launcher
