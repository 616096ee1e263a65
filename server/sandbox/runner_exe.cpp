// build/throwbox-runner: the per-job sandbox runner as its own small, static
// executable (see runner_main.cpp). The server starts it next to itself.
// `throwbox-runner --print-seccomp [--no-memory-cgroup]` prints the compiled
// filter as base64, for running the runner by hand as the server would
// (bench/startup.py).
#include <cstdio>
#include <cstring>
#include <string>

#include "server/sandbox/runner_main.h"
#include "server/sandbox/seccomp.h"
#include "server/util/base64.h"

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--print-seccomp") == 0) {
    bool memory_cgroup = !(argc >= 3 && std::strcmp(argv[2], "--no-memory-cgroup") == 0);
    auto program = sandbox::seccomp::compile_in_parent(memory_cgroup);
    if (!program) {
      std::fprintf(stderr, "throwbox-runner: %s\n", program.error().message.c_str());
      return 1;
    }
    std::string raw(reinterpret_cast<const char*>(program->instructions.data()),
                    program->instructions.size() * sizeof(program->instructions[0]));
    std::printf("%s\n", util::base64_encode(raw).c_str());
    return 0;
  }
  if (argc >= 2) {
    std::fprintf(stderr,
                 "usage: throwbox-runner < launch-spec.json   (started by throwbox serve)\n"
                 "       throwbox-runner --print-seccomp [--no-memory-cgroup]\n");
    return 2;
  }
  return sandbox::runner_main();
}
