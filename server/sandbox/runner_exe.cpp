// build/throwbox-runner: the per-job sandbox runner as its own small, static
// executable (see runner_main.cpp). The server starts it next to itself.
#include "server/sandbox/runner_main.h"

int main() { return sandbox::runner_main(); }
