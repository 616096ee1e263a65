// The sandbox filesystem: a read-only tmpfs root holding the runtime's read-only
// binds, a minimal /dev, a fresh /proc, /inputs (read-only), size-capped tmpfs
// /work, /tmp and /outputs, then pivot_root into it. Planned in the runner
// parent (all strings built there); applied in the child with syscalls only.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

#include "server/sandbox/spec.h"
#include "server/util/fd.h"
#include "server/util/result.h"

namespace sandbox::mounts {

struct Bind {
  std::string source;  // host path, opened (O_PATH) by the child before it drops host ids
  int open_flags = 0;  // extra flags for that open (O_NOFOLLOW for stored inputs)
  // "/proc/self/fd/N" of that descriptor, written by the child (no allocation).
  mutable char via[32] = {};
  mutable int fd = -1;
  std::string target;  // path relative to the new root
  bool is_dir = false;
};

struct File {
  std::string path;  // relative to the new root
  std::string content;
  mode_t mode = 0444;
};

struct Link {
  std::string target;  // what the symlink points to
  std::string path;    // relative to the new root
};

struct Plan {
  std::string root;
  std::string root_opts, dev_opts, inputs_opts, work_opts, tmp_opts, outputs_opts;
  // Warm with workspace_max_bytes: /work's size once a claim brings a
  // workspace, before the room for the claim's code file; 0 otherwise.
  uint64_t workspace_work_bytes = 0;
  std::string dev, proc, inputs, work, tmp, outputs;
  std::vector<std::string> dirs;  // created in this order
  std::vector<Link> links;
  std::vector<File> files;  // synthesized /etc
  // Host files copied into the root (the egress CA bundle): copies, not
  // binds, for the same reason as the inputs'.
  std::vector<Bind> root_copies;
  std::vector<Bind> readonly_binds;  // policy paths: the runtime
  std::vector<Bind> device_binds;    // /dev/null, zero, full, random, urandom
  std::vector<Link> device_links;
  // Inputs are copied into the /inputs tmpfs, not bound: a bind would show the
  // host path of the stored blob (state dir, tenant) in /proc/self/mountinfo.
  std::vector<Bind> input_copies;
  // Directories under /inputs that inputs with a "/" in their names need
  // (relative to the new root, parents first).
  std::vector<std::string> input_dirs;
  // The runtime's cache (spec.cache_dir): copied, like the inputs, into a
  // tmpfs at `cache` (kCacheMountPath), then read-only, nodev, noexec; "" when none.
  std::string cache, cache_opts;
  std::vector<Bind> cache_copies;
  std::vector<std::string> tmp_dirs;  // made in /tmp once it is mounted (the cache's link directory)
  std::vector<Link> tmp_links;        // in those: one symlink per cache file
  std::string code_file;              // relative to the new root
};

util::Result<Plan> plan_in_parent(const LaunchSpec& spec);
// The mount point of the new root (Plan::root), a directory in the scratch dir.
std::string root_path(const LaunchSpec& spec);
// Every step fails closed through fail_in_child(report_sock, ...).
// With the host identity still in place: opens every bind source (O_PATH, in
// this mount namespace), mounts the root tmpfs and makes it the cwd. The
// sandbox user then never walks a host directory (the state dir is 0700).
void mount_root_in_child(const Plan& plan, int report_sock);
// Everything else, relative to the cwd: runs as the sandbox user.
void build_root_in_child(const Plan& plan, const LaunchSpec& spec, int report_sock);
void pivot_into_root_in_child(const Plan& plan, int report_sock);
// Cold: copies the inputs (opened by mount_root_in_child) into /inputs and
// makes it read-only. After pid 1 joined the job's cgroup, which is charged
// for the copies.
void fill_inputs_in_child(const Plan& plan, const LaunchSpec& spec, int report_sock);
// Warm, a claim with a workspace: /work remounted at the workspace's size
// (Plan::workspace_work_bytes) and code_room_bytes for the claim's code file,
// after pivot_root and before the runner copies in.
void size_work_for_workspace_in_child(const Plan& plan, uint64_t code_room_bytes, int report_sock);

}  // namespace sandbox::mounts
