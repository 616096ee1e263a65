// (De)serialisation of LaunchSpec and Outcome. Both ends are ours, but the
// runner still validates: a malformed spec is a sandbox_error, never a guess.
#include "server/sandbox/spec.h"

#include "server/util/text.h"

namespace sandbox {

using nlohmann::json;

namespace {
constexpr const char* kStatusNames[] = {"completed",       "failed",    "timed_out",
                                        "memory_exceeded", "cancelled", "sandbox_error"};
constexpr const char* kWarmNames[] = {"", "exec", "preload"};

// Ranges of the numeric fields. Counts and byte sizes end up as off_t,
// rlim_t and cgroup values; a day is far beyond the policy's longest job.
constexpr uint64_t kCountMax = INT64_MAX;
constexpr uint64_t kTimeoutMsMax = 24ULL * 3600 * 1000;
constexpr uint64_t kIdMax = UINT32_MAX - 1;  // (uid_t)-1 means "no change" to setresuid
constexpr uint64_t kPidMax = 4194304;        // PID_MAX_LIMIT
constexpr double kCoresMax = 65536;

// A numeric field out of its range; caught where the reader returns.
struct FieldError {
  std::string message;
};

// An integer field in lo..hi. nlohmann's get<uint64_t>() wraps a negative
// number, truncates a float and is undefined behaviour on one beyond the type
// (a 30-digit integer is parsed as a double), so the JSON type is checked
// first. A value built in memory may be a signed integer; parsed text never is
// unless negative.
uint64_t integer_field(const json& j, const char* key, uint64_t lo, uint64_t hi, const char* what) {
  const json& v = j.at(key);
  std::optional<uint64_t> n;
  if (v.is_number_unsigned())
    n = v.get<uint64_t>();
  else if (v.is_number_integer() && v.get<int64_t>() >= 0)
    n = static_cast<uint64_t>(v.get<int64_t>());
  if (!n || *n < lo || *n > hi)
    throw FieldError{std::string(what) + " field " + key + ": not an integer in " + std::to_string(lo) + ".." +
                     std::to_string(hi)};
  return *n;
}

uint64_t optional_integer_field(const json& j, const char* key, uint64_t fallback, uint64_t hi, const char* what) {
  return j.contains(key) ? integer_field(j, key, 0, hi, what) : fallback;
}

// A workspace's host paths, as a spec or a claim carries them: both "" or
// both absolute (the runner opens them as they are; a NUL would cut the path
// its syscalls see short of the one the broker meant).
std::optional<std::string> workspace_paths_problem(const std::string& in, const std::string& out) {
  if (in.empty() && out.empty()) return std::nullopt;
  for (const std::string* p : {&in, &out})
    if (p->empty() || (*p)[0] != '/' || p->find('\0') != std::string::npos)
      return std::string("workspace_in and workspace_out are both absolute paths, or both \"\"");
  return std::nullopt;
}

// A cache's paths: a host directory, one /tmp/<name> and plain file names
// (each becomes a symlink made by the sandbox user in its own /tmp).
std::optional<std::string> cache_problem(const LaunchSpec& s) {
  if (s.cache_dir.empty() && s.cache_link_dir.empty() && s.cache_files.empty()) return std::nullopt;
  if (s.cache_dir.empty() || s.cache_dir[0] != '/' || s.cache_dir.find('\0') != std::string::npos)
    return std::string("cache_dir must be an absolute host path");
  const std::string leaf = s.cache_link_dir.rfind("/tmp/", 0) == 0 ? s.cache_link_dir.substr(5) : "";
  if (util::file_name_problem(leaf)) return std::string("cache_link_dir must be /tmp/<plain name>");
  if (s.cache_files.size() > kCacheFilesMax)
    return "cache_files: more than " + std::to_string(kCacheFilesMax) + " files";
  for (auto& f : s.cache_files)
    if (util::file_name_problem(f)) return "cache_files: \"" + util::to_valid_utf8(f) + "\" is not a plain file name";
  return std::nullopt;
}

template <class E, size_t N>
std::optional<E> from_names(const char* const (&names)[N], std::string_view text) {
  for (size_t i = 0; i < N; ++i)
    if (text == names[i]) return static_cast<E>(i);
  return std::nullopt;
}
}  // namespace

const char* to_string(Status status) { return kStatusNames[static_cast<size_t>(status)]; }
std::optional<Status> status_from_string(std::string_view text) { return from_names<Status>(kStatusNames, text); }
const char* to_string(Warm warm) { return kWarmNames[static_cast<size_t>(warm)]; }
std::optional<Warm> warm_from_string(std::string_view text) { return from_names<Warm>(kWarmNames, text); }

// A template or a sandbox forked from one: what the fields must be together.
static std::optional<std::string> template_problem(const LaunchSpec& s) {
  const bool is_template = !s.template_socket.empty();
  const bool forked = !s.from_template_socket.empty() || s.from_template_pid != 0;
  if (!is_template && (s.template_ids_first != 0 || s.template_ids_count != 0 || !s.template_library.empty()))
    return "template_ids_first, template_ids_count and template_library belong to a template (template_socket)";
  if (!forked && s.from_template_ahead) return "from_template_ahead belongs to a sandbox forked from a template";
  if (!is_template && !forked) return std::nullopt;
  if (is_template && forked) return "a template is not itself forked from one";
  if (s.warm != Warm::preload) return "a template, and a sandbox forked from one, is warm \"preload\"";
  if (s.subordinate_uid != 0) return "templates do not run with subordinate ids";
  const std::string& socket = is_template ? s.template_socket : s.from_template_socket;
  if (socket[0] != '/' || socket.size() >= 108) return "a template's socket is an absolute path under 108 bytes";
  if (is_template) {
    if (!s.template_library.empty() && s.template_library[0] != '/')
      return "a template's template_library is an absolute path";
    const uint64_t end = uint64_t{s.template_ids_first} + s.template_ids_count;
    if ((s.template_ids_count != 0) != s.own_user_ns)
      return "a template maps template_ids exactly when it has its own user namespace's owner (own_user_ns)";
    if (s.template_ids_count != 0 && (s.template_ids_first <= kSandboxUid || end > kIdMax))
      return "template_ids lie above the sandbox user's id and within the id space";
    return std::nullopt;
  }
  if (s.from_template_pid <= 0 || s.from_template_start_time == 0 || s.from_template_socket.empty())
    return "a sandbox forked from a template names its pid 1, its start time and its socket";
  return std::nullopt;
}

json to_json(const LaunchSpec& s) {
  json inputs = json::array();
  for (auto& in : s.inputs) inputs.push_back({{"name", in.name}, {"host_path", in.host_path}});
  return {{"job_id", s.job_id},
          {"argv", s.argv},
          {"env", s.env},
          {"code", s.code},
          {"code_path", s.code_path},
          {"inputs", inputs},
          {"readonly_paths", s.readonly_paths},
          {"runtime_root", s.runtime_root},
          {"ca_bundle_path", s.ca_bundle_path},
          {"work_max_bytes", s.work_max_bytes},
          {"tmp_max_bytes", s.tmp_max_bytes},
          {"outputs_max_bytes", s.outputs_max_bytes},
          {"outputs_max_files", s.outputs_max_files},
          {"artifact_max_bytes", s.artifact_max_bytes},
          {"stdout_max_bytes", s.stdout_max_bytes},
          {"stderr_max_bytes", s.stderr_max_bytes},
          {"timeout_ms", s.timeout_ms},
          {"host_uid", s.host_uid},
          {"host_gid", s.host_gid},
          {"own_user_ns", s.own_user_ns},
          {"subordinate_uid", s.subordinate_uid},
          {"subordinate_gid", s.subordinate_gid},
          {"sigpending_max", s.sigpending_max},
          {"msgqueue_max_bytes", s.msgqueue_max_bytes},
          {"inotify_instances_max", s.inotify_instances_max},
          {"inotify_watches_max", s.inotify_watches_max},
          {"scratch_dir", s.scratch_dir},
          {"harvest_dir", s.harvest_dir},
          {"memory_max_bytes", s.memory_max_bytes},
          {"pids_max", s.pids_max},
          {"nofile_max", s.nofile_max},
          {"cpu_max_cores", s.cpu_max_cores},
          {"cgroup_host", s.cgroup_host},
          {"require_landlock", s.require_landlock},
          {"require_cgroups", s.require_cgroups},
          {"seccomp_bpf_base64", s.seccomp_bpf_base64},
          {"progress", s.progress},
          {"warm", to_string(s.warm)},
          {"inputs_max_bytes", s.inputs_max_bytes},
          {"inputs_max_files", s.inputs_max_files},
          {"network", s.network},
          {"ca_env", s.ca_env},
          {"workspace_in", s.workspace_in},
          {"workspace_out", s.workspace_out},
          {"workspace_max_bytes", s.workspace_max_bytes},
          {"cache_dir", s.cache_dir},
          {"cache_link_dir", s.cache_link_dir},
          {"cache_files", s.cache_files},
          {"template_socket", s.template_socket},
          {"template_library", s.template_library},
          {"template_ids_first", s.template_ids_first},
          {"template_ids_count", s.template_ids_count},
          {"from_template_pid", s.from_template_pid},
          {"from_template_start_time", s.from_template_start_time},
          {"from_template_ahead", s.from_template_ahead},
          {"from_template_socket", s.from_template_socket}};
}

json to_json(const Claim& c) {
  json inputs = json::array();
  for (auto& in : c.inputs) inputs.push_back({{"name", in.name}, {"host_path", in.host_path}});
  return {{"job_id", c.job_id},
          {"code", c.code},
          {"inputs", inputs},
          {"timeout_ms", c.timeout_ms},
          {"progress", c.progress},
          {"network", c.network},
          {"ca_env", c.ca_env},
          {"workspace_in", c.workspace_in},
          {"workspace_out", c.workspace_out}};
}

util::Result<Claim> claim_from_json(const json& j) {
  try {
    Claim c;
    j.at("job_id").get_to(c.job_id);
    j.at("code").get_to(c.code);
    for (auto& in : j.at("inputs"))
      c.inputs.push_back({in.at("name").get<std::string>(), in.at("host_path").get<std::string>()});
    c.timeout_ms = integer_field(j, "timeout_ms", 1, kTimeoutMsMax, "claim");
    c.progress = j.value("progress", false);
    c.network = j.value("network", false);
    c.ca_env = c.network && j.value("ca_env", false);
    c.workspace_in = j.value("workspace_in", "");
    c.workspace_out = j.value("workspace_out", "");
    if (auto why = workspace_paths_problem(c.workspace_in, c.workspace_out))
      return util::make_error(util::ErrorCode::kSpec, "claim: " + *why);
    return c;
  } catch (const FieldError& e) {
    return util::make_error(util::ErrorCode::kSpec, e.message);
  } catch (const json::exception& e) {
    return util::make_error(util::ErrorCode::kSpec, std::string("malformed claim: ") + e.what());
  }
}

util::Status check_claim(const LaunchSpec& warm, const Claim& claim) {
  if (!claim.workspace_in.empty() && warm.workspace_max_bytes == 0)
    return util::make_error(util::ErrorCode::kSpec,
                            "a claim with a workspace, but this warm sandbox takes none (workspace_max_bytes 0)");
  return util::ok_status();
}

util::Result<LaunchSpec> spec_from_json(const json& j) {
  try {
    LaunchSpec s;
    j.at("job_id").get_to(s.job_id);
    j.at("argv").get_to(s.argv);
    j.at("env").get_to(s.env);
    j.at("code").get_to(s.code);
    j.at("code_path").get_to(s.code_path);
    for (auto& in : j.at("inputs"))
      s.inputs.push_back({in.at("name").get<std::string>(), in.at("host_path").get<std::string>()});
    j.at("readonly_paths").get_to(s.readonly_paths);
    s.runtime_root = j.value("runtime_root", "");
    s.ca_bundle_path = j.value("ca_bundle_path", "");
    constexpr const char* kWhat = "launch spec";
    s.work_max_bytes = integer_field(j, "work_max_bytes", 0, kCountMax, kWhat);
    s.tmp_max_bytes = integer_field(j, "tmp_max_bytes", 0, kCountMax, kWhat);
    s.outputs_max_bytes = integer_field(j, "outputs_max_bytes", 0, kCountMax, kWhat);
    s.outputs_max_files = integer_field(j, "outputs_max_files", 0, kCountMax, kWhat);
    s.artifact_max_bytes = optional_integer_field(j, "artifact_max_bytes", s.outputs_max_bytes, kCountMax, kWhat);
    s.stdout_max_bytes = integer_field(j, "stdout_max_bytes", 0, kCountMax, kWhat);
    s.stderr_max_bytes = integer_field(j, "stderr_max_bytes", 0, kCountMax, kWhat);
    s.timeout_ms = integer_field(j, "timeout_ms", 1, kTimeoutMsMax, kWhat);
    s.host_uid = static_cast<uint32_t>(integer_field(j, "host_uid", 0, kIdMax, kWhat));
    s.host_gid = static_cast<uint32_t>(integer_field(j, "host_gid", 0, kIdMax, kWhat));
    s.own_user_ns = j.value("own_user_ns", false);
    s.subordinate_uid = static_cast<uint32_t>(optional_integer_field(j, "subordinate_uid", 0, kIdMax, kWhat));
    s.subordinate_gid = static_cast<uint32_t>(optional_integer_field(j, "subordinate_gid", 0, kIdMax, kWhat));
    if ((s.subordinate_uid == 0) != (s.subordinate_gid == 0) || (s.subordinate_uid != 0 && !s.own_user_ns))
      return util::make_error(util::ErrorCode::kSpec,
                              "launch spec: subordinate_uid and subordinate_gid come together, with own_user_ns");
    s.sigpending_max = optional_integer_field(j, "sigpending_max", 0, kCountMax, kWhat);
    s.msgqueue_max_bytes = optional_integer_field(j, "msgqueue_max_bytes", 0, kCountMax, kWhat);
    s.inotify_instances_max = optional_integer_field(j, "inotify_instances_max", 0, kCountMax, kWhat);
    s.inotify_watches_max = optional_integer_field(j, "inotify_watches_max", 0, kCountMax, kWhat);
    j.at("scratch_dir").get_to(s.scratch_dir);
    j.at("harvest_dir").get_to(s.harvest_dir);
    s.memory_max_bytes = integer_field(j, "memory_max_bytes", 0, kCountMax, kWhat);
    s.pids_max = integer_field(j, "pids_max", 0, kCountMax, kWhat);
    s.nofile_max = integer_field(j, "nofile_max", 0, kCountMax, kWhat);
    const json& cores = j.at("cpu_max_cores");
    if (!cores.is_number() || !(cores.get<double>() >= 0 && cores.get<double>() <= kCoresMax))
      return util::make_error(util::ErrorCode::kSpec, "launch spec field cpu_max_cores: not a number in 0..65536");
    s.cpu_max_cores = cores.get<double>();
    s.cgroup_host = j.at("cgroup_host");
    j.at("require_landlock").get_to(s.require_landlock);
    j.at("require_cgroups").get_to(s.require_cgroups);
    s.seccomp_bpf_base64 = j.value("seccomp_bpf_base64", "");
    s.progress = j.value("progress", false);
    s.network = j.value("network", false);
    s.ca_env = s.network && j.value("ca_env", false);
    auto warm = warm_from_string(j.value("warm", ""));
    if (!warm) return util::make_error(util::ErrorCode::kSpec, "warm must be \"\", \"exec\" or \"preload\"");
    s.warm = *warm;
    s.inputs_max_bytes = optional_integer_field(j, "inputs_max_bytes", 0, kCountMax, kWhat);
    s.inputs_max_files = optional_integer_field(j, "inputs_max_files", 0, kCountMax, kWhat);
    if (s.warm != Warm::cold && (!s.code.empty() || !s.inputs.empty()))
      return util::make_error(util::ErrorCode::kSpec,
                              "a warm spec carries no code and no inputs (they come with the claim)");
    if (s.warm != Warm::cold && s.network)
      return util::make_error(util::ErrorCode::kSpec, "a warm spec has no network (a job's claim brings it)");
    s.workspace_in = j.value("workspace_in", "");
    s.workspace_out = j.value("workspace_out", "");
    s.workspace_max_bytes = optional_integer_field(j, "workspace_max_bytes", 0, kCountMax, kWhat);
    if (auto why = workspace_paths_problem(s.workspace_in, s.workspace_out))
      return util::make_error(util::ErrorCode::kSpec, "launch spec: " + *why);
    if (s.warm != Warm::cold && !s.workspace_in.empty())
      return util::make_error(util::ErrorCode::kSpec, "a warm spec has no workspace (a job's claim brings it)");
    if (s.warm == Warm::cold && (s.workspace_max_bytes != 0) != !s.workspace_in.empty())
      return util::make_error(
          util::ErrorCode::kSpec,
          "a cold spec has workspace_max_bytes (the workspace's size) exactly when it has a workspace");
    if (s.warm == Warm::cold && s.work_max_bytes < s.workspace_max_bytes)
      return util::make_error(util::ErrorCode::kSpec,
                              "a cold workspace job's work_max_bytes is below its workspace_max_bytes");
    s.cache_dir = j.value("cache_dir", "");
    s.cache_link_dir = j.value("cache_link_dir", "");
    if (j.contains("cache_files")) j.at("cache_files").get_to(s.cache_files);
    if (auto why = cache_problem(s)) return util::make_error(util::ErrorCode::kSpec, "launch spec: " + *why);
    s.template_socket = j.value("template_socket", "");
    s.template_library = j.value("template_library", "");
    s.template_ids_first = static_cast<uint32_t>(optional_integer_field(j, "template_ids_first", 0, kIdMax, kWhat));
    s.template_ids_count = static_cast<uint32_t>(optional_integer_field(j, "template_ids_count", 0, kIdMax, kWhat));
    s.from_template_pid = static_cast<int32_t>(optional_integer_field(j, "from_template_pid", 0, kPidMax, kWhat));
    s.from_template_start_time = optional_integer_field(j, "from_template_start_time", 0, kCountMax, kWhat);
    s.from_template_ahead = j.value("from_template_ahead", false);
    s.from_template_socket = j.value("from_template_socket", "");
    if (auto why = template_problem(s)) return util::make_error(util::ErrorCode::kSpec, "launch spec: " + *why);
    if (s.argv.empty() || s.argv[0].empty() || s.argv[0][0] != '/')
      return util::make_error(util::ErrorCode::kSpec, "argv[0] must be an absolute path");
    if (s.scratch_dir.empty() || s.scratch_dir[0] != '/' || s.harvest_dir.empty())
      return util::make_error(util::ErrorCode::kSpec, "scratch_dir and harvest_dir must be absolute");
    return s;
  } catch (const FieldError& e) {
    return util::make_error(util::ErrorCode::kSpec, e.message);
  } catch (const json::exception& e) {
    return util::make_error(util::ErrorCode::kSpec, std::string("malformed launch spec: ") + e.what());
  }
}

json to_json(const Outcome& o) {
  json files = json::array();
  for (auto& f : o.files)
    files.push_back({{"name", f.name}, {"size", f.size}, {"host_path", f.host_path}, {"rejected", f.rejected}});
  return {{"status", to_string(o.status)},
          {"error", o.error},
          {"exited", o.exited},
          {"exit_code", o.exit_code},
          {"signal", o.signal},
          {"timed_out", o.timed_out},
          {"stdout", o.stdout_text},
          {"stderr", o.stderr_text},
          {"stdout_truncated", o.stdout_truncated},
          {"stderr_truncated", o.stderr_truncated},
          {"stdout_cut_bytes", o.stdout_cut_bytes},
          {"stderr_cut_bytes", o.stderr_cut_bytes},
          {"duration_ms", o.duration_ms},
          {"cpu_ms", o.cpu_ms},
          {"peak_memory_bytes", o.peak_memory_bytes},
          {"files", files},
          {"layers", o.layers},
          {"start", o.start},
          {"workspace_saved", o.workspace_saved},
          {"workspace_bytes", o.workspace_bytes},
          {"workspace_entries", o.workspace_entries},
          {"workspace_skipped", o.workspace_skipped},
          {"workspace_skipped_names", o.workspace_skipped_names},
          {"workspace_full", o.workspace_full},
          {"workspace_error", o.workspace_error}};
}

util::Result<Outcome> outcome_from_json(const json& j) {
  try {
    Outcome o;
    auto status = status_from_string(j.at("status").get<std::string>());
    if (!status) return util::make_error(util::ErrorCode::kOutcome, "malformed runner outcome: unknown status");
    o.status = *status;
    j.at("error").get_to(o.error);
    j.at("exited").get_to(o.exited);
    constexpr const char* kWhat = "runner outcome";
    o.exit_code = static_cast<int>(integer_field(j, "exit_code", 0, 255, kWhat));  // WEXITSTATUS
    o.signal = static_cast<int>(integer_field(j, "signal", 0, 64, kWhat));         // up to SIGRTMAX
    j.at("timed_out").get_to(o.timed_out);
    j.at("stdout").get_to(o.stdout_text);
    j.at("stderr").get_to(o.stderr_text);
    j.at("stdout_truncated").get_to(o.stdout_truncated);
    j.at("stderr_truncated").get_to(o.stderr_truncated);
    o.stdout_cut_bytes = integer_field(j, "stdout_cut_bytes", 0, kCountMax, kWhat);
    o.stderr_cut_bytes = integer_field(j, "stderr_cut_bytes", 0, kCountMax, kWhat);
    o.duration_ms = integer_field(j, "duration_ms", 0, kCountMax, kWhat);
    o.cpu_ms = integer_field(j, "cpu_ms", 0, kCountMax, kWhat);
    o.peak_memory_bytes = integer_field(j, "peak_memory_bytes", 0, kCountMax, kWhat);
    j.at("layers").get_to(o.layers);
    o.start = j.value("start", "cold");
    // A job without a workspace (and an older runner's outcome) leaves them out or at their zero.
    o.workspace_saved = j.value("workspace_saved", false);
    o.workspace_bytes = optional_integer_field(j, "workspace_bytes", 0, kCountMax, kWhat);
    o.workspace_entries = optional_integer_field(j, "workspace_entries", 0, kCountMax, kWhat);
    o.workspace_skipped = optional_integer_field(j, "workspace_skipped", 0, kCountMax, kWhat);
    if (j.contains("workspace_skipped_names")) j.at("workspace_skipped_names").get_to(o.workspace_skipped_names);
    o.workspace_full = j.value("workspace_full", false);
    o.workspace_error = j.value("workspace_error", "");
    for (auto& f : j.at("files"))
      o.files.push_back({f.at("name").get<std::string>(), integer_field(f, "size", 0, kCountMax, "runner outcome file"),
                         f.at("host_path").get<std::string>(), f.at("rejected").get<std::string>()});
    return o;
  } catch (const FieldError& e) {
    return util::make_error(util::ErrorCode::kOutcome, e.message);
  } catch (const json::exception& e) {
    return util::make_error(util::ErrorCode::kOutcome, std::string("malformed runner outcome: ") + e.what());
  }
}

}  // namespace sandbox
