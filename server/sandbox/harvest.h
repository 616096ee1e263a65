// Copies the regular files a job left in /outputs to the host, reading through
// /proc/<init>/root while the sandbox's pid 1 still holds its mounts. Runs in
// the runner parent. Never follows a link, never opens a FIFO, socket or device.
#pragma once
#include <sys/types.h>

#include <vector>

#include "server/sandbox/spec.h"

namespace sandbox::harvest {

std::vector<HarvestedFile> copy_outputs(pid_t init_pid, const LaunchSpec& spec, std::string& error);

}  // namespace sandbox::harvest
