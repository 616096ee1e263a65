// The job half of a warm sandbox: the runner copies the claim's inputs into
// /inputs, its workspace into /work and its code to the runtime's code path,
// through /proc/<init>/root, before pid 1 freezes /inputs and releases the
// program. Runs in the runner parent while nothing of the job runs yet in the
// sandbox (only pid 1 and, for "preload", the runtime's loader, blocked on its go pipe).
#pragma once
#include <sys/types.h>

#include "server/sandbox/spec.h"
#include "server/util/result.h"

namespace sandbox::deliver {

// Every file is created with openat2 (RESOLVE_BENEATH, no symlinks, no magic
// links, O_EXCL) relative to the sandbox's root, with the file-system identity
// of the sandbox user (setfsuid/setfsgid to spec.host_uid/gid), so it is owned
// by that user inside. Inputs are read from the host with the runner's own
// identity, never following a symlink, and must be regular files. A claim
// with a workspace has its tree copied into /work (workspace::copy_in) before
// the code is written; pid 1 has already given /work the workspace's size.
util::Status claim_files(pid_t init_pid, const LaunchSpec& spec, const Claim& claim);
// After claim_files: false when the runner's parent (the server) died while
// the parent-death signal was cleared by the fsuid change.
bool parent_alive(pid_t parent);

}  // namespace sandbox::deliver
