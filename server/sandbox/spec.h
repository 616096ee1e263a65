// The launch spec (broker -> runner, JSON on the runner's stdin) and the outcome
// (runner -> broker, JSON on its stdout). Fully resolved by the broker: the
// runner makes no policy decision.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/util/result.h"

namespace sandbox {

// A job's outcome, as the result's `status` names it.
enum class Status { completed, failed, timed_out, memory_exceeded, cancelled, sandbox_error };
// A warm-pool sandbox or not (LaunchSpec::warm); JSON "" (cold), "exec", "preload".
enum class Warm { cold, exec, preload };

// The strings of the JSON boundary (the runner's outcome, the result, the ledger).
const char* to_string(Status status);
std::optional<Status> status_from_string(std::string_view text);
const char* to_string(Warm warm);
std::optional<Warm> warm_from_string(std::string_view text);

struct InputBind {
  std::string name;       // file name under /inputs
  std::string host_path;  // stored blob on the host
};

struct LaunchSpec {
  std::string job_id;
  std::vector<std::string> argv;  // argv[0] is an absolute path inside the sandbox
  std::vector<std::string> env;   // "KEY=value", the whole environment
  std::string code;               // written to code_path before exec
  std::string code_path;          // e.g. /work/main.py
  std::vector<InputBind> inputs;
  std::vector<std::string> readonly_paths;  // host paths bound read-only at the same place
  // A runtime image's unpacked tree: readonly_paths (and the top-level links
  // into /usr) are taken from it instead of the host's /; "" = the host's.
  std::string runtime_root;
  // The egress CA bundle (system CAs and the server's CA), copied read-only
  // to kCaBundlePath for a sandbox whose job may intercept; "" for none.
  std::string ca_bundle_path;
  // A job with a network profile that intercepts a host: kCaBundleEnv too
  // (cold; a warm sandbox's claim brings it).
  bool ca_env = false;
  uint64_t work_max_bytes = 0;
  uint64_t tmp_max_bytes = 0;
  uint64_t outputs_max_bytes = 0;
  uint64_t outputs_max_files = 0;
  uint64_t artifact_max_bytes = 0;  // per file; larger ones are rejected unread
  uint64_t stdout_max_bytes = 0;
  uint64_t stderr_max_bytes = 0;
  uint64_t timeout_ms = 0;
  uint32_t host_uid = 0;  // host identity the sandbox user maps to
  uint32_t host_gid = 0;
  // The user namespace is created with euid host_uid (a root server's
  // per-sandbox uid): what the kernel counts per user is charged to it.
  bool own_user_ns = false;
  // A normal user's subordinate ids (/etc/subuid, /etc/subgid), 0: none. The
  // zygote first moves into a user namespace of its own mapping the server's
  // user to 0 and these to 1 (newuidmap/newgidmap); host_uid/host_gid are
  // then 1, and the runner joins that namespace once pid 1 exists.
  uint32_t subordinate_uid = 0;
  uint32_t subordinate_gid = 0;
  // This sandbox's share of what the kernel counts per user and that the
  // sandbox's uid may share with others: RLIMIT_SIGPENDING, RLIMIT_MSGQUEUE,
  // and its user namespace's max_inotify_instances/max_inotify_watches. 0: unset.
  uint64_t sigpending_max = 0;
  uint64_t msgqueue_max_bytes = 0;
  uint64_t inotify_instances_max = 0;
  uint64_t inotify_watches_max = 0;
  std::string scratch_dir;  // host dir owned by this job; runner creates and removes its contents
  std::string harvest_dir;  // host dir receiving copies of /outputs files
  uint64_t memory_max_bytes = 0;
  uint64_t pids_max = 0;
  uint64_t nofile_max = 0;
  double cpu_max_cores = 0;
  nlohmann::json cgroup_host;  // cgroups::Host detected by the server at start-up
  bool require_landlock = false;
  bool require_cgroups = false;
  std::string seccomp_bpf_base64;  // compiled filter (sock_filter array); empty: the runner compiles
  bool progress = false;           // write a progress line to stdout about once a second
  // Warm pool. cold: everything above is the job. Otherwise the runner
  // builds the sandbox with no code and no inputs, says {"warm":"ready"} and
  // waits for a Claim line on stdin that supplies them:
  //   exec     the program is exec'ed when the claim arrives;
  //   preload  the program (argv: an interpreter with a loader) is started
  //            ahead, blocked reading fd 3; the claim's go byte releases it.
  Warm warm = Warm::cold;
  uint64_t inputs_max_bytes = 0;  // warm: the /inputs tmpfs cap (no inputs known yet)
  uint64_t inputs_max_files = 0;
  // Cold: the job has a network profile. pid 1 opens the proxy listener on
  // 127.0.0.1:kProxyPort in the job's network namespace and hands it to the
  // runner, which hands it to the broker; the program's environment gains
  // the proxy variables (kProxyEnv). A warm sandbox learns it from its claim.
  bool network = false;
  // A workspace job (cold; a warm sandbox's come with the claim). The runner
  // copies the tree of workspace_in (a host directory) into /work before the
  // program starts (the code file's name excepted: the job's code wins), and
  // once the program ended creates workspace_out (0700, must not exist) with
  // /work's tree but the code file (workspace.h). Both set or both "". A
  // cold workspace job's /work is work_max_bytes: the workspace's size and
  // the room of its code file (workspace::code_room_bytes).
  std::string workspace_in;
  std::string workspace_out;
  // The workspace's size: what its tree may occupy when copied out, cold or
  // warm. Warm, also /work's size for a claim with a workspace (pid 1
  // remounts /work to it and the claim's code room before the copy-in); 0:
  // this sandbox takes no workspace job.
  uint64_t workspace_max_bytes = 0;
  // A runtime cache (policy runtimes.<name>.cache): cache_files, plain files
  // of cache_dir (a host directory built once per server), are copied into a
  // tmpfs at kCacheMountPath that is then read-only, nodev and noexec (a copy,
  // not a bind: mountinfo would show the host path); cache_link_dir ("/tmp/<name>") is made
  // in the sandbox's own /tmp, owned by the sandbox user, holding a symlink to
  // each of cache_files there. All three set, or all empty.
  std::string cache_dir;
  std::string cache_link_dir;
  std::vector<std::string> cache_files;
  // A template (template_fork.h): a warm "preload" sandbox whose program,
  // its start-up done, forks the programs of other sandboxes. The zygote
  // binds a listening socket at template_socket (mode 0600) that the
  // program keeps as kTemplateListenFd. Its user namespace also maps host
  // ids template_ids_first.. (template_ids_count of them, host_uid/host_gid
  // left out) to themselves, so that a sandbox made inside it can map its
  // own host id; pid 1 leaves the namespace counts of its user namespace
  // unlimited (the forks' sandboxes are made in it) and builds no Landlock
  // ruleset (a fork would carry it). "" and 0: not a template.
  std::string template_socket;
  // The shared object whose loop the template's interpreter runs (host path),
  // bound read-only at kTemplateLibraryPath in the template's root only.
  std::string template_library;
  uint32_t template_ids_first = 0;
  uint32_t template_ids_count = 0;
  // A sandbox whose program is forked from a template (warm "preload"): the
  // zygote makes pid 1's namespaces inside the template's user and pid
  // namespaces (those of its pid 1, host pid from_template_pid, started at
  // from_template_start_time in clock ticks, /proc/<pid>/stat field 22: a
  // reused pid is refused), and the runner asks the template at
  // from_template_socket for the program. 0 and "": not forked.
  int32_t from_template_pid = 0;
  uint64_t from_template_start_time = 0;
  std::string from_template_socket;
  // A fork made ahead of any claim while no job runs (a pool's refill at
  // rest): its interpreter runs the runtime's warm-up before it says ready.
  // false: a claim waits for it (forked on demand) or jobs are running (a
  // burst), and the warm-up's CPU would be theirs.
  bool from_template_ahead = false;
};

// Where a template's program finds its listening socket.
constexpr int kTemplateListenFd = 6;
// Where a template's root holds LaunchSpec::template_library.
inline constexpr const char* kTemplateLibraryPath = "/.throwbox/libthrowbox-template.so";

inline constexpr const char* kCacheMountPath = "/var/cache/throwbox";
inline constexpr size_t kCacheFilesMax = 256;

// Where a job's proxy listens, in the job's own network namespace (each has
// its own loopback, so every job can use the same port).
constexpr uint16_t kProxyPort = 3128;
// The variables a job with a profile gets: clients that honour any of them
// (curl, pip, python's urllib, requests, node's undici with a flag) use the proxy.
// The CA bundle's variables name the bundle of the server's CA and the
// system's: what the proxy shows for a host whose requests it reads
// (network.profiles.<p>.credentials and rules) verifies; other hosts' own
// certificates verify as before.
inline constexpr const char* kCaBundlePath = "/etc/throwbox-ca.pem";
inline constexpr const char* kProxyEnv[] = {"HTTP_PROXY=http://127.0.0.1:3128", "HTTPS_PROXY=http://127.0.0.1:3128",
                                            "http_proxy=http://127.0.0.1:3128", "https_proxy=http://127.0.0.1:3128",
                                            "ALL_PROXY=http://127.0.0.1:3128"};
// And, for a job whose profile intercepts a host (ca_env), the bundle's
// variables: only then, because they replace a client's own choice (requests
// prefers REQUESTS_CA_BUNDLE to pip's --cert).
inline constexpr const char* kCaBundleEnv[] = {
    "SSL_CERT_FILE=/etc/throwbox-ca.pem", "REQUESTS_CA_BUNDLE=/etc/throwbox-ca.pem",
    "CURL_CA_BUNDLE=/etc/throwbox-ca.pem", "NODE_EXTRA_CA_CERTS=/etc/throwbox-ca.pem", "PIP_CERT=/etc/throwbox-ca.pem"};
// The variables of kProxyEnv, by name: a policy's sandbox.env may not set them.
inline constexpr const char* kProxyEnvNames[] = {
    "HTTP_PROXY", "HTTPS_PROXY", "http_proxy",    "https_proxy",        "ALL_PROXY",      "all_proxy",
    "NO_PROXY",   "no_proxy",    "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
    "PIP_CERT"};

// The job half of a warm sandbox: what the broker sends once a job claims it.
struct Claim {
  std::string job_id;  // the broker's job (log lines only)
  std::string code;
  std::vector<InputBind> inputs;
  uint64_t timeout_ms = 0;
  bool progress = false;
  bool network = false;      // as LaunchSpec::network
  bool ca_env = false;       // as LaunchSpec::ca_env
  std::string workspace_in;  // as LaunchSpec's; needs the spec's workspace_max_bytes
  std::string workspace_out;
};

// Identity inside the sandbox (passwd/group name "sandbox").
constexpr uint32_t kSandboxUid = 1000;
constexpr uint32_t kSandboxGid = 1000;

struct HarvestedFile {
  std::string name;  // relative to /outputs, '/'-separated
  uint64_t size = 0;
  std::string host_path;  // copy under harvest_dir; empty when rejected
  std::string rejected;   // reason, empty when copied
};

// How many of a workspace's skipped entries the outcome names.
constexpr size_t kSkippedNamesMax = 16;

struct Outcome {
  Status status = Status::sandbox_error;
  std::string error;  // sandbox_error detail (names the failed step)
  bool exited = false;
  int exit_code = 0;
  int signal = 0;
  bool timed_out = false;
  std::string stdout_text;
  std::string stderr_text;
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  uint64_t stdout_cut_bytes = 0;  // bytes written that are not in stdout_text (capture::Stream::cut_bytes)
  uint64_t stderr_cut_bytes = 0;
  uint64_t duration_ms = 0;
  uint64_t cpu_ms = 0;
  uint64_t peak_memory_bytes = 0;
  std::vector<HarvestedFile> files;
  std::vector<std::string> layers;  // the isolation layers that were active
  std::string start = "cold";       // "warm": the sandbox was built ahead by the pool
  // A workspace job: what the copy of /work to workspace_out did. Saved only
  // when workspace_out holds all of /work's kept tree; otherwise the runner
  // removed what it wrote and workspace_error says why. The job's status is
  // the program's either way.
  bool workspace_saved = false;
  uint64_t workspace_bytes = 0;                      // of the regular files copied out
  uint64_t workspace_entries = 0;                    // files, directories and symlinks copied out
  uint64_t workspace_skipped = 0;                    // FIFOs, sockets, devices: not kept
  std::vector<std::string> workspace_skipped_names;  // the first kSkippedNamesMax of them: for the server's log only
  bool workspace_full = false;                       // /work had < 64 KiB or < 1% free, or no inode free, at the end
  std::string workspace_error;
};

nlohmann::json to_json(const LaunchSpec& spec);
util::Result<LaunchSpec> spec_from_json(const nlohmann::json& j);
nlohmann::json to_json(const Claim& claim);
util::Result<Claim> claim_from_json(const nlohmann::json& j);
// A claim this warm sandbox can take: a workspace needs workspace_max_bytes.
util::Status check_claim(const LaunchSpec& warm, const Claim& claim);
nlohmann::json to_json(const Outcome& outcome);
util::Result<Outcome> outcome_from_json(const nlohmann::json& j);

}  // namespace sandbox
