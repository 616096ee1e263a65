// The sandbox's pid 1, cloned by the zygote with CLONE_VM (the zygote's heap
// and, without CLONE_SETTLS, its thread data): builds the root, starts the
// program, reaps it, reports. Runs in the child only: syscalls, no allocation,
// locks or logging, checked by unit.child_side_symbols.
#pragma once
#include <vector>

#include "server/sandbox/layers.h"
#include "server/sandbox/mounts.h"
#include "server/sandbox/placement.h"
#include "server/sandbox/rlimits.h"
#include "server/sandbox/seccomp.h"
#include "server/sandbox/spec.h"

namespace sandbox::pid1 {

// One /proc/sys/user file of the sandbox's user namespace and its value:
// what the namespace's processes may create, counted per user (a nested
// namespace of any kind: none; inotify: the job's share).
struct UserLimit {
  const char* file;  // under /proc/sys/user/
  char value[24];    // decimal, NUL-terminated
};
constexpr int kUserLimits = 10;

// Everything pid 1 and the program child read, built by the zygote before the
// clone and never freed (the zygote exits instead).
struct Context {
  const LaunchSpec* spec;
  const mounts::Plan* plan;
  int report_sock;   // SOCK_SEQPACKET to the runner
  int stdout_write;  // pipe ends the program gets as fd 1 and 2
  int stderr_write;
  std::vector<char*> argv;  // null-terminated
  std::vector<char*> envp;
  std::vector<char*> envp_network;     // envp and kProxyEnv: a job with a network profile
  std::vector<char*> envp_network_ca;  // and kCaBundleEnv: its profile intercepts a host
  const seccomp::Program* seccomp;
  const rlimits::Table* rlimits;
  int last_cap;                  // highest capability number on this kernel
  int landlock_abi;              // 0: Landlock not used
  const placement::Cpus* cpus;   // the zygote's CPUs, restored after go
  const UserLimit* user_limits;  // kUserLimits entries, written by pid 1 in its user namespace
  int template_listen_fd;        // a template's listening socket, or -1 (kept past pid 1's first step)
  // The runner's ends the zygote holds: the control socket, the pipes'
  // reading ends, the zygote's report pipe. pid 1 closes them first.
  int runner_fds[4];
};

// clone(2) entry; context is a const Context*. Never returns.
int clone_entry(void* context);

// The zygote's rehearsal clone onto pid 1's stack (zygote.cpp): returns at once.
int rehearsal_entry(void*);

}  // namespace sandbox::pid1
