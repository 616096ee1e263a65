// Launch specs. Everything a sandbox gets is decided here, from the policy;
// a request only chooses a runtime, code, inputs and a deadline under its ceiling.
#include "server/broker/job_spec.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "server/broker/python_loader.h"

namespace broker {
namespace {

// What every sandbox of a runtime shares (policy limits, identity, layers).
sandbox::LaunchSpec base_spec(const policy::Policy& policy, const SpecHost& host, const policy::Runtime& rt,
                              const std::string& id) {
  const policy::Limits& lim = policy.limits;
  sandbox::LaunchSpec spec;
  spec.job_id = id;
  spec.argv = rt.command;
  spec.code_path = "/work/" + rt.code_file;
  for (auto& [k, v] : policy.sandbox.env) spec.env.push_back(k + "=" + v);
  spec.readonly_paths = policy.sandbox.readonly_paths;
  if (auto root = host.runtime_roots.find(rt.name); root != host.runtime_roots.end()) spec.runtime_root = root->second;
  spec.work_max_bytes = lim.work_max_bytes;
  spec.tmp_max_bytes = lim.tmp_max_bytes;
  spec.outputs_max_bytes = lim.outputs_max_bytes;
  spec.outputs_max_files = lim.outputs_max_files;
  spec.artifact_max_bytes = policy.artifacts.file_max_bytes;
  spec.stdout_max_bytes = lim.stdout_max_bytes;
  spec.stderr_max_bytes = lim.stderr_max_bytes;
  spec.sigpending_max = host.shares.sigpending;
  spec.msgqueue_max_bytes = host.shares.msgqueue_bytes;
  spec.inotify_instances_max = host.shares.inotify_instances;
  spec.inotify_watches_max = host.shares.inotify_watches;
  spec.scratch_dir = host.state_dir + "/run/" + id;
  spec.harvest_dir = spec.scratch_dir + "/outputs";
  // move_to_sandbox changes exactly these three.
  spec.memory_max_bytes = lim.memory_max_bytes;
  spec.pids_max = lim.pids_max;
  spec.nofile_max = lim.nofile_max;
  spec.cpu_max_cores = lim.cpu_max_cores;
  spec.cgroup_host = host.cgroup_host;
  spec.require_landlock = policy.sandbox.require_landlock;
  spec.require_cgroups = policy.sandbox.require_cgroups;
  spec.seccomp_bpf_base64 = host.seccomp_bpf_base64;
  return spec;
}

}  // namespace

void move_to_sandbox(sandbox::LaunchSpec& spec, const std::string& sandbox_id) {
  const size_t slash = spec.scratch_dir.rfind('/');
  spec.scratch_dir = spec.scratch_dir.substr(0, slash + 1) + sandbox_id;
  spec.harvest_dir = spec.scratch_dir + "/outputs";
  spec.job_id = sandbox_id;
}

namespace {

// Variables as a Python dict literal (their values need no quoting).
template <size_t N>
std::string python_dict(const char* const (&vars)[N]) {
  std::string env = "{";
  for (const char* var : vars) {
    const std::string v(var);
    const size_t eq = v.find('=');
    env += "'" + v.substr(0, eq) + "': '" + v.substr(eq + 1) + "', ";
  }
  return env + "}";
}

// kPythonLoader with the runtime's preload and the proxy and CA bundle variables.
std::string python_loader(const std::string& preload) {
  std::string loader = kPythonLoader;
  loader.replace(loader.find("__THROWBOX_PROXY_ENV__"), sizeof "__THROWBOX_PROXY_ENV__" - 1,
                 python_dict(sandbox::kProxyEnv));
  loader.replace(loader.find("__THROWBOX_CA_ENV__"), sizeof "__THROWBOX_CA_ENV__" - 1,
                 python_dict(sandbox::kCaBundleEnv));
  loader.replace(loader.find("__THROWBOX_PRELOAD__"), sizeof "__THROWBOX_PRELOAD__" - 1, preload);
  return loader;
}

// The runtime's warm-up as statements after the imports ("" if none): run in
// a namespace of its own with print() going nowhere (in a fork, stdout is
// already the job's). The text is a JSON string literal, which Python reads
// as the same string.
std::string warmup_statement(const policy::Runtime& rt, const char* indent = "    ") {
  if (rt.warmup.empty()) return "";
  return "\n" + std::string(indent) + "sys.stdout = None; exec(compile(" + nlohmann::json(rt.warmup).dump() +
         ", '<warmup>', 'exec'), {}); sys.stdout = sys.__stdout__";
}

}  // namespace

std::string preload_statement(const policy::Runtime& rt) {
  // Everything alive after it is the interpreter's and the preload's: no
  // collection walks it, nor the loader's search for files a job left open.
  // Policy load checked each is a dotted identifier: nothing here needs quoting.
  std::string s;
  for (size_t i = 0; i < rt.preload.size(); ++i) s += (i ? ", " : "import ") + rt.preload[i];
  s += s.empty() ? "import gc" : "; import gc";
  return rt.warmup.empty() ? s + "; gc.freeze()" : s + warmup_statement(rt) + "\n    gc.freeze()";
}

std::string template_statement(const policy::Runtime& rt) {
  std::string s = "import gc, ctypes";
  for (const auto& m : rt.preload) s += ", " + m;
  s += warmup_statement(rt) +
       "\n    gc.freeze(); sys.stdout.flush(); sys.stderr.flush()\n"
       "    ahead = ctypes.CDLL('" +
       std::string(sandbox::kTemplateLibraryPath) +
       "').throwbox_template_serve(6, 4)\n"
       "    if ahead not in (1, 2):\n"
       "        os._exit(125)\n"
       // A fork of the template: what its imports seeded is every fork's.
       "    m = sys.modules\n"
       "    if 'random' in m:\n"
       "        m['random'].seed()\n"
       "    if 'numpy.random' in m:\n"
       "        m['numpy.random'].seed()\n"
       "    if 'tempfile' in m:\n"
       "        m['tempfile']._name_sequence = None\n"
       "    if 'multiprocessing.process' in m:\n"
       "        m['multiprocessing.process'].current_process().authkey = os.urandom(32)\n"
       "    m = None\n"
       // The pages a job's run writes are the template's until then, and
       // each first write copies one (a fault, a page copy, a charge to the
       // job's cgroup): a pandas job's body took 615 such faults and 3.2 ms,
       // 1.0 ms in a sandbox of its own. A fork made ahead while no job runs
       // (2) writes them now, while it waits: the loader's own path
       // (compile, exec, print, a collection) and the runtime's warm-up. One
       // a claim waits for, or made under a burst (1), leaves them: the
       // warm-up costs more CPU than it saves a single job (bench/fork_pages.py).
       "    if ahead == 2:\n"
       "        exec(compile('x = [1]\\nprint(end=\\'\\')\\n', sys.argv[1], 'exec'), {})\n"
       "        gc.collect(); gc.get_objects()" +
       warmup_statement(rt, "        ") + "\n    ahead = None";
  return s;
}

sandbox::LaunchSpec build_template_spec(const policy::Policy& policy, const SpecHost& host, const policy::Runtime& rt,
                                        const std::string& sandbox_id, const std::string& library) {
  sandbox::LaunchSpec spec = build_warm_spec(policy, host, rt, sandbox_id);
  spec.argv = rt.command;
  spec.argv.push_back("-c");
  spec.argv.push_back(python_loader(template_statement(rt)));
  spec.argv.push_back(spec.code_path);
  spec.template_socket = spec.scratch_dir + "/template.sock";
  // Its forks join their job's namespaces: its filter allows setns (each
  // fork's own filter, the job's, refuses it again).
  spec.seccomp_bpf_base64 = host.template_seccomp_bpf_base64;
  spec.template_library = library;
  // The processes of every sandbox forked from it count towards its user's
  // RLIMIT_NPROC (they run in user namespaces its user owns): room for all
  // of them, or its next fork fails. Its cgroup holds only the template.
  spec.pids_max = std::min<uint64_t>(policy.limits.pids_max * (sandboxes_max(policy) + 1), 4194304);
  return spec;
}

void fork_from_template(sandbox::LaunchSpec& spec, int32_t pid, uint64_t start_time, const std::string& socket) {
  spec.from_template_pid = pid;
  spec.from_template_start_time = start_time;
  spec.from_template_socket = socket;
}

void apply_cache(const policy::Policy& policy, const policy::Runtime& rt, const RuntimeCache& cache,
                 sandbox::LaunchSpec& spec) {
  auto it = policy.sandbox.env.find(rt.cache_env);
  if (rt.cache_code.empty() || cache.dir.empty() || it == policy.sandbox.env.end()) return;
  spec.cache_dir = cache.dir;
  spec.cache_link_dir = it->second;
  spec.cache_files = cache.files;
}

sandbox::LaunchSpec build_cache_spec(const policy::Policy& policy, const SpecHost& host, const policy::Runtime& rt,
                                     const std::string& sandbox_id) {
  sandbox::LaunchSpec spec = base_spec(policy, host, rt, sandbox_id);
  const std::string prefix = rt.cache_env + "=";
  for (auto& e : spec.env)
    if (e.rfind(prefix, 0) == 0) e = prefix + "/outputs";
  spec.argv.push_back(spec.code_path);
  spec.code = rt.cache_code;
  spec.timeout_ms = static_cast<uint64_t>(std::llround(policy.limits.timeout_s_max * 1000));
  return spec;
}

UserShares user_shares(const UserShares& host, uint64_t sandboxes) {
  const uint64_t parts = sandboxes + 1;
  auto share = [&](uint64_t v) { return std::max<uint64_t>(1, v / parts); };
  return {share(host.sigpending), share(host.msgqueue_bytes), share(host.inotify_instances),
          share(host.inotify_watches)};
}

uint64_t sandboxes_max(const policy::Policy& policy) {
  uint64_t warm = policy.pool.enabled ? policy.pool.size * policy.pool.runtimes.size() : 0;
  return policy.admission.jobs_running_max + warm + 1;
}

SpecHost spec_host(std::string state_dir, nlohmann::json cgroup_host, std::string seccomp_bpf_base64,
                   UserShares shares) {
  SpecHost host;
  host.state_dir = std::move(state_dir);
  host.cgroup_host = std::move(cgroup_host);
  host.seccomp_bpf_base64 = std::move(seccomp_bpf_base64);
  host.shares = shares;
  return host;
}

void set_identity(sandbox::LaunchSpec& spec, const Identity& id) {
  spec.host_uid = id.subordinate ? 1 : id.uid;
  spec.host_gid = id.subordinate ? 1 : id.gid;
  spec.own_user_ns = id.own_user_ns;
  spec.subordinate_uid = id.subordinate ? id.uid : 0;
  spec.subordinate_gid = id.subordinate ? id.gid : 0;
}

util::Result<const policy::Runtime*> check_request(const policy::Policy& policy, const JobRequest& req) {
  const policy::Limits& lim = policy.limits;
  const policy::Runtime* rt = policy.find_runtime(req.runtime);
  if (!rt) {
    std::string names;
    for (auto& n : policy.available_runtimes()) names += (names.empty() ? "" : ", ") + n;
    return util::make_error(util::ErrorCode::kInvalidArgument,
                            "runtime: \"" + req.runtime + "\" is not offered here; available: " + names);
  }
  if (req.code.size() > lim.code_max_bytes)
    return util::make_error(util::ErrorCode::kInvalidArgument,
                            "code: longer than the policy's " + std::to_string(lim.code_max_bytes) + " bytes");
  double timeout_s = req.timeout_s.value_or(lim.timeout_s_default);
  if (!std::isfinite(timeout_s) || timeout_s <= 0 || timeout_s > lim.timeout_s_max)
    return util::make_error(util::ErrorCode::kInvalidArgument, "timeout_s: must be > 0 and at most " +
                                                                   std::to_string(static_cast<int>(lim.timeout_s_max)) +
                                                                   " seconds (the policy's ceiling)");
  if (!req.network.empty() && !policy.network.profiles.count(req.network)) {
    std::string names;
    for (auto& [n, _] : policy.network.profiles) names += (names.empty() ? "" : ", ") + n;
    return util::make_error(
        util::ErrorCode::kInvalidArgument,
        names.empty() ? "network: this server's policy has no network profiles; jobs have no network"
                      : "network: \"" + req.network + "\" is not a profile of this server; profiles: " + names);
  }
  if (req.input_ids.size() + req.artifact_ids.size() > lim.inputs_per_job_max)
    return util::make_error(util::ErrorCode::kInvalidArgument, "input_ids: more than " +
                                                                   std::to_string(lim.inputs_per_job_max) +
                                                                   " inputs (input_ids and artifact_ids together)");
  return rt;
}

util::Result<sandbox::LaunchSpec> build_job_spec(const policy::Policy& policy, const SpecHost& host,
                                                 const JobRequest& req,
                                                 const std::vector<util::Result<store::InputRecord>>& inputs,
                                                 const std::string& job_id) {
  auto rt = check_request(policy, req);
  if (!rt) return rt.error();
  if (inputs.size() != req.input_ids.size())
    return util::make_error(util::ErrorCode::kInternal, "input_ids: " + std::to_string(req.input_ids.size()) +
                                                            " ids but " + std::to_string(inputs.size()) + " lookups");
  sandbox::LaunchSpec spec = base_spec(policy, host, **rt, job_id);
  std::set<std::string> names;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& in = inputs[i];
    if (!in) return util::make_error(in.error().code, "input_ids: \"" + req.input_ids[i] + "\": " + in.error().message);
    if (!names.insert(in->name).second)
      return util::make_error(util::ErrorCode::kInvalidArgument, "input_ids: two inputs are both named \"" + in->name +
                                                                     "\"; /inputs/<name> must be unique per run");
    spec.inputs.push_back({in->name, in->blob_path});
  }
  spec.argv.push_back(spec.code_path);
  spec.code = req.code;
  spec.network = !req.network.empty();
  if (spec.network) {
    auto profile = policy.network.profiles.find(req.network);
    spec.ca_env = profile != policy.network.profiles.end() && profile->second.intercepts();
    if (spec.ca_env) spec.ca_bundle_path = host.ca_bundle_path;
  }
  // At least 1 ms: a timeout_s under half a millisecond rounded to 0, which the runner refuses.
  spec.timeout_ms = std::max<uint64_t>(
      1, static_cast<uint64_t>(std::llround(req.timeout_s.value_or(policy.limits.timeout_s_default) * 1000)));
  return spec;
}

sandbox::LaunchSpec build_check_spec(const policy::Policy& policy, const SpecHost& host, const policy::Runtime& rt,
                                     const policy::Check& check, const std::string& code,
                                     std::vector<sandbox::InputBind> view, const std::string& sandbox_id) {
  sandbox::LaunchSpec spec = base_spec(policy, host, rt, sandbox_id);
  if (check.command.empty()) {
    spec.argv.push_back(spec.code_path);
    spec.code = code;
  } else {
    spec.argv = check.command;
  }
  spec.inputs = std::move(view);
  spec.stdout_max_bytes = check.max_output_bytes;
  spec.timeout_ms = std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(check.timeout_s * 1000)));
  return spec;
}

sandbox::LaunchSpec build_warm_spec(const policy::Policy& policy, const SpecHost& host, const policy::Runtime& rt,
                                    const std::string& sandbox_id) {
  sandbox::LaunchSpec spec = base_spec(policy, host, rt, sandbox_id);
  const policy::Limits& lim = policy.limits;
  if (rt.loader == "python") {
    spec.warm = sandbox::Warm::preload;
    spec.argv.push_back("-c");
    spec.argv.push_back(python_loader(preload_statement(rt)));
  } else {
    spec.warm = sandbox::Warm::exec;
  }
  spec.argv.push_back(spec.code_path);
  // A claim may bring a network profile.
  spec.ca_bundle_path = host.ca_bundle_path;
  // The job's own deadline comes with its claim; RLIMIT_CPU, the backstop,
  // is set for the longest a job may ask for.
  spec.timeout_ms = static_cast<uint64_t>(std::llround(lim.timeout_s_max * 1000));
  spec.inputs_max_files = lim.inputs_per_job_max;
  // An input is an upload or an artifact (artifact_ids): room for the larger.
  spec.inputs_max_bytes =
      lim.inputs_per_job_max * (std::max(lim.input_max_bytes, policy.artifacts.file_max_bytes) + 4096);
  // A workspace job claiming it gets /work of the workspace's size.
  spec.workspace_max_bytes = policy.workspaces.size_max_bytes;
  return spec;
}

}  // namespace broker
