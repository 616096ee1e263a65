// Copies the regular files a job left in /outputs to the host, reading through
// /proc/<init>/root while the sandbox's pid 1 still holds its mounts. Runs in
// the runner parent. Never follows a link, never opens a FIFO, socket or device.
#pragma once
#include <sys/types.h>

#include <vector>

#include "server/sandbox/spec.h"

namespace sandbox::harvest {

std::vector<HarvestedFile> copy_outputs(pid_t init_pid, const LaunchSpec& spec, std::string& error);
// The walk itself, from an opened /outputs directory (O_PATH is enough): copies
// to spec.harvest_dir, bounded by spec.outputs_max_files, outputs_max_bytes and
// artifact_max_bytes. Exposed for tests.
std::vector<HarvestedFile> copy_tree(int outputs_dirfd, const LaunchSpec& spec);

}  // namespace sandbox::harvest
