// Sandboxes forked from a template: a runtime's interpreter started once
// (its preload imported) inside a sandbox of its own, whose forks become the
// programs of job sandboxes built as every sandbox is (zygote, pid 1), so a
// warm sandbox costs a fork instead of an interpreter's start.
//
// The template's side (template_serve, in the shared object its interpreter
// loads) answers one request per connection on its listening socket. A
// request names a job sandbox's pid 1 (a pidfd) and carries the program's
// descriptors, limits and filter. The template vforks C; C says hello with
// its credentials (the runner moves C into the job's cgroup and answers),
// joins every namespace of pid 1, vforks C2 (now in the job's pid
// namespace), which forks the program and exits, and so does C: the program
// is reparented to the job's pid 1, a copy of the template's memory that
// shares its pages until it writes them. The program becomes the sandbox's
// user and takes the program child's steps (program.h), then writes a
// Started record to pid 1 and returns into the interpreter; a failed step
// writes an ExecFailure instead and exits, as a cold program child does.
#pragma once
#include <linux/filter.h>
#include <sched.h>
#include <sys/types.h>

#include <cstdint>

#include "server/sandbox/rlimits.h"
#include "server/sandbox/seccomp.h"

namespace sandbox::template_fork {

constexpr uint32_t kMagic = 0x74626f78;  // "tbox"
constexpr uint32_t kVersion = 2;

// One resource limit, as the runner built it (the name stays on its side).
struct Limit {
  int32_t resource;
  uint64_t value;
};

// The request's fixed part; the filter's instructions follow it.
struct Request {
  uint32_t magic;
  uint32_t version;
  int32_t last_cap;
  uint32_t has_ruleset;  // 1: the descriptors end with a Landlock ruleset
  Limit limits[rlimits::kCount];
  uint32_t filter_len;  // instructions after this struct, 1..seccomp::kMaxInstructions
  uint32_t ahead;       // 1: made ahead of any claim (throwbox_template_serve returns 2), else 0
};

// The descriptors that come with a request, in this order.
enum Fd { kPidfd, kStdout, kStderr, kReport, kGo, kReady, kRuleset, kFds };

// C's hello to the runner (with SCM_CREDENTIALS), and the runner's answer
// once C is in the job's cgroup.
constexpr char kHello = 'h';
constexpr char kJoined = 'j';

// What the program writes to pid 1's report pipe when its steps are done
// (an ExecFailure, program.h, when one failed): its pid in the job's
// namespace and the layers its steps made.
struct Started {
  int32_t zero;  // 0: not an ExecFailure (whose err is never 0)
  int32_t pid;
  uint32_t layers;
};

// The namespaces a program joins: every one of pid 1's.
constexpr int kJoinFlags =
    CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWCGROUP | CLONE_NEWPID;

}  // namespace sandbox::template_fork

extern "C" {
// The template's loop (its interpreter calls it through ctypes, once its
// preload is done): writes one byte on ready_fd and closes it, then answers
// requests on listen_fd. Returns in a forked program (its steps done, in
// the job's sandbox): 2 when the runner made it ahead of any claim (it may
// warm up before it says ready), 1 when a claim waits for it. In the
// template it never returns (it exits when its socket fails, 0 when it was
// shut down).
__attribute__((visibility("default"))) int throwbox_template_serve(int listen_fd, int ready_fd);
}
