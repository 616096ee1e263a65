// throwbox-runner: the single-threaded process the broker starts per job.
// Reads a LaunchSpec (JSON) on stdin, writes the Outcome (JSON) on stdout.
#pragma once

namespace sandbox {

int runner_main();

}  // namespace sandbox
