// Failure reports from the sandbox child to the runner parent, built in a fixed
// buffer: runs between clone and execve, so no allocation, no locks, no stdio.
#pragma once

namespace sandbox {

// Message tags on the parent<->child SOCK_SEQPACKET socket.
constexpr char kMsgGo = 'G';     // parent -> child: id maps written, build the root
constexpr char kMsgStart = 'S';  // parent -> child: in the job's cgroup (and, cold, released): start the program
constexpr char kMsgKill = 'K';   // parent -> child: deadline or cancel, kill the tree
constexpr char kMsgReady =
    'R';  // child -> parent: program exec'd (uint32_t Layers bits follow: pid 1's and the program's)
constexpr char kMsgError = 'E';  // child -> parent: a setup step failed (text follows)
constexpr char kMsgExit = 'X';   // child -> parent: program finished (ExitReport follows)
// Warm pool (spec.warm): the sandbox is built and waits for a job.
constexpr char kMsgWarm = 'W';            // child -> parent: built (and, for "preload", the loader started)
constexpr char kMsgClaim = 'C';           // parent -> child: code and inputs are in place, run the job
constexpr char kMsgClaimNetwork = 'N';    // the same, for a job with a network profile
constexpr char kMsgClaimNetworkCa = 'M';  // the same, its profile intercepting a host (the CA bundle's variables)
// A job with a network profile (spec.network, or kMsgClaimNetwork): the
// proxy listener pid 1 made in the job's network namespace, as SCM_RIGHTS.
constexpr char kMsgListener = 'L';  // child -> parent
// A workspace job: the runner copies the workspace into /work through
// /proc/<pid 1>/root before the program may start (workspace.h).
constexpr char kMsgWorkspace = 'P';  // parent -> child (warm): a claim with a workspace: give /work its size
constexpr char kMsgWorkReady = 'B';  // child -> parent: /work is ready for the copy (cold: pivoted; warm: resized)
// A sandbox forked from a template (LaunchSpec::from_template_pid): the
// program's descriptors (template_fork::Fd's order from kStdout), as SCM_RIGHTS, for
// the runner to have the template fork the program with.
constexpr char kMsgFork = 'F';  // child -> parent

struct ExitReport {
  int wait_status;       // of the program (waitpid)
  long long cpu_us;      // user+system of every reaped process in the sandbox, less the loader's before the claim
  long long max_rss_kb;  // largest resident set among them
};

// Sends "E<call>("<arg>"): <ERRNO>" and exits the child with status 1.
[[noreturn]] void fail_in_child(int sock, const char* call, const char* arg, int err);

}  // namespace sandbox
