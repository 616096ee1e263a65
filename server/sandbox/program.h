// The program child: cloned by pid 1 with CLONE_VM | CLONE_VFORK, it takes the
// program's last steps and execs it. Runs in the child only: syscalls, no
// allocation, locks or logging, checked by unit.child_side_symbols.
#pragma once
#include <linux/filter.h>

#include <cstddef>

#include "server/sandbox/layers.h"
#include "server/sandbox/pid1.h"
#include "server/sandbox/rlimits.h"

namespace sandbox::program {

// What the program child sends pid 1 on the exec-error pipe when a step
// before execve fails; EOF instead means execve succeeded.
struct ExecFailure {
  int err;
  char step[60];
};

// What the program's steps use, wherever they run: the descriptors it keeps,
// its limits and filter, and where a failed step is reported.
struct Io {
  int stdout_write, stderr_write;  // become fds 1 and 2
  int report_fd;                   // an ExecFailure goes here when a step fails
  int ruleset_fd;                  // Landlock ruleset, or -1
  int go_fd, ready_fd;             // warm "preload": the loader's pipes, or -1
  int listen_fd;                   // a template's listening socket (kTemplateListenFd), or -1
  const rlimits::Table* rlimits;
  const sock_filter* filter;
  size_t filter_len;
  int last_cap;
  Layers* layers;  // each step adds its layer once done
};

// Steps 2-12 below in the calling process (a template's fork calls it in the
// job's namespaces): returns once the filter is installed, io.report_fd then
// the report pipe's new number (close-on-exec, every other descriptor beyond
// the program's closed), or reports the failed step on it and exits 127.
// Async-signal-safe.
void take_steps_in_child(Io& io);

// Built by pid 1 on its stack; pid 1 is paused until the execve (CLONE_VFORK).
struct Start {
  const pid1::Context* ctx;
  int exec_err_read, exec_err_write;  // the pipe above; the child closes the reading end
  int ruleset_fd;                     // Landlock ruleset, or -1
  int go_read, loaded_write;          // warm "preload": the loader's pipes, or -1
  int go_write, loaded_read;          // pid 1's ends, closed by the child, or -1
  Layers* layers;                     // pid 1's: each step adds its layer once done
  char* const* envp;                  // ctx->envp, or envp_network for a job with a network profile
};

// clone(2) entry; start is a Start*. Never returns.
int clone_entry(void* start);

}  // namespace sandbox::program
