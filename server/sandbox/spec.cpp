// (De)serialisation of LaunchSpec and Outcome. Both ends are ours, but the
// runner still validates: a malformed spec is a sandbox_error, never a guess.
#include "server/sandbox/spec.h"

namespace sandbox {

using nlohmann::json;

namespace {
constexpr const char* kStatusNames[] = {"completed", "failed", "timed_out", "memory_exceeded", "cancelled",
                                        "sandbox_error"};
constexpr const char* kWarmNames[] = {"", "exec", "preload"};

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

json to_json(const LaunchSpec& s) {
  json inputs = json::array();
  for (auto& in : s.inputs) inputs.push_back({{"name", in.name}, {"host_path", in.host_path}});
  return {{"job_id", s.job_id}, {"argv", s.argv}, {"env", s.env}, {"code", s.code},
          {"code_path", s.code_path}, {"inputs", inputs}, {"readonly_paths", s.readonly_paths},
          {"work_max_bytes", s.work_max_bytes}, {"tmp_max_bytes", s.tmp_max_bytes},
          {"outputs_max_bytes", s.outputs_max_bytes}, {"outputs_max_files", s.outputs_max_files},
          {"artifact_max_bytes", s.artifact_max_bytes},
          {"stdout_max_bytes", s.stdout_max_bytes}, {"stderr_max_bytes", s.stderr_max_bytes},
          {"timeout_ms", s.timeout_ms}, {"host_uid", s.host_uid}, {"host_gid", s.host_gid},
          {"own_user_ns", s.own_user_ns}, {"sigpending_max", s.sigpending_max},
          {"msgqueue_max_bytes", s.msgqueue_max_bytes}, {"inotify_instances_max", s.inotify_instances_max},
          {"inotify_watches_max", s.inotify_watches_max},
          {"scratch_dir", s.scratch_dir}, {"harvest_dir", s.harvest_dir},
          {"memory_max_bytes", s.memory_max_bytes}, {"pids_max", s.pids_max},
          {"nofile_max", s.nofile_max}, {"cpu_max_cores", s.cpu_max_cores},
          {"cgroup_host", s.cgroup_host}, {"require_landlock", s.require_landlock},
          {"require_cgroups", s.require_cgroups}, {"seccomp_bpf_base64", s.seccomp_bpf_base64},
          {"progress", s.progress}, {"warm", to_string(s.warm)}, {"inputs_max_bytes", s.inputs_max_bytes},
          {"inputs_max_files", s.inputs_max_files}};
}

json to_json(const Claim& c) {
  json inputs = json::array();
  for (auto& in : c.inputs) inputs.push_back({{"name", in.name}, {"host_path", in.host_path}});
  return {{"job_id", c.job_id}, {"code", c.code}, {"inputs", inputs}, {"timeout_ms", c.timeout_ms},
          {"progress", c.progress}};
}

util::Result<Claim> claim_from_json(const json& j) {
  try {
    Claim c;
    j.at("job_id").get_to(c.job_id);
    j.at("code").get_to(c.code);
    for (auto& in : j.at("inputs"))
      c.inputs.push_back({in.at("name").get<std::string>(), in.at("host_path").get<std::string>()});
    j.at("timeout_ms").get_to(c.timeout_ms);
    c.progress = j.value("progress", false);
    if (c.timeout_ms == 0) return util::make_error(util::ErrorCode::kSpec, "claim: timeout_ms must be positive");
    return c;
  } catch (const json::exception& e) {
    return util::make_error(util::ErrorCode::kSpec, std::string("malformed claim: ") + e.what());
  }
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
    j.at("work_max_bytes").get_to(s.work_max_bytes);
    j.at("tmp_max_bytes").get_to(s.tmp_max_bytes);
    j.at("outputs_max_bytes").get_to(s.outputs_max_bytes);
    j.at("outputs_max_files").get_to(s.outputs_max_files);
    s.artifact_max_bytes = j.value("artifact_max_bytes", s.outputs_max_bytes);
    j.at("stdout_max_bytes").get_to(s.stdout_max_bytes);
    j.at("stderr_max_bytes").get_to(s.stderr_max_bytes);
    j.at("timeout_ms").get_to(s.timeout_ms);
    j.at("host_uid").get_to(s.host_uid);
    j.at("host_gid").get_to(s.host_gid);
    s.own_user_ns = j.value("own_user_ns", false);
    s.sigpending_max = j.value("sigpending_max", uint64_t{0});
    s.msgqueue_max_bytes = j.value("msgqueue_max_bytes", uint64_t{0});
    s.inotify_instances_max = j.value("inotify_instances_max", uint64_t{0});
    s.inotify_watches_max = j.value("inotify_watches_max", uint64_t{0});
    j.at("scratch_dir").get_to(s.scratch_dir);
    j.at("harvest_dir").get_to(s.harvest_dir);
    j.at("memory_max_bytes").get_to(s.memory_max_bytes);
    j.at("pids_max").get_to(s.pids_max);
    j.at("nofile_max").get_to(s.nofile_max);
    j.at("cpu_max_cores").get_to(s.cpu_max_cores);
    s.cgroup_host = j.at("cgroup_host");
    j.at("require_landlock").get_to(s.require_landlock);
    j.at("require_cgroups").get_to(s.require_cgroups);
    s.seccomp_bpf_base64 = j.value("seccomp_bpf_base64", "");
    s.progress = j.value("progress", false);
    auto warm = warm_from_string(j.value("warm", ""));
    if (!warm) return util::make_error(util::ErrorCode::kSpec, "warm must be \"\", \"exec\" or \"preload\"");
    s.warm = *warm;
    s.inputs_max_bytes = j.value("inputs_max_bytes", uint64_t{0});
    s.inputs_max_files = j.value("inputs_max_files", uint64_t{0});
    if (s.warm != Warm::cold && (!s.code.empty() || !s.inputs.empty()))
      return util::make_error(util::ErrorCode::kSpec, "a warm spec carries no code and no inputs (they come with the claim)");
    if (s.argv.empty() || s.argv[0].empty() || s.argv[0][0] != '/')
      return util::make_error(util::ErrorCode::kSpec, "argv[0] must be an absolute path");
    if (s.scratch_dir.empty() || s.scratch_dir[0] != '/' || s.harvest_dir.empty())
      return util::make_error(util::ErrorCode::kSpec, "scratch_dir and harvest_dir must be absolute");
    return s;
  } catch (const json::exception& e) {
    return util::make_error(util::ErrorCode::kSpec, std::string("malformed launch spec: ") + e.what());
  }
}

json to_json(const Outcome& o) {
  json files = json::array();
  for (auto& f : o.files)
    files.push_back({{"name", f.name}, {"size", f.size}, {"host_path", f.host_path},
                     {"rejected", f.rejected}});
  return {{"status", to_string(o.status)}, {"error", o.error}, {"exited", o.exited},
          {"exit_code", o.exit_code}, {"signal", o.signal}, {"timed_out", o.timed_out},
          {"stdout", o.stdout_text}, {"stderr", o.stderr_text},
          {"stdout_truncated", o.stdout_truncated}, {"stderr_truncated", o.stderr_truncated},
          {"duration_ms", o.duration_ms}, {"cpu_ms", o.cpu_ms},
          {"peak_memory_bytes", o.peak_memory_bytes}, {"files", files}, {"layers", o.layers},
          {"start", o.start}};
}

util::Result<Outcome> outcome_from_json(const json& j) {
  try {
    Outcome o;
    auto status = status_from_string(j.at("status").get<std::string>());
    if (!status) return util::make_error(util::ErrorCode::kOutcome, "malformed runner outcome: unknown status");
    o.status = *status;
    j.at("error").get_to(o.error);
    j.at("exited").get_to(o.exited);
    j.at("exit_code").get_to(o.exit_code);
    j.at("signal").get_to(o.signal);
    j.at("timed_out").get_to(o.timed_out);
    j.at("stdout").get_to(o.stdout_text);
    j.at("stderr").get_to(o.stderr_text);
    j.at("stdout_truncated").get_to(o.stdout_truncated);
    j.at("stderr_truncated").get_to(o.stderr_truncated);
    j.at("duration_ms").get_to(o.duration_ms);
    j.at("cpu_ms").get_to(o.cpu_ms);
    j.at("peak_memory_bytes").get_to(o.peak_memory_bytes);
    j.at("layers").get_to(o.layers);
    o.start = j.value("start", "cold");
    for (auto& f : j.at("files"))
      o.files.push_back({f.at("name").get<std::string>(), f.at("size").get<uint64_t>(),
                         f.at("host_path").get<std::string>(), f.at("rejected").get<std::string>()});
    return o;
  } catch (const json::exception& e) {
    return util::make_error(util::ErrorCode::kOutcome, std::string("malformed runner outcome: ") + e.what());
  }
}

}  // namespace sandbox
