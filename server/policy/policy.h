// The policy: runtime catalog, limits, sandbox settings. Loaded once at start-up,
// immutable afterwards, shared read-only by every server thread.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/network/profile.h"
#include "server/util/result.h"

namespace policy {

struct Runtime {
  std::string name;
  std::string description;
  std::vector<std::string> command;  // interpreter and its flags; the code file is appended
  std::string code_file;             // file name written into /work
  bool optional = false;             // skipped (not offered) when command[0] is missing
  bool available = true;             // resolved at load time
  // "python": a warm pool may start this interpreter ahead with throwbox's
  // python loader (it then waits for the code). "": warm sandboxes of this
  // runtime are built ahead and the interpreter starts when a job claims one.
  std::string loader;
  // Loader "python" only: modules the warm sandbox imports before its claim
  // (before any job's data exists), so a job's own imports are look-ups.
  std::vector<std::string> preload;
  // Loader "python" only: Python statements run after the preload, before any
  // job (no job's data exists), in a namespace of their own (they import
  // what they use: the preload made that a look-up) with print()
  // going nowhere: once in a template before it forks and again, before it
  // says ready, in each fork made while no job runs and no claim waits (so
  // the pages a job's use of the preloaded modules writes are copied while
  // the sandbox waits; a fork for a waiting claim or under load skips it),
  // in a warm sandbox without a template before it says ready. An error fails that sandbox's start.
  std::string warmup;
  // A cache built once per server in a sandbox of this runtime with no job
  // data (cache_code run with cache_env set to a writable directory), then
  // copied read-only into every sandbox of the runtime (sandbox::kCacheMountPath), and
  // linked from the directory cache_env names in sandbox.env (under /tmp).
  std::string cache_code;
  std::string cache_env;
  // Checks (Policy::checks) run after every job of this runtime, whatever
  // the call asks for.
  std::vector<std::string> required_checks;
  // A runtime image (runtimes.<name>.image): an OCI image layout and its
  // manifest's digest ("sha256:<hex>"); "" for the host's own files. Its
  // tree, unpacked by the server at start, takes the place of the host's
  // root for sandbox.readonly_paths.
  std::string image_layout;
  std::string image_digest;
};

// An acceptance check (checks.<name>): a program the operator installs, run
// after a job in a fresh sandbox of its own that sees the job read-only
// (/job/result.json, /job/inputs/<name>, /job/artifacts/<name>); a request
// only names it. Its last stdout line is its verdict.
struct Check {
  std::string name;
  std::string description;
  std::string runtime;               // the runtime whose sandbox runs it
  std::vector<std::string> command;  // run as given (argv[0] absolute); empty: code_file
  std::string code_file;             // host path of a program the runtime runs as a job's code; "": command
  double timeout_s = 30;
  uint64_t max_output_bytes = 64 * 1024;  // of its stdout; beyond: its verdict is "error"
};

struct Limits {
  double timeout_s_default = 10;
  double timeout_s_max = 60;
  uint64_t stdout_max_bytes = 64 * 1024;
  uint64_t stderr_max_bytes = 64 * 1024;
  uint64_t code_max_bytes = 256 * 1024;
  uint64_t input_max_bytes = 8 * 1024 * 1024;
  uint64_t inputs_per_job_max = 16;
  uint64_t work_max_bytes = 64 * 1024 * 1024;
  uint64_t tmp_max_bytes = 64 * 1024 * 1024;
  uint64_t outputs_max_bytes = 32 * 1024 * 1024;
  uint64_t outputs_max_files = 64;
  uint64_t artifact_inline_max_bytes = 4 * 1024 * 1024;
  uint64_t memory_max_bytes = 512 * 1024 * 1024;
  uint64_t pids_max = 128;
  uint64_t nofile_max = 256;
  double cpu_max_cores = 1.0;
};

struct Admission {
  uint64_t jobs_running_max = 4;  // across all tenants
  uint64_t jobs_running_per_tenant_max = 2;
  uint64_t jobs_queued_max = 16;  // waiting for a slot; beyond: busy
  uint64_t cpu_seconds_per_tenant_per_hour = 3600;
  uint64_t tasks_per_tenant_max = 256;  // retained tasks (any status); beyond: refused
  // What one tenant keeps in the store (inputs and artifacts, each content
  // once) until they expire; beyond: an upload is refused, an artifact not kept.
  uint64_t store_bytes_per_tenant_max = 2ull << 30;
  uint64_t store_files_per_tenant_max = 10000;
};

struct Retention {
  uint64_t inputs_ttl_s = 86400;
  uint64_t artifacts_ttl_s = 86400;
  uint64_t jobs_ttl_s = 7 * 86400;  // ledger rows, and with them idempotency keys
  // Ended job records one tenant keeps; beyond, the janitor deletes its oldest.
  uint64_t jobs_per_tenant_max = 10000;
  uint64_t janitor_interval_s = 300;
  uint64_t tasks_ttl_s = 3600;       // a task's lifetime when the client asks for none
  uint64_t tasks_ttl_max_s = 86400;  // the most a client may ask for (MCP tasks, "ttl")
};

// Warm pool: single-use sandboxes built ahead of demand (docs/performance.md).
struct Pool {
  bool enabled = false;
  std::vector<std::string> runtimes;              // runtimes that get warm sandboxes
  uint64_t size = 2;                              // idle warm sandboxes kept per runtime
  uint64_t idle_memory_max_bytes = 256ull << 20;  // measured memory of all idle ones; beyond: no refill
  uint64_t claim_wait_ms = 0;                     // a job waits this long for one being built, then goes cold
  // Of runtimes: built only after the first claim of the runtime (that job runs
  // cold), so a server whose jobs never use it holds none idle.
  std::vector<std::string> first_use;
  // Of runtimes (loader "python"): warm sandboxes forked from a template, a
  // sandbox of the runtime whose interpreter did its start-up and preload
  // once (server/sandbox/template_fork.h), instead of each starting its
  // own; a job that finds none idle gets one forked on the spot. A template
  // is replaced after template_forks_max forks or template_age_max_s
  // seconds, and on a reload; it ends once nothing forked from it lives.
  std::vector<std::string> templates;
  uint64_t template_forks_max = 1000;
  uint64_t template_age_max_s = 3600;
};

// Open HTTP connections the server holds in all (below FD_SETSIZE: Debian's
// cpp-httplib uses select() and answers 500 on a descriptor above it).
constexpr uint64_t kHttpConnectionsMax = 512;

// What one JSON-RPC message must hold beside its payload: the envelope,
// method, tool name, input name and encoding, with room to spare.
constexpr uint64_t kMessageEnvelopeBytes = 64 * 1024;
// A JSON encoder writes each byte of code as at most three: \n, \" and \\ are
// two, and a non-ASCII character as \uXXXX (ensure_ascii) is 6 bytes for its
// 2-3 UTF-8 bytes, 12 for 4. Only raw control characters other than
// \b \f \n \r \t grow more (\u0001 is 6): no source text is made of them.
constexpr uint64_t kCodeEscapeFactor = 3;
// The smallest server.message_max_bytes that carries an upload of
// limits.input_max_bytes as base64 and a run_code of limits.code_max_bytes.
uint64_t message_bytes_needed(const Limits& limits);

struct Server {
  // Without server.message_max_bytes in the policy: the larger of this and
  // message_bytes_needed(limits) (the loader fills it in).
  uint64_t message_max_bytes = 4 * 1024 * 1024;
  int json_max_depth = 64;
  int concurrent_calls_max = 8;
  // serve --http: open connections from one client address (a reverse proxy
  // in front is one address for all its clients).
  uint64_t http_connections_per_address_max = 128;
  // The ledger: a PostgreSQL connection URI that several servers share
  // ("beyond one machine" in docs/operations.md), or "" for SQLite in the
  // state directory. serve --database overrides it.
  std::string database;
  // Inputs, artifacts, workspace trees and the receipt key: a directory several servers share
  // (a shared file system), or "" for the state directory. serve --store
  // overrides it.
  std::string store;
};

struct Sandbox {
  // As root, each live sandbox gets a host uid (and the same gid) of its own
  // from [uid_first, uid_first + uid_count): no account may use the range
  // (checked at start-up against /etc/passwd, /etc/group, /etc/subuid, /etc/subgid).
  uint32_t uid_first = 1879048192;  // 0x70000000: above systemd's container ranges, below 2^31
  uint32_t uid_count = 65536;
  std::vector<std::string> readonly_paths;  // host paths bound read-only at the same place
  std::map<std::string, std::string> env;   // the whole environment of the program
  // Layers the host may lack. true: refuse to run without it (sandbox_error);
  // false: run without it and say so in every result's sandbox_layers.
  bool require_landlock = false;
  bool require_cgroups = false;
};

struct Artifacts {
  std::vector<std::string> allowed_media_types = {"text/plain",       "text/csv",      "text/tab-separated-values",
                                                  "application/json", "text/markdown", "image/png",
                                                  "image/jpeg",       "image/gif",     "application/pdf"};
  uint64_t file_max_bytes = 16 * 1024 * 1024;
  bool csv_reject = false;              // "csv_formulas": "neutralise" (default) or "reject"
  bool active_content_as_text = false;  // "active_content": "reject" (default) or "text"
  // Media type -> the extensions (lowercase, with the dot) a file served as
  // that type may be named with. The loader fills in artifacts::names'
  // defaults for each allowed type the policy does not list.
  std::map<std::string, std::vector<std::string>> allowed_extensions;
  uint64_t image_pixels_max = 50'000'000;  // width x height of a PNG, JPEG or GIF
  bool pdf_strip = false;                  // "pdf_active": "reject" (default) or "strip"
};

// Egress by policy: the network profiles (server/network/profile.h).
using NetworkProfile = network::Profile;
using Network = network::Settings;

// Workspaces (docs/tools.md, Workspaces): a tenant's /work kept between the calls
// that name it, until it is closed or idle past its TTL.
struct Workspaces {
  uint64_t ttl_s_default = 1800;           // idle lifetime when open_workspace asks for none
  uint64_t ttl_s_max = 86400;              // the most open_workspace may ask for
  uint64_t per_tenant_max = 8;             // open at once per tenant; beyond: busy
  uint64_t size_max_bytes = 128ull << 20;  // the workspace's /work tmpfs; beyond: ENOSPC in the job
};

struct Policy {
  std::string source;  // file it came from, for messages
  std::string sha256;  // of effective_json's text (set by parse): what a receipt names
  std::map<std::string, Runtime> runtimes;
  Limits limits;
  Server server;
  Sandbox sandbox;
  Artifacts artifacts;
  Admission admission;
  Retention retention;
  Pool pool;
  Network network;
  Workspaces workspaces;
  std::map<std::string, Check> checks;

  const Runtime* find_runtime(const std::string& name) const;
  const Check* find_check(const std::string& name) const;
  std::vector<std::string> available_runtimes() const;
};

// Parses and validates; every error names the offending key ("limits.timeout_s.max: ...").
// secrets: kRequired refuses a credential whose value_file cannot be used;
// kReported (doctor) leaves its value empty and says why in value_problem.
enum class Secrets { kRequired, kReported };
util::Result<Policy> parse(const nlohmann::json& doc, const std::string& source, Secrets secrets = Secrets::kRequired);
util::Result<Policy> load_file(const std::string& path, Secrets secrets = Secrets::kRequired);
// The bundled policies/default.json: next to the binary's source tree or installed.
// Where the policy is read when --policy is not given: the first readable of
// default_path_candidates() (/etc/throwbox/policy.json first), else the first.
std::string default_path();
std::vector<std::string> default_path_candidates();
// The most a secret file (a credential's value_file) may hold.
constexpr size_t kSecretMaxBytes = 8 * 1024;
// A credential's secret as it is now, or why it cannot be used: a regular
// file (not a link) owned by root or the server's user, which no one else may
// read and only its owner may change, of one line (a trailing newline is not
// part of the value) and at most kSecretMaxBytes.
util::Result<std::string> read_secret_file(const std::string& path);
// A check's program file (Check::code_file) as it is now, read whole, or why
// it cannot be trusted: a regular file, not a link, of at most max_bytes,
// owned by root or this process's user and writable by no one else, in
// directories that only root or this user can change (or sticky ones).
// Checked at load and read again for every run, so what runs is what was checked.
util::Result<std::string> read_check_program(const std::string& path, uint64_t max_bytes);

// Every key of the policy file format with its value after defaults, in the
// file's own shape (`throwbox policy check`); parse(effective_json(p)) == p.
nlohmann::json effective_json(const Policy& p);

}  // namespace policy
