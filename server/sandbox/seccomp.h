// The syscall filter: compiled with libseccomp on the runner's side (the zygote), installed
// by the program child as the very last step before execve.
#pragma once
#include <linux/filter.h>

#include <cstddef>
#include <string>
#include <vector>

#include "server/util/result.h"

namespace sandbox::seccomp {

struct Program {
  std::vector<sock_filter> instructions;
};

// Whose filter: a job's, or a template's (template_fork.h), which is the
// job's but for setns: its forks join their job's namespaces.
enum class Role { job, template_process };

// Builds the deny-list filter (see seccomp.cpp for every rule and its threat).
// Without a per-job memory cgroup, shared anonymous memory is refused too:
// nothing else would bound it (RLIMIT_DATA counts private memory only).
util::Result<Program> compile_in_parent(bool memory_cgroup = true, Role role = Role::job);
// A program compiled elsewhere (the server, once), as raw sock_filter bytes.
util::Result<Program> from_bytes(const std::string& raw);
// seccomp(SECCOMP_SET_MODE_FILTER); returns errno on failure, 0 on success.
// Needs no_new_privs already set. Async-signal-safe.
int install_in_child(const Program& program);
// The same from raw instructions (a template's fork gets them in a request).
// EINVAL for none or more than the kernel takes.
constexpr size_t kMaxInstructions = 4096;  // BPF_MAXINSNS
int install_in_child(const sock_filter* instructions, size_t count);

}  // namespace sandbox::seccomp
