// throwbox entry: flags, policy load, transport choice. A usage error is
// printed as "throwbox: <message>" and exits 2; start-up errors are caught
// here, logged and exit 2. The per-job sandbox runner is the separate
// executable throwbox-runner beside this one (single-threaded; server/sandbox/).
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <stdexcept>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "server/protocol/audit.h"
#include "server/broker/jobs.h"
#include "server/broker/ledger.h"
#include "server/protocol/tasks.h"
#include "server/doctor.h"
#include "server/policy/live.h"
#include "server/policy/policy.h"
#include "server/protocol/mcp.h"
#include "server/image/oci.h"
#include "server/receipt_cli.h"
#include "server/sandbox/cgroup_host.h"
#include "server/sandbox/cgroups.h"
#include "server/store/store.h"
#include "server/transport/http.h"
#include "server/transport/stdio.h"
#include "server/util/fd.h"
#include "server/util/fs.h"
#include "server/util/log_setup.h"
#include "server/util/database_uri.h"
#include "server/util/reloads.h"
#include "server/util/text.h"
#include "tools/registry.h"

namespace {

// Help text: `--help` prints it on stdout and exits 0; a usage error prints
// the mistake and where the help is on stderr and exits 2 (the convention
// of coreutils and git).
constexpr const char* kUsage =
    "Usage: throwbox <command> [options]\n"
    "       throwbox --help | --version\n"
    "\n"
    "An MCP tool server that runs model-written code in a disposable Linux\n"
    "process sandbox: no network, no secrets, bounded output, checked artifacts.\n"
    "\n"
    "Commands:\n"
    "  serve          Serve MCP over stdio, or over Streamable HTTP with --http\n"
    "  doctor         Probe this host's isolation layers and run one probe job\n"
    "  policy check   Validate a policy file and print the effective policy\n"
    "  receipt        Print the receipt key, verify a receipt, or replay its job\n"
    "  image          Build a runtime image (OCI layout), or verify and unpack one\n"
    "  version        Print the version\n"
    "  help [CMD]     Print this help, or a command's\n"
    "\n"
    "Run 'throwbox <command> --help' for a command's options.\n";

constexpr const char* kServeHelp =
    "Usage: throwbox serve [options]\n"
    "\n"
    "Serve the MCP tools upload_input, run_code, fetch_artifact, open_workspace\n"
    "and close_workspace over stdio as newline-delimited JSON-RPC; stdout\n"
    "carries only MCP messages, logs go to stderr. With --http, serve\n"
    "Streamable HTTP at /mcp instead.\n"
    "\n"
    "Options:\n"
    "  --state-dir DIR        Inputs, artifacts, ledger and audit log (created\n"
    "                         0700; default: $THROWBOX_STATE_DIR, else\n"
    "                         $XDG_STATE_HOME/throwbox, else\n"
    "                         ~/.local/state/throwbox)\n"
    "  --policy FILE          Policy file (default: /etc/throwbox/policy.json,\n"
    "                         else the installed or built-in default.json)\n"
    "  --log-level LVL        trace, debug, info, warn, error, critical or off\n"
    "                         (default: info; any other word is an error)\n"
    "  --database URI         Keep the ledger (jobs, keys, tasks, workspaces) in\n"
    "                         PostgreSQL, shared by every server given the same\n"
    "                         URI (postgresql://[user@]host[:port]/dbname[?...];\n"
    "                         no password in it: libpq's ~/.pgpass, PGPASSFILE\n"
    "                         or PGPASSWORD); default: the policy's\n"
    "                         server.database, else SQLite in the state directory\n"
    "  --store DIR            Keep inputs, artifacts, workspaces and the receipt\n"
    "                         key in DIR, shared by every server given the same\n"
    "                         one (a shared file system); default: the policy's\n"
    "                         server.store, else the state directory\n"
    "  -h, --help             Print this help and exit\n"
    "\n"
    "HTTP options:\n"
    "  --http HOST:PORT       Serve Streamable HTTP at http://HOST:PORT/mcp\n"
    "                         instead of stdio; a non-loopback HOST requires\n"
    "                         --tokens or --oauth\n"
    "  --tokens FILE          Bearer tokens, one '<tenant> <sha256 hex of token>' a\n"
    "                         line, '#' comments; the file must be mode 0600\n"
    "  --oauth FILE           Also accept OAuth 2.1 JWT access tokens: issuer,\n"
    "                         jwks_uri, resource, tenant_claim, scopes (JSON;\n"
    "                         see docs/http.md, OAuth)\n"
    "  --tls-cert FILE        TLS certificate (PEM); needs --tls-key\n"
    "  --tls-key FILE         TLS private key (PEM); needs --tls-cert\n"
    "  --allow-origin ORIGIN  Accept requests carrying this Origin (repeatable;\n"
    "                         any other Origin is refused)\n"
    "  --allow-host HOST      Accept this Host header besides the bound address\n"
    "                         (repeatable; against DNS rebinding)\n"
    "\n"
    "Exit status: 0 when stdin closes (stdio) or on SIGTERM or SIGINT (running\n"
    "calls are cancelled and answered first; the server's cgroups are removed);\n"
    "2 on a start-up error (bad option, invalid policy, unusable state directory).\n";

constexpr const char* kDoctorHelp =
    "Usage: throwbox doctor [options]\n"
    "\n"
    "Probe this host for each isolation layer (user namespaces, seccomp,\n"
    "Landlock, cgroups), say what is missing and how to fix it, then run one\n"
    "real job through the sandbox.\n"
    "\n"
    "Options:\n"
    "  --policy FILE          Policy whose requirements apply (default as serve)\n"
    "  --state-dir DIR        State directory for the probe job (default as serve)\n"
    "  --log-level LVL        trace, debug, info, warn, error, critical or off\n"
    "                         (default: warn; any other word is an error)\n"
    "  -h, --help             Print this help and exit\n"
    "\n"
    "Exit status: 0 when every layer the policy requires is present and the\n"
    "probe job completed; 1 otherwise; 2 on a bad option or an invalid policy.\n";

constexpr const char* kPolicyHelp =
    "Usage: throwbox policy check [FILE]\n"
    "       throwbox policy check [FILE] [--tokens FILE] [--oauth FILE]\n"
    "                             [--tls-cert FILE --tls-key FILE]\n"
    "\n"
    "Validate a policy file as 'serve' would load it and print the effective\n"
    "policy on stdout: every key with its value after defaults, as JSON. FILE\n"
    "defaults as serve's --policy; stderr names the file read (its real path).\n"
    "Runtimes that are optional and missing on this host are noted on stderr.\n"
    "See docs/policy.md.\n"
    "\n"
    "The files given to serve --http are checked as serve reads them at start,\n"
    "with nothing started: the tokens file (mode 0600, every line well-formed),\n"
    "the OAuth settings (the issuer's keys are not fetched), the TLS\n"
    "certificate and key (both load, and the key matches the certificate).\n"
    "Each is summarised on stderr. Run the check as the user serve runs as.\n"
    "\n"
    "Options:\n"
    "  --tokens FILE          The bearer tokens file, as serve --tokens\n"
    "  --oauth FILE           The OAuth settings, as serve --oauth\n"
    "  --tls-cert FILE        The TLS certificate (PEM); needs --tls-key\n"
    "  --tls-key FILE         The TLS private key (PEM); needs --tls-cert\n"
    "  -h, --help             Print this help and exit\n"
    "\n"
    "Exit status: 0 when the policy and every file given are valid; 2 when one\n"
    "is not (the error on stderr names the file and what is wrong) or on a\n"
    "usage error.\n";

constexpr const char* kReceiptHelp =
    "Usage: throwbox receipt key [--state-dir DIR] [--json]\n"
    "       throwbox receipt verify FILE [--key PEM | --state-dir DIR]\n"
    "       throwbox receipt replay FILE --code FILE [--inputs DIR] [--policy FILE]\n"
    "                                    [--key PEM | --state-dir DIR] [--json]\n"
    "\n"
    "Every run_code result carries a receipt: a statement of what ran (the\n"
    "code, inputs, runtime, policy, boundary and limits by digest) and what\n"
    "came of it (status, output, artifacts and check verdicts by digest),\n"
    "signed with the server's Ed25519 key (<state-dir>/receipt-key.pem, made\n"
    "at first start). See docs/evidence.md.\n"
    "\n"
    "  key      Print the server's public key (PEM; --json: with its key id)\n"
    "  verify   Check that FILE (the receipt object as the result returned it,\n"
    "           as JSON; - reads stdin) is exactly what the key signed\n"
    "  replay   Run the receipt's code (--code) on its inputs (--inputs DIR,\n"
    "           each at the name the receipt gives) in its runtime with its\n"
    "           limits, in a server of its own under the state directory, and\n"
    "           say which digests and verdicts match\n"
    "\n"
    "Options:\n"
    "  --state-dir DIR        The server's state directory, whose key is used\n"
    "                         (default as serve)\n"
    "  --key PEM              A public key file to verify with instead\n"
    "  --policy FILE          The policy replay runs under (default as serve)\n"
    "  --json                 Print JSON\n"
    "  -h, --help             Print this help and exit\n"
    "\n"
    "Exit status: 0 when the receipt verifies (verify) or every digest matches\n"
    "(replay); 1 when it does not, or some differ; 2 on a usage error or when\n"
    "a file cannot be read.\n";

constexpr const char* kImageHelp =
    "Usage: throwbox image build ROOTFS LAYOUT\n"
    "       throwbox image unpack LAYOUT DIGEST DEST\n"
    "\n"
    "Runtime images are OCI image layouts pinned by their manifest's digest\n"
    "(sha256:<hex>). See docs/operations.md (Runtime images).\n"
    "\n"
    "  build    Make the layout LAYOUT (a new directory) from the tree ROOTFS:\n"
    "           one gzip layer, entries in path order, owner 0:0, time 0, no\n"
    "           device nodes; the same tree gives the same digest, printed\n"
    "  unpack   Verify LAYOUT's manifest DIGEST and every blob it names, and\n"
    "           unpack its layers into DEST (a new directory), as a server\n"
    "           does: whiteouts applied; device nodes, FIFOs, paths leaving\n"
    "           the tree or passing through a symbolic link refused; setuid,\n"
    "           setgid and write bits dropped\n"
    "\n"
    "Options:\n"
    "  -h, --help             Print this help and exit\n"
    "\n"
    "Exit status: 0 done; 1 the image was refused (the reason on stderr;\n"
    "nothing is left at DEST); 2 on a usage error or when a file cannot be\n"
    "written.\n";

constexpr const char* kVersionHelp =
    "Usage: throwbox version\n"
    "       throwbox --version\n"
    "\n"
    "Print the version and exit.\n";

// The help of a command, or nullptr for an unknown one.
const char* help_of(const std::string& command) {
  if (command == "serve") return kServeHelp;
  if (command == "doctor") return kDoctorHelp;
  if (command == "policy") return kPolicyHelp;
  if (command == "receipt") return kReceiptHelp;
  if (command == "image") return kImageHelp;
  if (command == "version") return kVersionHelp;
  return nullptr;
}

// A mistake in a command's arguments: main prints "throwbox: <message>" and
// where the usage is on stderr, and exits 2; no log line (the mistake is the
// caller's, not the server's).
class UsageError : public std::runtime_error {
 public:
  UsageError(std::string command, const std::string& message)
      : std::runtime_error(message), command_(std::move(command)) {}
  const std::string& command() const { return command_; }

 private:
  std::string command_;
};

// The names --log-level takes, as spdlog spells them.
constexpr const char* kLogLevels = "trace, debug, info, warn, error, critical or off";
bool known_log_level(const std::string& name) {
  for (const char* n : {"trace", "debug", "info", "warn", "error", "critical", "off"})
    if (name == n) return true;
  return false;
}

struct Options {
  std::string state_dir;
  std::string policy_path;
  std::string log_level = "info";
  std::string database;  // serve --database
  std::string store;     // serve --store
  bool http = false;     // serve --http HOST:PORT
  transport::http::Options http_options;
};

std::string default_state_dir() {
  if (const char* s = std::getenv("THROWBOX_STATE_DIR"); s && *s) return s;
  if (const char* s = std::getenv("XDG_STATE_HOME"); s && *s) return std::string(s) + "/throwbox";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.local/state/throwbox";
  throw std::runtime_error("no state directory: pass --state-dir or set THROWBOX_STATE_DIR");
}

Options parse_flags(const std::string& command, int argc, char** argv) {
  Options o;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) throw UsageError(command, std::string(flag) + " needs a value");
      return argv[++i];
    };
    if (a == "--state-dir")
      o.state_dir = value("--state-dir");
    else if (command == "serve" && a == "--http") {
      auto listen = transport::http::parse_listen(value("--http"), o.http_options);
      if (!listen) throw UsageError(command, listen.error().message);
      o.http_options = *listen;
      o.http = true;
    } else if (command == "serve" && a == "--database") {
      o.database = value("--database");
      if (std::string why = util::database_uri_problem(o.database); !why.empty())
        throw UsageError(command, "--database " + util::redact_database_uri(o.database) + ": " + why);
    } else if (command == "serve" && a == "--store") {
      o.store = value("--store");
      if (o.store.empty()) throw UsageError(command, "--store needs a directory");
    } else if (command == "serve" && a == "--tokens")
      o.http_options.tokens_file = value("--tokens");
    else if (command == "serve" && a == "--oauth")
      o.http_options.oauth_file = value("--oauth");
    else if (command == "serve" && a == "--tls-cert")
      o.http_options.tls_cert = value("--tls-cert");
    else if (command == "serve" && a == "--tls-key")
      o.http_options.tls_key = value("--tls-key");
    else if (command == "serve" && a == "--allow-origin")
      o.http_options.allowed_origins.push_back(value("--allow-origin"));
    else if (command == "serve" && a == "--allow-host")
      o.http_options.allowed_hosts.push_back(value("--allow-host"));
    else if (a == "--policy")
      o.policy_path = value("--policy");
    else if (a == "--log-level") {
      // spdlog's from_str turns an unknown name into "off": a typo would
      // silence every log line, refusals and sandbox errors included.
      o.log_level = value("--log-level");
      if (!known_log_level(o.log_level))
        throw UsageError(command, "--log-level " + o.log_level + ": not a level (" + kLogLevels + ")");
    }
    // (-h/--help never reaches here: main answers it before the command runs.)
    else
      throw UsageError(command, "unknown option for " + command + ": " + a);
  }
  if (!o.http && (!o.http_options.tokens_file.empty() || !o.http_options.oauth_file.empty() ||
                  !o.http_options.tls_cert.empty() || !o.http_options.tls_key.empty() ||
                  !o.http_options.allowed_origins.empty() || !o.http_options.allowed_hosts.empty()))
    throw UsageError(command,
                     "--tokens, --oauth, --tls-cert, --tls-key, --allow-origin and --allow-host need --http HOST:PORT");
  if (o.state_dir.empty()) o.state_dir = default_state_dir();
  if (o.policy_path.empty()) o.policy_path = policy::default_path();
  return o;
}

// throwbox-runner: installed under <prefix>/libexec/throwbox (the package's
// /usr/libexec/throwbox), or beside this executable in a build directory.
std::string runner_exe() {
  const std::string dir = util::self_exe_dir();
  const std::string candidates[] = {dir + "/../libexec/throwbox/throwbox-runner", dir + "/throwbox-runner"};
  for (const auto& runner : candidates)
    if (::access(runner.c_str(), X_OK) == 0) {
      char real[PATH_MAX];
      return ::realpath(runner.c_str(), real) ? std::string(real) : runner;
    }
  throw std::runtime_error("throwbox-runner is missing or not executable: looked for " + candidates[0] + " and " +
                           candidates[1] + " (it is built and installed with throwbox)");
}

// SIGHUP (blocked in every thread) runs the reload steps, on this thread,
// until the server stops.
void reload_on_sighup(std::stop_token stop, util::Reloads* reloads) {
  sigset_t hup;
  ::sigemptyset(&hup);
  ::sigaddset(&hup, SIGHUP);
  while (!stop.stop_requested()) {
    struct timespec tick {
      0, 200 * 1000 * 1000
    };
    if (::sigtimedwait(&hup, nullptr, &tick) == SIGHUP) {
      spdlog::info("reload: SIGHUP");
      reloads->run();
    }
  }
}

// The policy file read again: applied when only what a running server can
// take over changed (policy::reload_problems), else refused, saying which.
util::Result<std::string> reload_policy(const std::string& path, policy::Live& live, broker::Jobs& jobs,
                                        tools::Registry& registry, protocol::Tasks& tasks) {
  auto next = policy::load_file(path);
  if (!next) return next.error();
  const std::shared_ptr<const policy::Policy> running = live.get();
  const std::vector<std::string> changed = policy::changed_sections(*running, *next);
  if (changed.empty()) return std::string(path + ": unchanged");
  auto join = [](const std::vector<std::string>& names) {
    std::string out;
    for (auto& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
  };
  if (auto problems = policy::reload_problems(*running, *next); !problems.empty())
    return util::make_error(util::ErrorCode::kPolicy, path + ": " + join(problems) +
                                                          " changed, which needs a restart (a reload takes " +
                                                          "limits, admission and network)");
  auto shared = std::make_shared<const policy::Policy>(std::move(*next));
  if (auto s = jobs.apply(shared); !s) return s.error();
  registry.replace(tools::make_registry(*shared));
  tasks.set_per_tenant_max(shared->admission.tasks_per_tenant_max);
  return path + ": " + join(changed) + " applied to the calls that start from now on";
}

int serve(int argc, char** argv) {
  int wire = transport::stdio::guard_stdout();
  Options opt = parse_flags("serve", argc, argv);
  spdlog::set_level(spdlog::level::from_str(opt.log_level));

  auto pol = policy::load_file(opt.policy_path);
  if (!pol) throw std::runtime_error(pol.error().message);
  if (!opt.database.empty()) pol->server.database = opt.database;
  if (!opt.store.empty()) {
    std::string dir = std::filesystem::absolute(opt.store).lexically_normal().string();
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    pol->server.store = dir;
  }
  if (opt.state_dir.empty() || opt.state_dir[0] != '/') {
    char cwd[PATH_MAX];
    if (!::getcwd(cwd, sizeof cwd)) throw std::runtime_error("getcwd failed");
    opt.state_dir = std::string(cwd) + "/" + opt.state_dir;
  }
  if (auto s = util::make_dirs(opt.state_dir, 0700); !s) throw std::runtime_error(s.error().message);
  ::chmod(opt.state_dir.c_str(), 0700);
  // Inputs, artifacts and the receipt key: the state directory, or a store of
  // their own (shared by the servers of one database).
  const std::string store_root = pol->server.store.empty() ? opt.state_dir : pol->server.store;
  if (store_root != opt.state_dir) {
    if (auto s = util::make_dirs(store_root, 0700); !s) throw std::runtime_error("store: " + s.error().message);
    if (::access(store_root.c_str(), R_OK | W_OK | X_OK) != 0)
      throw std::runtime_error("store " + store_root + ": this server's user cannot read and write it (" +
                               std::strerror(errno) + ")");
  }
  // A dead client must not kill us mid-write; write() reports EPIPE instead.
  ::signal(SIGPIPE, SIG_IGN);
  // Before any thread exists, so every thread inherits the mask: SIGINT and
  // SIGTERM end the server through its normal exit (HTTP: sigtimedwait; stdio:
  // a signalfd beside stdin), which removes its cgroups; SIGHUP reloads
  // (reload_on_sighup), never ends it.
  sigset_t stop;
  ::sigemptyset(&stop);
  ::sigaddset(&stop, SIGINT);
  ::sigaddset(&stop, SIGTERM);
  sigset_t blocked = stop;
  ::sigaddset(&blocked, SIGHUP);
  ::pthread_sigmask(SIG_BLOCK, &blocked, nullptr);
  util::UniqueFd stop_fd(opt.http ? -1 : ::signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!opt.http && !stop_fd.valid()) throw std::runtime_error(util::call_error("signalfd", "SIGINT|SIGTERM", errno));

  // Before any thread exists: a delegated cgroup may move this process into a
  // leaf. Declared before the broker, so it outlives every runner and removes
  // whatever job cgroup is left when the server exits.
  auto cgroup_tree = sandbox::cgroup_host::ServerTree::set_up();
  const sandbox::cgroups::Host& cgroup_host = cgroup_tree->host();
  for (auto& note : cgroup_tree->notes()) spdlog::warn("cgroups: {}", note);
  if (cgroup_tree->orphans_removed())
    spdlog::info("cgroups: removed {} left by servers that are gone", cgroup_tree->orphans_removed());
  if (cgroup_host.mode == sandbox::cgroups::Mode::none) {
    if (pol->sandbox.require_cgroups)
      throw std::runtime_error("the policy requires cgroups but none are usable: " + cgroup_host.why_not);
    spdlog::warn("cgroups unavailable ({}); jobs run without them: {}", cgroup_host.why_not,
                 sandbox::cgroup_host::kWithoutCgroups);
  } else {
    spdlog::info("cgroups: {} ({})", to_string(cgroup_host.mode), cgroup_host.placement);
  }
  store::Store store(opt.state_dir, store_root);
  policy::Live live(std::make_shared<const policy::Policy>(std::move(*pol)));
  const std::shared_ptr<const policy::Policy> boot = live.get();
  broker::Jobs jobs(live, store, runner_exe(), sandbox::cgroups::to_json(cgroup_host));
  jobs.reclaim_leftovers();
  jobs.start_pool();
  tools::Registry registry = tools::make_registry(*boot);
  // Audit: one JSON line per tool call, bounded to 2 x 16 MiB.
  protocol::Audit audit(opt.state_dir + "/audit.log", 16 * 1024 * 1024);
  // MCP tasks, on a ledger connection of their own. Declared after what their
  // work uses (jobs, store, registry, audit), so it is destroyed first.
  auto task_ledger = broker::Ledger::open(broker::ledger_config(*boot, opt.state_dir));
  if (!task_ledger) throw std::runtime_error("task ledger: " + task_ledger.error().message);
  protocol::Tasks tasks(std::move(*task_ledger), protocol::tasks_options(*boot));
  util::Reloads reloads;
  reloads.add("policy", [&] { return reload_policy(opt.policy_path, live, jobs, registry, tasks); });
  // Declared after what the reload steps use: it stops (joins) before they go.
  std::jthread reloader(reload_on_sighup, &reloads);
  protocol::mcp::ServerContext ctx{live, store, jobs, registry, &audit, &tasks};
  ctx.reloads = &reloads;
  if (opt.http) {
    spdlog::info("throwbox {} serving MCP over Streamable HTTP; uid={} policy={} state={} ledger={} runtimes={}",
                 THROWBOX_VERSION, ::geteuid(), boot->source, opt.state_dir, jobs.ledger_name(),
                 boot->available_runtimes().size());
    if (auto s = transport::http::serve(ctx, opt.http_options); !s) throw std::runtime_error(s.error().message);
    tasks.drain();
    spdlog::info("stopped");
    return 0;
  }
  transport::stdio::Writer writer(wire);
  spdlog::info("throwbox {} serving MCP on stdio; uid={} policy={} state={} ledger={} runtimes={}", THROWBOX_VERSION,
               ::geteuid(), boot->source, opt.state_dir, jobs.ledger_name(), boot->available_runtimes().size());
  {
    protocol::mcp::Session session(ctx, writer, "local");
    transport::stdio::serve(session, boot->server.message_max_bytes, 0, stop_fd.get());
  }
  // Tasks outlive their session: let the running ones end (each is bounded by
  // its job's timeout) so their results are recorded.
  if (size_t n = tasks.running(); n) spdlog::info("stdin closed; waiting for {} running task(s)", n);
  tasks.drain();
  spdlog::info("stdin closed; exiting");
  return 0;
}

int doctor_command(int argc, char** argv) {
  Options opt = parse_flags("doctor", argc, argv);
  spdlog::set_level(spdlog::level::from_str(opt.log_level == "info" ? "warn" : opt.log_level));
  // A credential's unreadable secret is a line of its own, not the end.
  auto pol = policy::load_file(opt.policy_path, policy::Secrets::kReported);
  if (!pol) throw std::runtime_error(pol.error().message);
  if (auto s = util::make_dirs(opt.state_dir, 0700); !s) throw std::runtime_error(s.error().message);
  return doctor::run(*pol, opt.state_dir, runner_exe());
}

// A path as the kernel resolves it (symbolic links, "..", the working
// directory); as given, made absolute, when it does not resolve.
std::string real_path(const std::string& path) {
  char real[PATH_MAX];
  if (::realpath(path.c_str(), real)) return real;
  char cwd[PATH_MAX];
  if (path.empty() || path[0] == '/' || !::getcwd(cwd, sizeof cwd)) return path;
  return std::string(cwd) + "/" + path;
}

// throwbox policy check [FILE] [--tokens FILE] [--oauth FILE] [--tls-cert
// FILE --tls-key FILE]: the loaders' verdicts, with nothing started.
int policy_command(int argc, char** argv) {
  constexpr const char* kCheckUsage =
      "Usage: throwbox policy check [FILE] [--tokens FILE] [--oauth FILE] [--tls-cert FILE --tls-key FILE]";
  std::vector<std::string> args(argv + 2, argv + argc);
  if (args.empty() || args[0] != "check")
    throw UsageError("policy", std::string("policy: ") +
                                   (args.empty() ? "missing subcommand" : "unknown subcommand \"" + args[0] + "\"") +
                                   "\n" + kCheckUsage);
  std::string given;
  transport::http::Options files;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    std::string* value = a == "--tokens"     ? &files.tokens_file
                         : a == "--oauth"    ? &files.oauth_file
                         : a == "--tls-cert" ? &files.tls_cert
                         : a == "--tls-key"  ? &files.tls_key
                                             : nullptr;
    if (value && i + 1 < args.size()) {
      *value = args[++i];
    } else if (value) {
      throw UsageError("policy", "policy check: " + a + " needs a value");
    } else if (given.empty() && !(a.size() > 1 && a[0] == '-')) {
      given = a;
    } else {
      throw UsageError("policy", "policy check: unexpected argument \"" + a + "\"");
    }
  }
  const std::string path = given.empty() ? policy::default_path() : given;
  std::cerr << "throwbox: policy file " << real_path(path) << (given.empty() ? " (the default)" : "") << "\n";
  auto pol = policy::load_file(path);
  if (!pol) {
    std::cerr << "throwbox: " << pol.error().message << "\n";
    return 2;
  }
  for (auto& [name, rt] : pol->runtimes)
    if (!rt.available)
      std::cerr << "throwbox: note: runtimes." << name << ": " << rt.command[0]
                << " is not on this host; the runtime is optional and will not be offered\n";
  auto held = transport::http::check_files(files);
  if (!held) {
    std::cerr << "throwbox: " << held.error().message << "\n";
    return 2;
  }
  for (const auto& line : *held) std::cerr << "throwbox: " << line << "\n";
  std::cout << policy::effective_json(*pol).dump(2) << "\n";
  return 0;
}

// throwbox receipt key|verify|replay (receipt_cli.h).
int receipt_command(int argc, char** argv) {
  std::vector<std::string> args(argv + 2, argv + argc);
  std::string state_dir = default_state_dir();
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--state-dir") state_dir = args[i + 1];
  spdlog::set_level(spdlog::level::warn);
  try {
    return receipt_cli::run(args, state_dir, policy::default_path(), [] { return runner_exe(); });
  } catch (const std::invalid_argument& e) {
    throw UsageError("receipt", e.what());
  } catch (const std::runtime_error& e) {
    std::cerr << "throwbox: " << e.what() << "\n";
    return 2;
  }
}

// throwbox image build|unpack (server/image/oci.h).
int image_command(int argc, char** argv) {
  std::vector<std::string> args(argv + 2, argv + argc);
  const std::string sub = args.empty() ? "" : args[0];
  if (sub == "build" && args.size() == 3) {
    auto built = image::build(args[1], args[2]);
    if (!built) {
      std::cerr << "throwbox: image build: " << built.error().message << "\n";
      return 2;
    }
    std::cerr << "throwbox: " << args[2] << ": " << built->entries << " entries, one layer of " << built->layer_bytes
              << " bytes" << (built->skipped ? ", " : "")
              << (built->skipped ? std::to_string(built->skipped) + " device node(s), FIFO(s) or socket(s) left out"
                                 : "")
              << "\n";
    std::cout << built->manifest.str() << "\n";
    return 0;
  }
  if (sub == "unpack" && args.size() == 4) {
    auto digest = image::parse_digest(args[2]);
    if (!digest) throw UsageError("image", "image unpack: " + digest.error().message);
    auto u = image::unpack(args[1], *digest, args[3]);
    if (!u) {
      std::cerr << "throwbox: image unpack: " << u.error().message << "\n";
      return u.error().code == util::ErrorCode::kInvalidArgument ? 1 : 2;
    }
    std::cout << args[3] << ": " << u->layers << " layer(s), " << u->files << " files (" << u->bytes << " bytes), "
              << u->directories << " directories, " << u->symlinks << " symbolic links, " << u->hardlinks
              << " hard links, " << u->whiteouts << " whiteouts applied, setuid/setgid/sticky dropped from "
              << u->special_bits_dropped << "\n";
    return 0;
  }
  throw UsageError("image", sub.empty()                         ? "image: missing subcommand"
                            : sub == "build" || sub == "unpack" ? "image " + sub + ": wrong number of arguments"
                                                                : "image: unknown subcommand \"" + sub + "\"");
}

}  // namespace

int main(int argc, char** argv) {
  // Nothing the launching process left open (secrets, sockets, its own pipes)
  // may reach a runner or a sandbox: only stdin, stdout and stderr stay.
  ::close_range(3, ~0U, 0);
  // Logs go to stderr only: stdout belongs to the protocol.
  util::log_setup::install_stderr_logger();
  if (argc < 2) {
    std::cerr << kUsage;
    return 2;
  }
  std::string cmd = argv[1];
  // `throwbox <command> --help` anywhere among its arguments, before the
  // command runs (serve guards stdout for the protocol first).
  if (const char* help = help_of(cmd))
    for (int i = 2; i < argc; ++i)
      if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
        std::cout << help;
        return 0;
      }
  try {
    if (cmd == "serve") return serve(argc, argv);
    if (cmd == "doctor") return doctor_command(argc, argv);
    if (cmd == "policy") return policy_command(argc, argv);
    if (cmd == "receipt") return receipt_command(argc, argv);
    if (cmd == "image") return image_command(argc, argv);
    if (cmd == "version" || cmd == "--version" || cmd == "-V") {
      if (argc > 2) throw UsageError("version", std::string("version: unexpected argument \"") + argv[2] + "\"");
      std::cout << "throwbox " << THROWBOX_VERSION << "\n";
      return 0;
    }
    if (cmd == "-h" || cmd == "--help" || cmd == "help") {
      if (argc > 2) {
        const char* help = help_of(argv[2]);
        if (!help) {
          std::cerr << "throwbox help: unknown command \"" << argv[2]
                    << "\"\nRun 'throwbox --help' for the commands.\n";
          return 2;
        }
        std::cout << help;
        return 0;
      }
      std::cout << kUsage;
      return 0;
    }
    std::cerr << "throwbox: unknown " << (cmd.rfind('-', 0) == 0 ? "option" : "command") << " \"" << cmd
              << "\"\nRun 'throwbox --help' for the commands.\n";
    return 2;
  } catch (const UsageError& e) {
    std::cerr << "throwbox: " << e.what() << "\nRun 'throwbox " << e.command() << " --help' for usage.\n";
    return 2;
  } catch (const std::exception& e) {
    // A start-up error (the policy, the state directory, the address): logged.
    spdlog::critical("{}", e.what());
    return 2;
  }
}
