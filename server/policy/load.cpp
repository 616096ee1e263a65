// Policy loading and validation. Runs once in main() before any thread starts.
// Fails closed: an unknown key, a wrong type or a value beyond a ceiling is an error.
#include "server/policy/policy.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string_view>

#include "server/artifacts/names.h"
#include "server/network/address.h"
#include "server/sandbox/spec.h"
#include "server/util/fs.h"

namespace policy {
namespace {

using nlohmann::json;
using util::make_error;

// Hard ceilings no policy file may exceed: a typo must not become a 1 TB tmpfs.
constexpr double kTimeoutCeilingS = 3600;
constexpr uint64_t kBytesCeiling = 4ULL * 1024 * 1024 * 1024;
constexpr uint64_t kMessageCeilingBytes = 64 * 1024 * 1024;
// The largest input whose base64 upload, with the envelope, fits a message of
// kMessageCeilingBytes (the body cap of POST /inputs is the same cap).
constexpr uint64_t kInputCeilingBytes = (kMessageCeilingBytes - kMessageEnvelopeBytes) / 4 * 3;
static_assert(kCodeEscapeFactor * (16 << 20) + kMessageEnvelopeBytes <= kMessageCeilingBytes,
              "the largest limits.code_max_bytes must fit the largest message");
constexpr uint64_t kImagePixelsCeiling = uint64_t{1} << 34;  // 17 gigapixels: above any real image

// Why x cannot be an entry of artifacts.allowed_extensions; nullopt when it can.
std::optional<std::string> extension_problem(const std::string& x) {
  if (x.size() < 2 || x.size() > 17 || x[0] != '.' ||
      x.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789+_-", 1) != std::string::npos)
    return "must be a dot and 1-16 lowercase letters, digits, '+', '_' or '-' (\".csv\")";
  if (artifacts::names::is_executable_extension(x))
    return "names a program or script a double-click runs; it is never allowed";
  return std::nullopt;
}
constexpr size_t kPolicyFileMaxBytes = 1024 * 1024;

// "/a/b": absolute, every component non-empty and neither "." nor "..".
// The sandbox binds at path.substr(1), so "/." or "//work" must never pass.
bool is_canonical_absolute(const std::string& path) {
  if (path.size() < 2 || path[0] != '/') return false;
  size_t start = 1;
  for (;;) {
    size_t end = path.find('/', start);
    std::string part = path.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (part.empty() || part == "." || part == "..") return false;
    if (end == std::string::npos) return true;
    start = end + 1;
  }
}

struct Reader {
  std::string error;

  bool fail(const std::string& key, const std::string& what) {
    if (error.empty()) error = key + ": " + what;
    return false;
  }
  bool only_keys(const json& obj, const std::string& key, std::set<std::string> allowed) {
    if (!obj.is_object()) return fail(key.empty() ? "policy" : key, "must be an object");
    for (auto& [k, _] : obj.items())
      if (!allowed.count(k)) return fail(key.empty() ? k : key + "." + k, "unknown key");
    return true;
  }
  bool u64(const json& obj, const std::string& parent, const char* name, uint64_t& out,
           uint64_t min, uint64_t max) {
    if (!obj.contains(name)) return true;
    const json& v = obj[name];
    std::string key = parent + "." + name;
    if (!v.is_number_unsigned()) return fail(key, "must be a non-negative integer");
    uint64_t x = v.get<uint64_t>();
    if (x < min || x > max)
      return fail(key, "must be between " + std::to_string(min) + " and " + std::to_string(max));
    out = x;
    return true;
  }
  bool seconds(const json& obj, const std::string& parent, const char* name, double& out) {
    if (!obj.contains(name)) return true;
    const json& v = obj[name];
    std::string key = parent + "." + name;
    if (!v.is_number()) return fail(key, "must be a number of seconds");
    double x = v.get<double>();
    if (!std::isfinite(x) || x <= 0 || x > kTimeoutCeilingS)
      return fail(key, "must be > 0 and <= " + std::to_string(static_cast<int>(kTimeoutCeilingS)));
    out = x;
    return true;
  }
  bool string_list(const json& v, const std::string& key, std::vector<std::string>& out,
                   bool absolute) {
    if (!v.is_array()) return fail(key, "must be an array of strings");
    out.clear();
    for (auto& item : v) {
      if (!item.is_string() || item.get<std::string>().empty())
        return fail(key, "must contain only non-empty strings");
      std::string s = item.get<std::string>();
      if (absolute && !is_canonical_absolute(s))
        return fail(key, "\"" + s + "\" must be a canonical absolute path (no \"//\", \".\", \"..\" or trailing \"/\")");
      out.push_back(s);
    }
    return true;
  }
};

bool is_module_name(const std::string& m) {
  if (m.empty() || m.size() > 128) return false;
  bool start = true;
  for (char c : m) {
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (c == '.') {
      if (start) return false;
      start = true;
    } else if (alpha || (digit && !start)) {
      start = false;
    } else {
      return false;
    }
  }
  return !start;
}

bool parse_runtime(Reader& r, const std::string& name, const json& v, Runtime& rt) {
  std::string key = "runtimes." + name;
  if (!r.only_keys(v, key, {"description", "command", "code_file", "optional", "loader", "preload", "cache"}))
    return false;
  rt.name = name;
  if (name.empty() || name.size() > 32 ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") != std::string::npos)
    return r.fail(key, "runtime names are 1-32 of [a-z0-9_-]");
  if (!v.contains("command")) return r.fail(key + ".command", "is required");
  if (!r.string_list(v["command"], key + ".command", rt.command, false)) return false;
  if (rt.command.empty() || rt.command[0][0] != '/')
    return r.fail(key + ".command", "must start with an absolute interpreter path");
  if (!v.contains("code_file") || !v["code_file"].is_string())
    return r.fail(key + ".code_file", "is required and must be a string");
  rt.code_file = v["code_file"].get<std::string>();
  if (rt.code_file.empty() || rt.code_file.size() > 64 ||
      rt.code_file.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_.-") !=
          std::string::npos ||
      rt.code_file[0] == '.')
    return r.fail(key + ".code_file", "must be a plain file name such as main.py");
  if (v.contains("description")) {
    if (!v["description"].is_string()) return r.fail(key + ".description", "must be a string");
    rt.description = v["description"].get<std::string>();
  }
  if (v.contains("optional")) {
    if (!v["optional"].is_boolean()) return r.fail(key + ".optional", "must be true or false");
    rt.optional = v["optional"].get<bool>();
  }
  if (v.contains("loader")) {
    if (v["loader"] != "python" && v["loader"] != "")
      return r.fail(key + ".loader", "must be \"python\" (start the interpreter ahead in a warm sandbox) or \"\"");
    rt.loader = v["loader"].get<std::string>();
  }
  if (v.contains("preload")) {
    if (!r.string_list(v["preload"], key + ".preload", rt.preload, false)) return false;
    if (!rt.preload.empty() && rt.loader != "python")
      return r.fail(key + ".preload", "needs \"loader\": \"python\" (the loader imports them)");
    if (rt.preload.size() > 64) return r.fail(key + ".preload", "at most 64 modules");
    for (auto& m : rt.preload)
      if (!is_module_name(m))
        return r.fail(key + ".preload", "\"" + m + "\" is not a module name (dotted identifiers such as matplotlib.pyplot)");
  }
  if (v.contains("cache")) {
    const json& c = v["cache"];
    if (!r.only_keys(c, key + ".cache", {"code", "env"})) return false;
    if (!c.contains("code") || !c["code"].is_string() || c["code"].get<std::string>().empty() ||
        c["code"].get<std::string>().size() > 65536)
      return r.fail(key + ".cache.code", "is required: the program (1 to 65536 bytes) that builds the cache");
    if (!c.contains("env") || !c["env"].is_string() || c["env"].get<std::string>().empty())
      return r.fail(key + ".cache.env", "is required: the sandbox.env variable naming the cache's directory");
    rt.cache_code = c["code"].get<std::string>();
    rt.cache_env = c["env"].get<std::string>();
  }
  rt.available = ::access(rt.command[0].c_str(), X_OK) == 0;
  if (!rt.available && !rt.optional)
    return r.fail(key + ".command", "interpreter " + rt.command[0] +
                                        " is not executable on this host (mark the runtime "
                                        "\"optional\": true to skip it)");
  return true;
}

constexpr uint64_t kNetworkConnectionsCeiling = 1024;  // per job: two descriptors each in the server

bool parse_network(Reader& r, const json& n, Network& out) {
  if (!r.only_keys(n, "network", {"profiles", "hosts", "allow_private"})) return false;
  if (n.contains("hosts")) {
    if (!n["hosts"].is_object()) return r.fail("network.hosts", "must be an object of name -> address");
    for (auto& [name, v] : n["hosts"].items()) {
      const std::string key = "network.hosts." + name;
      auto a = network::parse_authority(name + ":1", std::nullopt);
      if (!a || a->literal) return r.fail(key, "must be a DNS name" + (a ? std::string() : ": " + a.error().message));
      if (a->host != name) return r.fail(key, "must be written in lower case without a trailing dot (\"" + a->host + "\")");
      if (!v.is_string() || !network::parse_address(v.get<std::string>()))
        return r.fail(key, "must be an IPv4 or IPv6 address");
      out.hosts[name] = v.get<std::string>();
    }
  }
  if (n.contains("allow_private")) {
    if (!r.string_list(n["allow_private"], "network.allow_private", out.allow_private, false)) return false;
    for (auto& c : out.allow_private)
      if (auto cidr = network::parse_cidr(c); !cidr) return r.fail("network.allow_private", cidr.error().message);
  }
  if (n.contains("profiles")) {
    if (!n["profiles"].is_object()) return r.fail("network.profiles", "must be an object of profile name -> profile");
    for (auto& [name, v] : n["profiles"].items()) {
      const std::string key = "network.profiles." + name;
      if (name.empty() || name.size() > 32 ||
          name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") != std::string::npos)
        return r.fail(key, "profile names are 1-32 of [a-z0-9_-]");
      NetworkProfile p;
      p.name = name;
      if (!r.only_keys(v, key, {"allow", "max_connections", "max_bytes", "description"})) return false;
      if (!v.contains("allow")) return r.fail(key + ".allow", "is required: a list of \"host:port\" or \"*.suffix:port\"");
      if (!r.string_list(v["allow"], key + ".allow", p.allow, false)) return false;
      if (p.allow.empty()) return r.fail(key + ".allow", "must list at least one destination");
      if (v.contains("description")) {
        if (!v["description"].is_string()) return r.fail(key + ".description", "must be a string");
        p.description = v["description"].get<std::string>();
      }
      for (auto& entry : p.allow)
        if (auto rule = network::parse_allow(entry); !rule)
          return r.fail(key + ".allow", "\"" + entry + "\": " + rule.error().message);
      if (!r.u64(v, key, "max_connections", p.max_connections, 1, kNetworkConnectionsCeiling) ||
          !r.u64(v, key, "max_bytes", p.max_bytes, 1, kBytesCeiling))
        return false;
      out.profiles[name] = std::move(p);
    }
  }
  return true;
}

}  // namespace

uint64_t message_bytes_needed(const Limits& limits) {
  const uint64_t base64_input = (limits.input_max_bytes + 2) / 3 * 4;
  const uint64_t escaped_code = limits.code_max_bytes * kCodeEscapeFactor;
  return std::max(base64_input, escaped_code) + kMessageEnvelopeBytes;
}

const Runtime* Policy::find_runtime(const std::string& name) const {
  auto it = runtimes.find(name);
  if (it == runtimes.end() || !it->second.available) return nullptr;
  return &it->second;
}

std::vector<std::string> Policy::available_runtimes() const {
  std::vector<std::string> names;
  for (auto& [name, rt] : runtimes)
    if (rt.available) names.push_back(name);
  return names;
}

util::Result<Policy> parse(const json& doc, const std::string& source) {
  Reader r;
  Policy p;
  p.source = source;
  if (!r.only_keys(doc, "", {"$comment", "version", "runtimes", "limits", "server", "sandbox", "artifacts", "admission",
                             "retention", "pool", "network", "workspaces"}))
    return make_error(util::ErrorCode::kPolicy, source + ": " + r.error);
  if (!doc.contains("version") || doc["version"] != 1)
    return make_error(util::ErrorCode::kPolicy, source + ": version: must be 1");

  if (!doc.contains("runtimes") || !doc["runtimes"].is_object() || doc["runtimes"].empty())
    return make_error(util::ErrorCode::kPolicy, source + ": runtimes: must be a non-empty object");
  for (auto& [name, v] : doc["runtimes"].items()) {
    Runtime rt;
    if (!parse_runtime(r, name, v, rt)) return make_error(util::ErrorCode::kPolicy, source + ": " + r.error);
    p.runtimes[name] = rt;
  }
  if (p.available_runtimes().empty())
    return make_error(util::ErrorCode::kPolicy, source + ": runtimes: none is available on this host");

  if (doc.contains("limits")) {
    const json& l = doc["limits"];
    Limits& o = p.limits;
    if (!r.only_keys(l, "limits",
                     {"timeout_s", "stdout_max_bytes", "stderr_max_bytes", "code_max_bytes",
                      "input_max_bytes", "inputs_per_job_max", "work_max_bytes", "tmp_max_bytes",
                      "outputs_max_bytes", "outputs_max_files", "artifact_inline_max_bytes",
                      "memory_max_bytes", "pids_max", "nofile_max", "cpu_max_cores"}))
      return make_error(util::ErrorCode::kPolicy, source + ": " + r.error);
    if (l.contains("timeout_s")) {
      const json& t = l["timeout_s"];
      if (!r.only_keys(t, "limits.timeout_s", {"default", "max"}) ||
          !r.seconds(t, "limits.timeout_s", "default", o.timeout_s_default) ||
          !r.seconds(t, "limits.timeout_s", "max", o.timeout_s_max))
        return make_error(util::ErrorCode::kPolicy, source + ": " + r.error);
      if (o.timeout_s_default > o.timeout_s_max)
        return make_error(util::ErrorCode::kPolicy, source + ": limits.timeout_s.default: exceeds limits.timeout_s.max");
    }
    const std::string k = "limits";
    if (l.contains("input_max_bytes") && l["input_max_bytes"].is_number_unsigned() &&
        l["input_max_bytes"].get<uint64_t>() > kInputCeilingBytes)
      return make_error(util::ErrorCode::kPolicy,
                        source + ": limits.input_max_bytes: must be between 1 and " + std::to_string(kInputCeilingBytes) +
                            ": a larger upload, as base64 in one message, would not fit the largest "
                            "server.message_max_bytes (" + std::to_string(kMessageCeilingBytes) + ")");
    if (!r.u64(l, k, "stdout_max_bytes", o.stdout_max_bytes, 1024, 64 << 20) ||
        !r.u64(l, k, "stderr_max_bytes", o.stderr_max_bytes, 1024, 64 << 20) ||
        !r.u64(l, k, "code_max_bytes", o.code_max_bytes, 1024, 16 << 20) ||
        !r.u64(l, k, "input_max_bytes", o.input_max_bytes, 1, kInputCeilingBytes) ||
        !r.u64(l, k, "inputs_per_job_max", o.inputs_per_job_max, 0, 1024) ||
        !r.u64(l, k, "work_max_bytes", o.work_max_bytes, 1 << 20, kBytesCeiling) ||
        !r.u64(l, k, "tmp_max_bytes", o.tmp_max_bytes, 1 << 20, kBytesCeiling) ||
        !r.u64(l, k, "outputs_max_bytes", o.outputs_max_bytes, 1 << 20, kBytesCeiling) ||
        !r.u64(l, k, "outputs_max_files", o.outputs_max_files, 0, 100000) ||
        !r.u64(l, k, "artifact_inline_max_bytes", o.artifact_inline_max_bytes, 1024, 64 << 20) ||
        !r.u64(l, k, "memory_max_bytes", o.memory_max_bytes, 16 << 20, kBytesCeiling * 4) ||
        !r.u64(l, k, "pids_max", o.pids_max, 1, 65536) ||
        !r.u64(l, k, "nofile_max", o.nofile_max, 16, 65536))
      return make_error(util::ErrorCode::kPolicy, source + ": " + r.error);
    if (l.contains("cpu_max_cores")) {
      const json& c = l["cpu_max_cores"];
      if (!c.is_number() || c.get<double>() < 0.01 || c.get<double>() > 1024)
        return make_error(util::ErrorCode::kPolicy, source + ": limits.cpu_max_cores: must be a number between 0.01 and 1024");
      o.cpu_max_cores = c.get<double>();
    }
  }

  const bool message_cap_set = doc.contains("server") && doc["server"].is_object() &&
                               doc["server"].contains("message_max_bytes");
  if (doc.contains("server")) {
    const json& s = doc["server"];
    uint64_t depth = static_cast<uint64_t>(p.server.json_max_depth);
    uint64_t calls = static_cast<uint64_t>(p.server.concurrent_calls_max);
    if (!r.only_keys(s, "server", {"message_max_bytes", "json_max_depth", "concurrent_calls_max",
                                   "http_connections_per_address_max"}) ||
        !r.u64(s, "server", "message_max_bytes", p.server.message_max_bytes, 4096,
               kMessageCeilingBytes) ||
        !r.u64(s, "server", "json_max_depth", depth, 4, 256) ||
        !r.u64(s, "server", "concurrent_calls_max", calls, 1, 256) ||
        !r.u64(s, "server", "http_connections_per_address_max", p.server.http_connections_per_address_max, 1,
               kHttpConnectionsMax))
      return make_error(util::ErrorCode::kPolicy, source + ": " + r.error);
    p.server.json_max_depth = static_cast<int>(depth);
    p.server.concurrent_calls_max = static_cast<int>(calls);
  }
  // An input or a program the limits allow must be able to arrive: the
  // message cap follows from them unless set, and a set one must hold them.
  {
    const uint64_t needed = message_bytes_needed(p.limits);
    if (!message_cap_set) p.server.message_max_bytes = std::max(p.server.message_max_bytes, needed);
    else if (p.server.message_max_bytes < needed)
      return make_error(util::ErrorCode::kPolicy,
                        source + ": server.message_max_bytes: must be at least " + std::to_string(needed) +
                            ": an upload of limits.input_max_bytes (" + std::to_string(p.limits.input_max_bytes) +
                            ") as base64 and a run_code of limits.code_max_bytes (" +
                            std::to_string(p.limits.code_max_bytes) +
                            ") with JSON escapes must fit in one message; leave the key out to have it derived");
  }

  if (!doc.contains("sandbox")) return make_error(util::ErrorCode::kPolicy, source + ": sandbox: is required");
  {
    const json& s = doc["sandbox"];
    for (const char* old : {"host_uid_when_root", "host_gid_when_root"})
      if (s.contains(old))
        return make_error(util::ErrorCode::kPolicy,
                          source + ": sandbox." + old +
                              ": replaced by sandbox.uid_range {\"first\", \"count\"}: as root each sandbox now "
                              "gets a host uid of its own from that range (README, Policy)");
    if (!r.only_keys(s, "sandbox", {"uid_range", "readonly_paths", "env", "require"}))
      return make_error(util::ErrorCode::kPolicy, source + ": " + r.error);
    if (s.contains("require")) {
      const json& req = s["require"];
      if (!r.only_keys(req, "sandbox.require", {"landlock", "cgroups"}))
        return make_error(util::ErrorCode::kPolicy, source + ": " + r.error);
      for (auto& [k, v] : req.items()) {
        if (!v.is_boolean()) return make_error(util::ErrorCode::kPolicy, source + ": sandbox.require." + k + ": must be true or false");
        (k == "landlock" ? p.sandbox.require_landlock : p.sandbox.require_cgroups) = v.get<bool>();
      }
    }
    if (s.contains("uid_range")) {
      const json& u = s["uid_range"];
      if (!r.only_keys(u, "sandbox.uid_range", {"first", "count"}))
        return make_error(util::ErrorCode::kPolicy, source + ": " + r.error);
      uint64_t first = p.sandbox.uid_first, count = p.sandbox.uid_count;
      // Host id 0 is never a sandbox identity (that would make the job host
      // root); 65534 (nobody) and ids from 2^31 on are special to other tools.
      if (!r.u64(u, "sandbox.uid_range", "first", first, 65536, 0x7FFF0000) ||
          !r.u64(u, "sandbox.uid_range", "count", count, 1, 1u << 20))
        return make_error(util::ErrorCode::kPolicy, source + ": " + r.error);
      if (first + count > 0x80000000ull)
        return make_error(util::ErrorCode::kPolicy,
                          source + ": sandbox.uid_range: first + count must stay below 2147483648 (2^31)");
      p.sandbox.uid_first = static_cast<uint32_t>(first);
      p.sandbox.uid_count = static_cast<uint32_t>(count);
    }
    if (!s.contains("readonly_paths") ||
        !r.string_list(s["readonly_paths"], "sandbox.readonly_paths", p.sandbox.readonly_paths, true))
      return make_error(util::ErrorCode::kPolicy, source + ": " + (r.error.empty() ? "sandbox.readonly_paths: is required" : r.error));
    for (auto& path : p.sandbox.readonly_paths) {
      // The in-sandbox contract paths are owned by the launcher, never by a bind.
      for (const char* reserved : {"/inputs", "/outputs", "/work", "/tmp", "/proc", "/dev", sandbox::kCacheMountPath})
        if (path == reserved || path.rfind(std::string(reserved) + "/", 0) == 0 || path == "/" ||
            std::string(reserved).rfind(path + "/", 0) == 0)
          return make_error(util::ErrorCode::kPolicy, source + ": sandbox.readonly_paths: \"" + path +
                                          "\" overlaps a path the sandbox owns");
    }
    if (s.contains("env")) {
      if (!s["env"].is_object()) return make_error(util::ErrorCode::kPolicy, source + ": sandbox.env: must be an object");
      for (auto& [k, v] : s["env"].items()) {
        if (!v.is_string() || k.empty() || k.find('=') != std::string::npos)
          return make_error(util::ErrorCode::kPolicy, source + ": sandbox.env." + k + ": must be a string value with a name without '='");
        for (const char* proxy : {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy",
                                  "NO_PROXY", "no_proxy"})
          if (k == proxy)
            return make_error(util::ErrorCode::kPolicy, source + ": sandbox.env." + k +
                                                            ": throwbox sets the proxy variables itself, for jobs "
                                                            "with a network profile (network.profiles)");
        p.sandbox.env[k] = v.get<std::string>();
      }
    }
  }
  // A runtime's cache is linked from a directory of the sandbox's own /tmp,
  // named by one of its environment variables: never a shared writable place.
  for (auto& [name, rt] : p.runtimes) {
    if (rt.cache_code.empty()) continue;
    const std::string key = source + ": runtimes." + name + ".cache.env: ";
    auto it = p.sandbox.env.find(rt.cache_env);
    if (it == p.sandbox.env.end())
      return make_error(util::ErrorCode::kPolicy, key + "\"" + rt.cache_env + "\" is not set in sandbox.env");
    const std::string& dir = it->second;
    const std::string leaf = dir.rfind("/tmp/", 0) == 0 ? dir.substr(5) : "";
    if (leaf.empty() || leaf.size() > 64 || leaf[0] == '.' ||
        leaf.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != std::string::npos)
      return make_error(util::ErrorCode::kPolicy, key + "sandbox.env." + rt.cache_env + " is \"" + dir +
                                                      "\"; a cache's directory must be /tmp/<plain name>");
  }
  if (doc.contains("admission")) {
    const json& a = doc["admission"];
    Admission& o = p.admission;
    if (!r.only_keys(a, "admission", {"jobs_running_max", "jobs_running_per_tenant_max", "jobs_queued_max",
                                      "cpu_seconds_per_tenant_per_hour", "tasks_per_tenant_max"}) ||
        !r.u64(a, "admission", "jobs_running_max", o.jobs_running_max, 1, 1024) ||
        !r.u64(a, "admission", "jobs_running_per_tenant_max", o.jobs_running_per_tenant_max, 1, 1024) ||
        !r.u64(a, "admission", "jobs_queued_max", o.jobs_queued_max, 0, 100000) ||
        !r.u64(a, "admission", "cpu_seconds_per_tenant_per_hour", o.cpu_seconds_per_tenant_per_hour, 1, 1u << 30) ||
        !r.u64(a, "admission", "tasks_per_tenant_max", o.tasks_per_tenant_max, 1, 100000))
      return make_error(util::ErrorCode::kPolicy, source + ": " + r.error);
  }
  if (doc.contains("retention")) {
    const json& a = doc["retention"];
    Retention& o = p.retention;
    if (!r.only_keys(a, "retention", {"inputs_ttl_s", "artifacts_ttl_s", "jobs_ttl_s", "janitor_interval_s",
                                      "tasks_ttl_s", "tasks_ttl_max_s"}) ||
        !r.u64(a, "retention", "inputs_ttl_s", o.inputs_ttl_s, 1, 1u << 30) ||
        !r.u64(a, "retention", "artifacts_ttl_s", o.artifacts_ttl_s, 1, 1u << 30) ||
        !r.u64(a, "retention", "jobs_ttl_s", o.jobs_ttl_s, 1, 1u << 30) ||
        !r.u64(a, "retention", "janitor_interval_s", o.janitor_interval_s, 1, 86400) ||
        !r.u64(a, "retention", "tasks_ttl_max_s", o.tasks_ttl_max_s, 1, 1u << 30) ||
        !r.u64(a, "retention", "tasks_ttl_s", o.tasks_ttl_s, 1, o.tasks_ttl_max_s))
      return make_error(util::ErrorCode::kPolicy, source + ": " + r.error);
    // A ceiling below the built-in default needs the default lowered too.
    if (o.tasks_ttl_s > o.tasks_ttl_max_s)
      return make_error(util::ErrorCode::kPolicy, source + ": retention.tasks_ttl_s: the default (" + std::to_string(o.tasks_ttl_s) +
                                      ") exceeds retention.tasks_ttl_max_s");
  }
  if (doc.contains("artifacts")) {
    const json& a = doc["artifacts"];
    if (!r.only_keys(a, "artifacts", {"allowed_media_types", "file_max_bytes", "csv_formulas", "active_content",
                                      "allowed_extensions", "image_pixels_max", "pdf_active"}) ||
        !r.u64(a, "artifacts", "file_max_bytes", p.artifacts.file_max_bytes, 1, kBytesCeiling) ||
        !r.u64(a, "artifacts", "image_pixels_max", p.artifacts.image_pixels_max, 1, kImagePixelsCeiling))
      return make_error(util::ErrorCode::kPolicy, source + ": " + r.error);
    if (a.contains("allowed_media_types")) {
      if (!r.string_list(a["allowed_media_types"], "artifacts.allowed_media_types",
                         p.artifacts.allowed_media_types, false))
        return make_error(util::ErrorCode::kPolicy, source + ": " + r.error);
      for (auto& t : p.artifacts.allowed_media_types) {
        if (t.find('/') == std::string::npos || t.find(' ') != std::string::npos)
          return make_error(util::ErrorCode::kPolicy, source + ": artifacts.allowed_media_types: \"" + t + "\" is not a media type");
        // Workbooks carry formulas (and macros) the gate has no reader for:
        // refused rather than passed unchecked.
        for (const char* book : {"application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
                                 "application/vnd.oasis.opendocument.spreadsheet", "application/vnd.ms-excel",
                                 "application/vnd.ms-excel.sheet.macroenabled.12"})
          if (t == book)
            return make_error(util::ErrorCode::kPolicy, source + ": artifacts.allowed_media_types: " + t +
                                                            " (a workbook) cannot be allowed: the gate cannot check "
                                                            "its formulas; export CSV instead");
      }
    }
    if (a.contains("csv_formulas")) {
      if (a["csv_formulas"] != "neutralise" && a["csv_formulas"] != "reject")
        return make_error(util::ErrorCode::kPolicy, source + ": artifacts.csv_formulas: must be \"neutralise\" or \"reject\"");
      p.artifacts.csv_reject = a["csv_formulas"] == "reject";
    }
    if (a.contains("active_content")) {
      if (a["active_content"] != "reject" && a["active_content"] != "text")
        return make_error(util::ErrorCode::kPolicy, source + ": artifacts.active_content: must be \"reject\" or \"text\"");
      p.artifacts.active_content_as_text = a["active_content"] == "text";
    }
    if (a.contains("pdf_active")) {
      if (a["pdf_active"] != "reject" && a["pdf_active"] != "strip")
        return make_error(util::ErrorCode::kPolicy, source + ": artifacts.pdf_active: must be \"reject\" or \"strip\"");
      p.artifacts.pdf_strip = a["pdf_active"] == "strip";
    }
    if (a.contains("allowed_extensions")) {
      const json& e = a["allowed_extensions"];
      if (!e.is_object())
        return make_error(util::ErrorCode::kPolicy, source + ": artifacts.allowed_extensions: must be an object of "
                                                             "media type -> list of extensions");
      for (auto& [type, list] : e.items()) {
        const std::string key = "artifacts.allowed_extensions." + type;
        std::vector<std::string> exts;
        if (!r.string_list(list, key, exts, false)) return make_error(util::ErrorCode::kPolicy, source + ": " + r.error);
        for (auto& x : exts)
          if (auto why = extension_problem(x))
            return make_error(util::ErrorCode::kPolicy, source + ": " + key + ": \"" + x + "\" " + *why);
        p.artifacts.allowed_extensions[type] = std::move(exts);
      }
    }
  }
  // Every allowed type has extensions (the policy's, else the known ones); a
  // list for a type that is not allowed is a mistake the operator should see.
  for (auto& [type, _] : p.artifacts.allowed_extensions)
    if (std::find(p.artifacts.allowed_media_types.begin(), p.artifacts.allowed_media_types.end(), type) ==
        p.artifacts.allowed_media_types.end())
      return make_error(util::ErrorCode::kPolicy, source + ": artifacts.allowed_extensions." + type +
                                                      ": not in artifacts.allowed_media_types");
  for (auto& type : p.artifacts.allowed_media_types) {
    if (p.artifacts.allowed_extensions.count(type)) continue;
    auto known = artifacts::names::default_extensions(type);
    if (known.empty())
      return make_error(util::ErrorCode::kPolicy, source + ": artifacts.allowed_media_types: " + type +
                                                      " has no known file extensions; list them in "
                                                      "artifacts.allowed_extensions");
    p.artifacts.allowed_extensions[type] = std::move(known);
  }
  if (doc.contains("pool")) {
    const json& a = doc["pool"];
    Pool& o = p.pool;
    if (!r.only_keys(a, "pool", {"enabled", "runtimes", "size", "idle_memory_max_bytes", "claim_wait_ms", "first_use"}) ||
        !r.u64(a, "pool", "claim_wait_ms", o.claim_wait_ms, 0, 60000) ||
        !r.u64(a, "pool", "size", o.size, 1, 16) ||
        !r.u64(a, "pool", "idle_memory_max_bytes", o.idle_memory_max_bytes, 1 << 20, kBytesCeiling))
      return make_error(util::ErrorCode::kPolicy, source + ": " + r.error);
    if (a.contains("enabled")) {
      if (!a["enabled"].is_boolean()) return make_error(util::ErrorCode::kPolicy, source + ": pool.enabled: must be true or false");
      o.enabled = a["enabled"].get<bool>();
    }
    if (a.contains("runtimes") && !r.string_list(a["runtimes"], "pool.runtimes", o.runtimes, false))
      return make_error(util::ErrorCode::kPolicy, source + ": " + r.error);
    for (auto& name : o.runtimes)
      if (!p.runtimes.count(name))
        return make_error(util::ErrorCode::kPolicy, source + ": pool.runtimes: \"" + name + "\" is not a runtime of this policy");
    if (a.contains("first_use") && !r.string_list(a["first_use"], "pool.first_use", o.first_use, false))
      return make_error(util::ErrorCode::kPolicy, source + ": " + r.error);
    for (auto& name : o.first_use)
      if (std::find(o.runtimes.begin(), o.runtimes.end(), name) == o.runtimes.end())
        return make_error(util::ErrorCode::kPolicy, source + ": pool.first_use: \"" + name + "\" is not in pool.runtimes");
  }
  if (doc.contains("network") && !parse_network(r, doc["network"], p.network))
    return make_error(util::ErrorCode::kPolicy, source + ": " + r.error);
  if (doc.contains("workspaces")) {
    const json& w = doc["workspaces"];
    Workspaces& o = p.workspaces;
    if (!r.only_keys(w, "workspaces", {"ttl_s", "per_tenant_max", "size_max_bytes"}) ||
        !r.u64(w, "workspaces", "per_tenant_max", o.per_tenant_max, 1, 10000) ||
        !r.u64(w, "workspaces", "size_max_bytes", o.size_max_bytes, 1 << 20, kBytesCeiling))
      return make_error(util::ErrorCode::kPolicy, source + ": " + r.error);
    if (w.contains("ttl_s")) {
      const json& t = w["ttl_s"];
      if (!r.only_keys(t, "workspaces.ttl_s", {"default", "max"}) ||
          !r.u64(t, "workspaces.ttl_s", "max", o.ttl_s_max, 1, 30 * 86400) ||
          !r.u64(t, "workspaces.ttl_s", "default", o.ttl_s_default, 1, 30 * 86400))
        return make_error(util::ErrorCode::kPolicy, source + ": " + r.error);
    }
    if (o.ttl_s_default > o.ttl_s_max)
      return make_error(util::ErrorCode::kPolicy, source + ": workspaces.ttl_s.default: exceeds workspaces.ttl_s.max");
  }
  return p;
}

namespace {

// The JSON library's reason, without its "[json.exception.parse_error.101]
// parse error at line 1, column 2: " prefix.
std::string json_reason(const std::string& what) {
  std::string reason = what;
  if (reason.rfind("[json.exception.", 0) == 0)
    if (size_t end = reason.find("] "); end != std::string::npos) reason.erase(0, end + 2);
  if (reason.rfind("parse error", 0) == 0)
    if (size_t colon = reason.find(": "); colon != std::string::npos) reason.erase(0, colon + 2);
  return reason;
}

// " at line L, column C" of the character where parsing stopped: byte is the
// library's 1-based index of the last character it read (size + 1: the end of
// the text). Columns count bytes from 1; a newline is the last column of its
// line. Empty when the library knows no position.
std::string json_position(std::string_view text, size_t byte) {
  if (byte == 0) return "";
  const size_t at = std::min(byte - 1, text.size());  // 0-based; text.size(): the end
  const std::string_view before = text.substr(0, at);
  const size_t line = 1 + static_cast<size_t>(std::count(before.begin(), before.end(), '\n'));
  const size_t line_start = before.rfind('\n') == std::string_view::npos ? 0 : before.rfind('\n') + 1;
  return " at line " + std::to_string(line) + ", column " + std::to_string(at - line_start + 1);
}

}  // namespace

util::Result<Policy> load_file(const std::string& path) {
  auto text = util::read_file(path, kPolicyFileMaxBytes);
  if (!text) return make_error(util::ErrorCode::kPolicy, "cannot read policy: " + text.error().message);
  json doc;
  try {
    doc = json::parse(*text, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const json::parse_error& e) {
    return make_error(util::ErrorCode::kPolicy,
                      path + ": not valid JSON" + json_position(*text, e.byte) + ": " + json_reason(e.what()));
  } catch (const json::exception& e) {  // a number beyond a double's range
    return make_error(util::ErrorCode::kPolicy, path + ": not valid JSON: " + json_reason(e.what()));
  }
  return parse(doc, path);
}

namespace {
json network_json(const Network& n) {
  json profiles = json::object();
  for (auto& [name, p] : n.profiles)
    profiles[name] = {{"description", p.description}, {"allow", p.allow}, {"max_connections", p.max_connections}, {"max_bytes", p.max_bytes}};
  return {{"profiles", profiles}, {"hosts", n.hosts}, {"allow_private", n.allow_private}};
}
}  // namespace

nlohmann::json effective_json(const Policy& p) {
  json runtimes = json::object();
  for (auto& [name, rt] : p.runtimes)
    runtimes[name] = {{"description", rt.description}, {"command", rt.command}, {"code_file", rt.code_file},
                      {"optional", rt.optional}, {"loader", rt.loader}};
  for (auto& [name, rt] : p.runtimes) {
    runtimes[name]["preload"] = rt.preload;
    if (!rt.cache_code.empty()) runtimes[name]["cache"] = {{"code", rt.cache_code}, {"env", rt.cache_env}};
  }
  const Limits& l = p.limits;
  const Sandbox& s = p.sandbox;
  return {
      {"version", 1},
      {"runtimes", runtimes},
      {"limits",
       {{"timeout_s", {{"default", l.timeout_s_default}, {"max", l.timeout_s_max}}},
        {"stdout_max_bytes", l.stdout_max_bytes}, {"stderr_max_bytes", l.stderr_max_bytes},
        {"code_max_bytes", l.code_max_bytes}, {"input_max_bytes", l.input_max_bytes},
        {"inputs_per_job_max", l.inputs_per_job_max}, {"work_max_bytes", l.work_max_bytes},
        {"tmp_max_bytes", l.tmp_max_bytes}, {"outputs_max_bytes", l.outputs_max_bytes},
        {"outputs_max_files", l.outputs_max_files}, {"artifact_inline_max_bytes", l.artifact_inline_max_bytes},
        {"memory_max_bytes", l.memory_max_bytes}, {"pids_max", l.pids_max}, {"nofile_max", l.nofile_max},
        {"cpu_max_cores", l.cpu_max_cores}}},
      {"server",
       {{"message_max_bytes", p.server.message_max_bytes},
        // As unsigned, the type the loader asks for (parse(effective_json(p)) must load).
        {"json_max_depth", static_cast<uint64_t>(p.server.json_max_depth)},
        {"concurrent_calls_max", static_cast<uint64_t>(p.server.concurrent_calls_max)},
        {"http_connections_per_address_max", p.server.http_connections_per_address_max}}},
      {"admission",
       {{"jobs_running_max", p.admission.jobs_running_max},
        {"jobs_running_per_tenant_max", p.admission.jobs_running_per_tenant_max},
        {"jobs_queued_max", p.admission.jobs_queued_max},
        {"cpu_seconds_per_tenant_per_hour", p.admission.cpu_seconds_per_tenant_per_hour},
        {"tasks_per_tenant_max", p.admission.tasks_per_tenant_max}}},
      {"retention",
       {{"inputs_ttl_s", p.retention.inputs_ttl_s}, {"artifacts_ttl_s", p.retention.artifacts_ttl_s},
        {"jobs_ttl_s", p.retention.jobs_ttl_s}, {"janitor_interval_s", p.retention.janitor_interval_s},
        {"tasks_ttl_s", p.retention.tasks_ttl_s}, {"tasks_ttl_max_s", p.retention.tasks_ttl_max_s}}},
      {"pool",
       {{"enabled", p.pool.enabled}, {"runtimes", p.pool.runtimes}, {"size", p.pool.size},
        {"idle_memory_max_bytes", p.pool.idle_memory_max_bytes}, {"claim_wait_ms", p.pool.claim_wait_ms}, {"first_use", p.pool.first_use}}},
      {"artifacts",
       {{"allowed_media_types", p.artifacts.allowed_media_types}, {"file_max_bytes", p.artifacts.file_max_bytes},
        {"csv_formulas", p.artifacts.csv_reject ? "reject" : "neutralise"},
        {"active_content", p.artifacts.active_content_as_text ? "text" : "reject"},
        {"allowed_extensions", p.artifacts.allowed_extensions},
        {"image_pixels_max", p.artifacts.image_pixels_max},
        {"pdf_active", p.artifacts.pdf_strip ? "strip" : "reject"}}},
      {"network", network_json(p.network)},
      {"workspaces",
       {{"ttl_s", {{"default", p.workspaces.ttl_s_default}, {"max", p.workspaces.ttl_s_max}}},
        {"per_tenant_max", p.workspaces.per_tenant_max},
        {"size_max_bytes", p.workspaces.size_max_bytes}}},
      {"sandbox",
       {{"uid_range", {{"first", s.uid_first}, {"count", s.uid_count}}},
        {"require", {{"landlock", s.require_landlock}, {"cgroups", s.require_cgroups}}},
        {"readonly_paths", s.readonly_paths}, {"env", s.env}}},
  };
}

std::vector<std::string> default_path_candidates() {
  // The administrator's copy; the installed one beside the binary
  // (<prefix>/bin -> <prefix>/share/throwbox); a build directory inside the
  // source tree (build/ -> policies/). Nothing compiled in: a package or a
  // copied tree finds its own.
  const std::string dir = util::self_exe_dir();
  return {"/etc/throwbox/policy.json", dir + "/../share/throwbox/policies/default.json",
          dir + "/../policies/default.json"};
}

std::string default_path() {
  auto candidates = default_path_candidates();
  for (const auto& candidate : candidates)
    if (::access(candidate.c_str(), R_OK) == 0) return candidate;
  return candidates.front();  // the error then names where it should be
}

}  // namespace policy
