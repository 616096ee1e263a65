// The process that makes a sandbox's pid 1. The runner forks it as soon as it
// starts, before its job is known, so the job does not wait for a new address
// space: under a VM a forked child's first run costs about 0.7 ms more than a
// CLONE_VM child's (page tables built anew for every page it touches). The
// zygote reads the launch spec from the runner's stdin, plans the sandbox, clones pid 1 into the
// new namespaces with CLONE_VM (pid 1 shares the zygote's memory, never the
// runner's) and CLONE_PARENT (pid 1 is the runner's child), writes the id maps,
// makes and joins the job's cgroup, reports, and exits. The runner sends
// pid 1 "start" only after it reaped the zygote: no process outside the
// sandbox shares pid 1's memory once the program may run.
#pragma once
#include <sys/types.h>

#include <string>

#include "server/sandbox/cgroups.h"
#include "server/sandbox/layers.h"
#include "server/sandbox/rlimits.h"
#include "server/sandbox/seccomp.h"
#include "server/sandbox/spec.h"
#include "server/util/fd.h"
#include "server/util/result.h"

namespace sandbox::zygote {

// The sandbox's output pipes and control socket, made before the fork. The
// runner keeps the reading ends and its end of the socket; the zygote hands
// the others to pid 1.
struct Channels {
  util::UniqueFd sock, child_sock;
  util::UniqueFd out_read, out_write, err_read, err_write;
};

// What the zygote tells the runner: pid 1 (or -1 when none was made), the
// first error or none, and what it read from the runner's stdin: the spec
// line and anything after it (which fails the job).
struct Report {
  pid_t pid = -1;
  pid_t helper_pid = -1;  // the runner's child that cloned a forked sandbox's pid 1 (reaped with the zygote)
  int landlock_abi = 0;
  Layers layers;  // what the zygote's steps made: the namespaces of the clone, the cgroup
  std::string error;
  std::string spec_text;
  std::string rest;
};

class Zygote {
 public:
  // Forks the zygote (runner start): it reads the spec from the runner's
  // stdin, and the runner reads nothing there until the zygote reported.
  static util::Result<Zygote> start_in_parent();
  Zygote() = default;
  Zygote(Zygote&& o) noexcept;
  Zygote& operator=(Zygote&&) = delete;
  ~Zygote();

  // Waits for the zygote's report (as long as the job takes to come), then
  // reaps it. An error when it died without one.
  util::Result<Report> await_report_in_parent();
  Channels& channels() { return channels_; }

 private:
  pid_t pid_ = -1;
  util::UniqueFd report_read_;
  Channels channels_;
};

// The job's seccomp program: the spec's (the server compiles it once), or
// compiled here for a runner started by hand (a template's role for a
// template's spec).
util::Result<seccomp::Program> filter_for(const LaunchSpec& spec, const cgroups::Host& host);
// The program's resource limits for the spec (with a memory cgroup
// RLIMIT_DATA is a backstop at twice the cgroup's limit).
rlimits::Table limits_for(const LaunchSpec& spec, const cgroups::Host& host);

// Field 22 of /proc/<pid>/stat: when the process started, in clock ticks
// after boot (0 when unreadable). With its pid it names one process.
uint64_t process_start_time(pid_t pid);

// Maps the executable's code and read-only data (MADV_POPULATE_READ): the
// runner and the zygote do it while they wait, so the job's first pass through
// the spec parser and the launcher does not fault them in (several hundred
// page faults on a cold image; tens of microseconds each under a VM).
void prefault_image();

// Writes, while the process waits, the stack and heap pages its job will
// write. After the fork they are shared copy-on-write between the runner and
// the zygote, or not mapped yet, and under a VM each first write costs 12-17 us
// (a C microbenchmark here): a few hundred of them between a spec and pid 1.
// Needs the heap's trim threshold raised first (the runner does, before the fork).
void write_stack_and_heap();

// One pass through the spec parser on a spec shaped like a job's (a seccomp
// program's worth of base64, paths, argv), while the process waits: its code
// and data are then mapped in this process and the job's parse takes a
// fraction of the time (0.36-0.41 ms to 0.09 ms in the zygote's step trace).
// The spec is one the parser accepts: a refused field throws inside it, and
// a process's first exception makes the unwinder sort the frame table of the
// whole static runner (some 5% of a burst's CPU in the runner and again in
// the zygote, before the rehearsal spec was valid). Returns whether it parsed.
bool rehearse_parse();
LaunchSpec rehearsal_spec();

}  // namespace sandbox::zygote
