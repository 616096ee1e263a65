// Policy loading and validation. Runs once in main() before any thread starts
// (and again on a reload). Fails closed: an unknown key, a wrong type or a
// value beyond a ceiling is an error naming the key.
//
//   Key, Reader         a section's table of keys (name, kind, range; the
//                       default is the member's initialiser in policy.h) and
//                       the reader that checks a JSON object against it
//   k...Keys            the tables, one per section and nested object
//   parse_<section>     one function per section: its table's keys, then
//                       what the table cannot say (shapes, names, relations)
//   parse_policy        the sections in order, each after those it uses
//   load_file           the file read and parsed (a syntax error's line and
//                       column), then parse()
//   effective_json      every key with its value after defaults
//   default_path        where the policy is read when none is named
#include "server/policy/policy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <optional>
#include <set>
#include <span>
#include <string_view>
#include <type_traits>
#include <variant>

#include "server/image/digest.h"
#include "server/artifacts/names.h"
#include "server/network/address.h"
#include "server/sandbox/spec.h"
#include "server/util/crypto.h"
#include "server/util/database_uri.h"
#include "server/util/fd.h"
#include "server/util/fs.h"
#include "server/util/text.h"

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
// A runtime's warm-up: part of the loader's argv (one argument is at most 128 KiB).
constexpr size_t kWarmupMaxBytes = 16384;

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

// What a key of a policy section holds. The reader checks kInteger, kSeconds
// and kBool keys from the table; the others are checked by their section's
// own code (their shapes and messages vary).
enum class Kind {
  kInteger,  // a non-negative integer within [min, max]
  kSeconds,  // a number of seconds, > 0 and <= kTimeoutCeilingS
  kBool,     // true or false
  kString,
  kStrings,  // an array of strings
  kNumber,
  kObject,  // a nested section, or a map of names
  kAny,     // "$comment": anything, ignored
};

// The members a kInteger key may be read into.
template <class S>
using IntegerMember = std::variant<uint64_t S::*, uint32_t S::*, int S::*>;

// One key of a section read into the struct S: its name, what it holds and,
// for an integer, its range. Its default is the member's initialiser in
// policy.h. A section's table lists every key it accepts: a key not in it
// is "unknown key".
template <class S>
struct Key {
  const char* name;
  Kind kind;
  IntegerMember<S> integer{};     // kInteger
  uint64_t min = 0, max = 0;      // kInteger: the range
  uint64_t S::*max_of = nullptr;  // kInteger: the range ends at this member's value instead (read before it)
  double S::*seconds = nullptr;   // kSeconds
  bool S::*flag = nullptr;        // kBool
};

template <class S, class M>
Key<S> integer(const char* name, M S::*member, uint64_t min, uint64_t max) {
  return {.name = name, .kind = Kind::kInteger, .integer = IntegerMember<S>(member), .min = min, .max = max};
}
template <class S>
Key<S> integer_up_to(const char* name, uint64_t S::*member, uint64_t min, uint64_t S::*max_of) {
  return {.name = name, .kind = Kind::kInteger, .integer = IntegerMember<S>(member), .min = min, .max_of = max_of};
}
template <class S>
Key<S> seconds(const char* name, double S::*member) {
  return {.name = name, .kind = Kind::kSeconds, .seconds = member};
}
template <class S>
Key<S> flag(const char* name, bool S::*member) {
  return {.name = name, .kind = Kind::kBool, .flag = member};
}
// A key the section's own code reads.
template <class S>
Key<S> other(const char* name, Kind kind) {
  return {.name = name, .kind = kind};
}

template <class S>
using Keys = std::span<const Key<S>>;

struct Reader {
  std::string error;
  Secrets secrets = Secrets::kRequired;

  bool fail(const std::string& key, const std::string& what) {
    if (error.empty()) error = key + ": " + what;
    return false;
  }
  // obj is an object whose every key is in the table.
  template <class S>
  bool only_keys(const json& obj, const std::string& key, Keys<S> keys) {
    if (!obj.is_object()) return fail(key.empty() ? "policy" : key, "must be an object");
    for (auto& item : obj.items()) {
      const std::string& k = item.key();
      if (std::none_of(keys.begin(), keys.end(), [&](const Key<S>& x) { return k == x.name; }))
        return fail(key.empty() ? k : key + "." + k, "unknown key");
    }
    return true;
  }
  // The table's integer, seconds and boolean keys that obj has, in the
  // table's order, each checked against its range and stored in out.
  template <class S>
  bool values(const json& obj, const std::string& parent, Keys<S> keys, S& out) {
    for (const Key<S>& k : keys) {
      if (!obj.contains(k.name)) continue;
      if (k.kind == Kind::kInteger) {
        uint64_t x = 0;
        if (!u64(obj, parent, k.name, x, k.min, k.max_of ? out.*(k.max_of) : k.max)) return false;
        std::visit([&](auto member) { out.*member = static_cast<std::remove_reference_t<decltype(out.*member)>>(x); },
                   k.integer);
      } else if (k.kind == Kind::kSeconds) {
        if (!seconds(obj, parent, k.name, out.*(k.seconds))) return false;
      } else if (k.kind == Kind::kBool) {
        const json& v = obj[k.name];
        if (!v.is_boolean()) return fail(parent + "." + k.name, "must be true or false");
        out.*(k.flag) = v.get<bool>();
      }
    }
    return true;
  }
  bool u64(const json& obj, const std::string& parent, const char* name, uint64_t& out, uint64_t min, uint64_t max) {
    if (!obj.contains(name)) return true;
    const json& v = obj[name];
    std::string key = parent + "." + name;
    if (!v.is_number_unsigned()) return fail(key, "must be a non-negative integer");
    uint64_t x = v.get<uint64_t>();
    if (x < min || x > max) return fail(key, "must be between " + std::to_string(min) + " and " + std::to_string(max));
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
  bool string_list(const json& v, const std::string& key, std::vector<std::string>& out, bool absolute) {
    if (!v.is_array()) return fail(key, "must be an array of strings");
    out.clear();
    for (auto& item : v) {
      if (!item.is_string() || item.get<std::string>().empty()) return fail(key, "must contain only non-empty strings");
      std::string s = item.get<std::string>();
      if (absolute && !is_canonical_absolute(s))
        return fail(key,
                    "\"" + s + "\" must be a canonical absolute path (no \"//\", \".\", \"..\" or trailing \"/\")");
      out.push_back(s);
    }
    return true;
  }
};

// ---- The sections' tables, in the order the reader checks their values.

const Key<Policy> kPolicyKeys[] = {
    other<Policy>("$comment", Kind::kAny),     other<Policy>("version", Kind::kInteger),
    other<Policy>("runtimes", Kind::kObject),  other<Policy>("limits", Kind::kObject),
    other<Policy>("server", Kind::kObject),    other<Policy>("sandbox", Kind::kObject),
    other<Policy>("artifacts", Kind::kObject), other<Policy>("admission", Kind::kObject),
    other<Policy>("retention", Kind::kObject), other<Policy>("pool", Kind::kObject),
    other<Policy>("network", Kind::kObject),   other<Policy>("workspaces", Kind::kObject),
    other<Policy>("checks", Kind::kObject),
};

// runtimes.<name>
const Key<Runtime> kRuntimeKeys[] = {
    other<Runtime>("description", Kind::kString), other<Runtime>("command", Kind::kStrings),
    other<Runtime>("code_file", Kind::kString),   flag("optional", &Runtime::optional),
    other<Runtime>("loader", Kind::kString),      other<Runtime>("preload", Kind::kStrings),
    other<Runtime>("cache", Kind::kObject),       other<Runtime>("required_checks", Kind::kStrings),
    other<Runtime>("warmup", Kind::kString),      other<Runtime>("image", Kind::kObject),
};
// runtimes.<name>.image
const Key<Runtime> kRuntimeImageKeys[] = {other<Runtime>("layout", Kind::kString),
                                          other<Runtime>("digest", Kind::kString)};
// runtimes.<name>.cache
const Key<Runtime> kRuntimeCacheKeys[] = {other<Runtime>("code", Kind::kString), other<Runtime>("env", Kind::kString)};

const Key<Limits> kLimitsKeys[] = {
    other<Limits>("timeout_s", Kind::kObject),
    integer("stdout_max_bytes", &Limits::stdout_max_bytes, 1024, 64 << 20),
    integer("stderr_max_bytes", &Limits::stderr_max_bytes, 1024, 64 << 20),
    integer("code_max_bytes", &Limits::code_max_bytes, 1024, 16 << 20),
    integer("input_max_bytes", &Limits::input_max_bytes, 1, kInputCeilingBytes),
    integer("inputs_per_job_max", &Limits::inputs_per_job_max, 0, 1024),
    integer("work_max_bytes", &Limits::work_max_bytes, 1 << 20, kBytesCeiling),
    integer("tmp_max_bytes", &Limits::tmp_max_bytes, 1 << 20, kBytesCeiling),
    integer("outputs_max_bytes", &Limits::outputs_max_bytes, 1 << 20, kBytesCeiling),
    integer("outputs_max_files", &Limits::outputs_max_files, 0, 100000),
    integer("artifact_inline_max_bytes", &Limits::artifact_inline_max_bytes, 1024, 64 << 20),
    integer("memory_max_bytes", &Limits::memory_max_bytes, 16 << 20, kBytesCeiling * 4),
    integer("pids_max", &Limits::pids_max, 1, 65536),
    integer("nofile_max", &Limits::nofile_max, 16, 65536),
    other<Limits>("cpu_max_cores", Kind::kNumber),  // 0.01 to 1024
};
// limits.timeout_s
const Key<Limits> kTimeoutKeys[] = {seconds("default", &Limits::timeout_s_default),
                                    seconds("max", &Limits::timeout_s_max)};

const Key<Server> kServerKeys[] = {
    integer("message_max_bytes", &Server::message_max_bytes, 4096, kMessageCeilingBytes),
    integer("json_max_depth", &Server::json_max_depth, 4, 256),
    integer("concurrent_calls_max", &Server::concurrent_calls_max, 1, 256),
    integer("http_connections_per_address_max", &Server::http_connections_per_address_max, 1, kHttpConnectionsMax),
    other<Server>("database", Kind::kString),  // a PostgreSQL connection URI without a password
    other<Server>("store", Kind::kString),     // an absolute directory
};

const Key<Sandbox> kSandboxKeys[] = {
    other<Sandbox>("uid_range", Kind::kObject),
    other<Sandbox>("readonly_paths", Kind::kStrings),
    other<Sandbox>("env", Kind::kObject),
    other<Sandbox>("require", Kind::kObject),
};
// sandbox.require
const Key<Sandbox> kRequireKeys[] = {flag("cgroups", &Sandbox::require_cgroups),
                                     flag("landlock", &Sandbox::require_landlock)};
// sandbox.uid_range. Host id 0 is never a sandbox identity (that would make
// the job host root); 65534 (nobody) and ids from 2^31 on are special to
// other tools.
const Key<Sandbox> kUidRangeKeys[] = {integer("first", &Sandbox::uid_first, 65536, 0x7FFF0000),
                                      integer("count", &Sandbox::uid_count, 1, 1u << 20)};

const Key<Admission> kAdmissionKeys[] = {
    integer("jobs_running_max", &Admission::jobs_running_max, 1, 1024),
    integer("jobs_running_per_tenant_max", &Admission::jobs_running_per_tenant_max, 1, 1024),
    integer("jobs_queued_max", &Admission::jobs_queued_max, 0, 100000),
    integer("cpu_seconds_per_tenant_per_hour", &Admission::cpu_seconds_per_tenant_per_hour, 1, 1u << 30),
    integer("tasks_per_tenant_max", &Admission::tasks_per_tenant_max, 1, 100000),
    integer("store_bytes_per_tenant_max", &Admission::store_bytes_per_tenant_max, 1u << 20, 1ull << 40),
    integer("store_files_per_tenant_max", &Admission::store_files_per_tenant_max, 1, 1000000),
};

const Key<Retention> kRetentionKeys[] = {
    integer("inputs_ttl_s", &Retention::inputs_ttl_s, 1, 1u << 30),
    integer("artifacts_ttl_s", &Retention::artifacts_ttl_s, 1, 1u << 30),
    integer("jobs_ttl_s", &Retention::jobs_ttl_s, 1, 1u << 30),
    integer("jobs_per_tenant_max", &Retention::jobs_per_tenant_max, 1, 100000000),
    integer("janitor_interval_s", &Retention::janitor_interval_s, 1, 86400),
    integer("tasks_ttl_max_s", &Retention::tasks_ttl_max_s, 1, 1u << 30),
    integer_up_to("tasks_ttl_s", &Retention::tasks_ttl_s, 1, &Retention::tasks_ttl_max_s),
};

const Key<Artifacts> kArtifactsKeys[] = {
    other<Artifacts>("allowed_media_types", Kind::kStrings),
    integer("file_max_bytes", &Artifacts::file_max_bytes, 1, kBytesCeiling),
    other<Artifacts>("csv_formulas", Kind::kString),        // "neutralise" or "reject"
    other<Artifacts>("active_content", Kind::kString),      // "reject" or "text"
    other<Artifacts>("allowed_extensions", Kind::kObject),  // media type -> extensions
    integer("image_pixels_max", &Artifacts::image_pixels_max, 1, kImagePixelsCeiling),
    other<Artifacts>("pdf_active", Kind::kString),  // "reject" or "strip"
};

const Key<Pool> kPoolKeys[] = {
    integer("claim_wait_ms", &Pool::claim_wait_ms, 0, 60000),
    integer("size", &Pool::size, 1, 16),
    integer("idle_memory_max_bytes", &Pool::idle_memory_max_bytes, 1 << 20, kBytesCeiling),
    flag("enabled", &Pool::enabled),
    other<Pool>("runtimes", Kind::kStrings),
    other<Pool>("first_use", Kind::kStrings),
    other<Pool>("templates", Kind::kStrings),
    integer("template_forks_max", &Pool::template_forks_max, 1, 1000000),
    integer("template_age_max_s", &Pool::template_age_max_s, 10, 7 * 86400),
};

constexpr uint64_t kNetworkConnectionsCeiling = 1024;  // per job: two descriptors each in the server

const Key<Network> kNetworkKeys[] = {other<Network>("profiles", Kind::kObject), other<Network>("hosts", Kind::kObject),
                                     other<Network>("allow_private", Kind::kStrings)};
// network.profiles.<name>
const Key<NetworkProfile> kProfileKeys[] = {
    other<NetworkProfile>("allow", Kind::kStrings),
    integer("max_connections", &NetworkProfile::max_connections, 1, kNetworkConnectionsCeiling),
    integer("max_bytes", &NetworkProfile::max_bytes, 1, kBytesCeiling),
    other<NetworkProfile>("description", Kind::kString),
    other<NetworkProfile>("credentials", Kind::kAny),
    other<NetworkProfile>("rules", Kind::kAny),
};

const Key<Workspaces> kWorkspacesKeys[] = {
    other<Workspaces>("ttl_s", Kind::kObject),
    integer("per_tenant_max", &Workspaces::per_tenant_max, 1, 10000),
    integer("size_max_bytes", &Workspaces::size_max_bytes, 1 << 20, kBytesCeiling),
};
// checks.<name>
const Key<Check> kCheckKeys[] = {
    other<Check>("$comment", Kind::kAny),
    other<Check>("description", Kind::kString),
    other<Check>("runtime", Kind::kString),
    other<Check>("command", Kind::kStrings),
    other<Check>("code_file", Kind::kString),
    seconds("timeout_s", &Check::timeout_s),
    integer("max_output_bytes", &Check::max_output_bytes, 64, 64 << 20),
};

// workspaces.ttl_s
const Key<Workspaces> kWorkspaceTtlKeys[] = {integer("max", &Workspaces::ttl_s_max, 1, 30 * 86400),
                                             integer("default", &Workspaces::ttl_s_default, 1, 30 * 86400)};

// ---- The sections.

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
  if (!r.only_keys<Runtime>(v, key, kRuntimeKeys)) return false;
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
      rt.code_file.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_.-") != std::string::npos ||
      rt.code_file[0] == '.')
    return r.fail(key + ".code_file", "must be a plain file name such as main.py");
  if (v.contains("description")) {
    if (!v["description"].is_string()) return r.fail(key + ".description", "must be a string");
    rt.description = v["description"].get<std::string>();
  }
  if (!r.values<Runtime>(v, key, kRuntimeKeys, rt)) return false;  // optional
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
        return r.fail(key + ".preload",
                      "\"" + m + "\" is not a module name (dotted identifiers such as matplotlib.pyplot)");
  }
  if (v.contains("warmup")) {  // "": none
    const json& w = v["warmup"];
    if (!w.is_string() || w.get_ref<const std::string&>().size() > kWarmupMaxBytes ||
        w.get_ref<const std::string&>().find('\0') != std::string::npos)
      return r.fail(key + ".warmup", "must be a string of Python statements, at most " +
                                         std::to_string(kWarmupMaxBytes) + " bytes, with no NUL");
    rt.warmup = w.get<std::string>();
    if (!rt.warmup.empty() && rt.loader != "python")
      return r.fail(key + ".warmup", "needs \"loader\": \"python\" (the loader runs it)");
  }
  if (v.contains("cache")) {
    const json& c = v["cache"];
    if (!r.only_keys<Runtime>(c, key + ".cache", kRuntimeCacheKeys)) return false;
    if (!c.contains("code") || !c["code"].is_string() || c["code"].get<std::string>().empty() ||
        c["code"].get<std::string>().size() > 65536)
      return r.fail(key + ".cache.code", "is required: the program (1 to 65536 bytes) that builds the cache");
    if (!c.contains("env") || !c["env"].is_string() || c["env"].get<std::string>().empty())
      return r.fail(key + ".cache.env", "is required: the sandbox.env variable naming the cache's directory");
    rt.cache_code = c["code"].get<std::string>();
    rt.cache_env = c["env"].get<std::string>();
  }
  // Each must name a check: known once the checks are read (check_required_checks).
  if (v.contains("required_checks") &&
      !r.string_list(v["required_checks"], key + ".required_checks", rt.required_checks, false))
    return false;
  if (v.contains("image")) {
    const json& img = v["image"];
    if (!r.only_keys<Runtime>(img, key + ".image", kRuntimeImageKeys)) return false;
    if (!img.contains("layout") || !img["layout"].is_string() ||
        !is_canonical_absolute(img["layout"].get<std::string>()))
      return r.fail(key + ".image.layout",
                    "is required: the absolute path of an OCI image layout (a directory, or a tar archive of one)");
    if (!img.contains("digest") || !img["digest"].is_string())
      return r.fail(key + ".image.digest", "is required: the image manifest's digest, sha256:<64 hex digits>");
    auto digest = image::parse_digest(img["digest"].get<std::string>());
    if (!digest) return r.fail(key + ".image.digest", digest.error().message);
    rt.image_layout = img["layout"].get<std::string>();
    rt.image_digest = digest->str();
    // The interpreter is the image's: the server finds it once the image is
    // unpacked at its start (and refuses to start without it).
    rt.available = true;
    return true;
  }
  rt.available = ::access(rt.command[0].c_str(), X_OK) == 0;
  if (!rt.available && !rt.optional)
    return r.fail(key + ".command", "interpreter " + rt.command[0] +
                                        " is not executable on this host (mark the runtime "
                                        "\"optional\": true to skip it)");
  return true;
}

bool parse_runtimes(Reader& r, const json& doc, std::map<std::string, Runtime>& out) {
  if (!doc.contains("runtimes") || !doc["runtimes"].is_object() || doc["runtimes"].empty())
    return r.fail("runtimes", "must be a non-empty object");
  for (auto& [name, v] : doc["runtimes"].items()) {
    Runtime rt;
    if (!parse_runtime(r, name, v, rt)) return false;
    out[name] = rt;
  }
  if (std::none_of(out.begin(), out.end(), [](const auto& named) { return named.second.available; }))
    return r.fail("runtimes", "none is available on this host");
  return true;
}

bool parse_limits(Reader& r, const json& l, Limits& o) {
  if (!r.only_keys<Limits>(l, "limits", kLimitsKeys)) return false;
  if (l.contains("timeout_s")) {
    const json& t = l["timeout_s"];
    if (!r.only_keys<Limits>(t, "limits.timeout_s", kTimeoutKeys) ||
        !r.values<Limits>(t, "limits.timeout_s", kTimeoutKeys, o))
      return false;
    if (o.timeout_s_default > o.timeout_s_max)
      return r.fail("limits.timeout_s.default", "exceeds limits.timeout_s.max");
  }
  // Above its ceiling, the upload cap says why there is one.
  if (l.contains("input_max_bytes") && l["input_max_bytes"].is_number_unsigned() &&
      l["input_max_bytes"].get<uint64_t>() > kInputCeilingBytes)
    return r.fail("limits.input_max_bytes",
                  "must be between 1 and " + std::to_string(kInputCeilingBytes) +
                      ": a larger upload, as base64 in one message, would not fit the largest "
                      "server.message_max_bytes (" +
                      std::to_string(kMessageCeilingBytes) + ")");
  if (!r.values<Limits>(l, "limits", kLimitsKeys, o)) return false;
  if (l.contains("cpu_max_cores")) {
    const json& c = l["cpu_max_cores"];
    if (!c.is_number() || c.get<double>() < 0.01 || c.get<double>() > 1024)
      return r.fail("limits.cpu_max_cores", "must be a number between 0.01 and 1024");
    o.cpu_max_cores = c.get<double>();
  }
  return true;
}

bool parse_server(Reader& r, const json& s, Server& o) {
  if (!r.only_keys<Server>(s, "server", kServerKeys) || !r.values<Server>(s, "server", kServerKeys, o)) return false;
  if (s.contains("database")) {
    if (!s["database"].is_string()) return r.fail("server.database", "must be a string");
    o.database = s["database"].get<std::string>();
    if (std::string why = util::database_uri_problem(o.database); !o.database.empty() && !why.empty())
      return r.fail("server.database", why);
  }
  if (s.contains("store")) {
    if (!s["store"].is_string()) return r.fail("server.store", "must be a string");
    o.store = s["store"].get<std::string>();
    if (!o.store.empty() && !is_canonical_absolute(o.store))
      return r.fail("server.store", "must be an absolute path without \".\", \"..\" or \"//\" (\"/srv/throwbox\")");
  }
  return true;
}

// An input or a program the limits allow must be able to arrive: the
// message cap follows from them unless set, and a set one must hold them.
bool fit_message_cap(Reader& r, bool cap_set, const Limits& limits, Server& o) {
  const uint64_t needed = message_bytes_needed(limits);
  if (!cap_set)
    o.message_max_bytes = std::max(o.message_max_bytes, needed);
  else if (o.message_max_bytes < needed)
    return r.fail("server.message_max_bytes",
                  "must be at least " + std::to_string(needed) + ": an upload of limits.input_max_bytes (" +
                      std::to_string(limits.input_max_bytes) + ") as base64 and a run_code of limits.code_max_bytes (" +
                      std::to_string(limits.code_max_bytes) +
                      ") with JSON escapes must fit in one message; leave the key out to have it derived");
  return true;
}

bool parse_sandbox(Reader& r, const json& s, Sandbox& o) {
  for (const char* old : {"host_uid_when_root", "host_gid_when_root"})
    if (s.contains(old))
      return r.fail(std::string("sandbox.") + old,
                    "replaced by sandbox.uid_range {\"first\", \"count\"}: as root each sandbox now "
                    "gets a host uid of its own from that range (docs/policy.md, sandbox)");
  if (!r.only_keys<Sandbox>(s, "sandbox", kSandboxKeys)) return false;
  if (s.contains("require") && (!r.only_keys<Sandbox>(s["require"], "sandbox.require", kRequireKeys) ||
                                !r.values<Sandbox>(s["require"], "sandbox.require", kRequireKeys, o)))
    return false;
  if (s.contains("uid_range")) {
    const json& u = s["uid_range"];
    if (!r.only_keys<Sandbox>(u, "sandbox.uid_range", kUidRangeKeys) ||
        !r.values<Sandbox>(u, "sandbox.uid_range", kUidRangeKeys, o))
      return false;
    if (uint64_t{o.uid_first} + o.uid_count > 0x80000000ull)
      return r.fail("sandbox.uid_range", "first + count must stay below 2147483648 (2^31)");
  }
  if (!s.contains("readonly_paths")) return r.fail("sandbox.readonly_paths", "is required");
  if (!r.string_list(s["readonly_paths"], "sandbox.readonly_paths", o.readonly_paths, true)) return false;
  for (auto& path : o.readonly_paths) {
    // The in-sandbox contract paths are owned by the launcher, never by a bind.
    for (const char* reserved : {"/inputs", "/outputs", "/work", "/tmp", "/proc", "/dev", sandbox::kCacheMountPath})
      if (path == reserved || path.rfind(std::string(reserved) + "/", 0) == 0 || path == "/" ||
          std::string(reserved).rfind(path + "/", 0) == 0)
        return r.fail("sandbox.readonly_paths", "\"" + path + "\" overlaps a path the sandbox owns");
  }
  if (s.contains("env")) {
    if (!s["env"].is_object()) return r.fail("sandbox.env", "must be an object");
    for (auto& [k, v] : s["env"].items()) {
      if (!v.is_string() || k.empty() || k.find('=') != std::string::npos)
        return r.fail("sandbox.env." + k, "must be a string value with a name without '='");
      for (const char* proxy : sandbox::kProxyEnvNames)
        if (k == proxy)
          return r.fail("sandbox.env." + k,
                        "throwbox sets the proxy and CA bundle variables itself, for jobs with a network "
                        "profile (network.profiles)");
      o.env[k] = v.get<std::string>();
    }
  }
  return true;
}

// A runtime's cache is linked from a directory of the sandbox's own /tmp,
// named by one of its environment variables: never a shared writable place.
bool check_runtime_caches(Reader& r, const std::map<std::string, Runtime>& runtimes, const Sandbox& sandbox) {
  for (auto& [name, rt] : runtimes) {
    if (rt.cache_code.empty()) continue;
    const std::string key = "runtimes." + name + ".cache.env";
    auto it = sandbox.env.find(rt.cache_env);
    if (it == sandbox.env.end()) return r.fail(key, "\"" + rt.cache_env + "\" is not set in sandbox.env");
    const std::string& dir = it->second;
    const std::string leaf = dir.rfind("/tmp/", 0) == 0 ? dir.substr(5) : "";
    if (leaf.empty() || leaf.size() > 64 || leaf[0] == '.' ||
        leaf.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") !=
            std::string::npos)
      return r.fail(
          key, "sandbox.env." + rt.cache_env + " is \"" + dir + "\"; a cache's directory must be /tmp/<plain name>");
  }
  return true;
}

bool parse_admission(Reader& r, const json& a, Admission& o) {
  return r.only_keys<Admission>(a, "admission", kAdmissionKeys) &&
         r.values<Admission>(a, "admission", kAdmissionKeys, o);
}

bool parse_retention(Reader& r, const json& a, Retention& o) {
  if (!r.only_keys<Retention>(a, "retention", kRetentionKeys) ||
      !r.values<Retention>(a, "retention", kRetentionKeys, o))
    return false;
  // A ceiling below the built-in default needs the default lowered too.
  if (o.tasks_ttl_s > o.tasks_ttl_max_s)
    return r.fail("retention.tasks_ttl_s",
                  "the default (" + std::to_string(o.tasks_ttl_s) + ") exceeds retention.tasks_ttl_max_s");
  return true;
}

bool parse_artifacts(Reader& r, const json& a, Artifacts& o) {
  if (!r.only_keys<Artifacts>(a, "artifacts", kArtifactsKeys) ||
      !r.values<Artifacts>(a, "artifacts", kArtifactsKeys, o))
    return false;
  if (a.contains("allowed_media_types")) {
    if (!r.string_list(a["allowed_media_types"], "artifacts.allowed_media_types", o.allowed_media_types, false))
      return false;
    for (auto& t : o.allowed_media_types) {
      if (t.find('/') == std::string::npos || t.find(' ') != std::string::npos)
        return r.fail("artifacts.allowed_media_types", "\"" + t + "\" is not a media type");
      // Workbooks carry formulas (and macros) the gate has no reader for:
      // refused rather than passed unchecked.
      for (const char* book : {"application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
                               "application/vnd.oasis.opendocument.spreadsheet", "application/vnd.ms-excel",
                               "application/vnd.ms-excel.sheet.macroenabled.12"})
        if (t == book)
          return r.fail("artifacts.allowed_media_types",
                        t + " (a workbook) cannot be allowed: the gate cannot check its formulas; export CSV instead");
    }
  }
  if (a.contains("csv_formulas")) {
    if (a["csv_formulas"] != "neutralise" && a["csv_formulas"] != "reject")
      return r.fail("artifacts.csv_formulas", "must be \"neutralise\" or \"reject\"");
    o.csv_reject = a["csv_formulas"] == "reject";
  }
  if (a.contains("active_content")) {
    if (a["active_content"] != "reject" && a["active_content"] != "text")
      return r.fail("artifacts.active_content", "must be \"reject\" or \"text\"");
    o.active_content_as_text = a["active_content"] == "text";
  }
  if (a.contains("pdf_active")) {
    if (a["pdf_active"] != "reject" && a["pdf_active"] != "strip")
      return r.fail("artifacts.pdf_active", "must be \"reject\" or \"strip\"");
    o.pdf_strip = a["pdf_active"] == "strip";
  }
  if (a.contains("allowed_extensions")) {
    const json& e = a["allowed_extensions"];
    if (!e.is_object())
      return r.fail("artifacts.allowed_extensions", "must be an object of media type -> list of extensions");
    for (auto& [type, list] : e.items()) {
      const std::string key = "artifacts.allowed_extensions." + type;
      std::vector<std::string> exts;
      if (!r.string_list(list, key, exts, false)) return false;
      for (auto& x : exts)
        if (auto why = extension_problem(x)) return r.fail(key, "\"" + x + "\" " + *why);
      o.allowed_extensions[type] = std::move(exts);
    }
  }
  return true;
}

// Every allowed type has extensions (the policy's, else the known ones); a
// list for a type that is not allowed is a mistake the operator should see.
bool complete_extensions(Reader& r, Artifacts& o) {
  for (auto& [type, _] : o.allowed_extensions)
    if (std::find(o.allowed_media_types.begin(), o.allowed_media_types.end(), type) == o.allowed_media_types.end())
      return r.fail("artifacts.allowed_extensions." + type, "not in artifacts.allowed_media_types");
  for (auto& type : o.allowed_media_types) {
    if (o.allowed_extensions.count(type)) continue;
    auto known = artifacts::names::default_extensions(type);
    if (known.empty())
      return r.fail("artifacts.allowed_media_types",
                    type + " has no known file extensions; list them in artifacts.allowed_extensions");
    o.allowed_extensions[type] = std::move(known);
  }
  return true;
}

bool parse_pool(Reader& r, const json& a, const std::map<std::string, Runtime>& runtimes, Pool& o) {
  if (!r.only_keys<Pool>(a, "pool", kPoolKeys) || !r.values<Pool>(a, "pool", kPoolKeys, o)) return false;
  if (a.contains("runtimes") && !r.string_list(a["runtimes"], "pool.runtimes", o.runtimes, false)) return false;
  for (auto& name : o.runtimes)
    if (!runtimes.count(name)) return r.fail("pool.runtimes", "\"" + name + "\" is not a runtime of this policy");
  if (a.contains("first_use") && !r.string_list(a["first_use"], "pool.first_use", o.first_use, false)) return false;
  for (auto& name : o.first_use)
    if (std::find(o.runtimes.begin(), o.runtimes.end(), name) == o.runtimes.end())
      return r.fail("pool.first_use", "\"" + name + "\" is not in pool.runtimes");
  if (a.contains("templates") && !r.string_list(a["templates"], "pool.templates", o.templates, false)) return false;
  for (auto& name : o.templates) {
    if (std::find(o.runtimes.begin(), o.runtimes.end(), name) == o.runtimes.end())
      return r.fail("pool.templates", "\"" + name + "\" is not in pool.runtimes");
    if (runtimes.at(name).loader != "python")
      return r.fail("pool.templates",
                    "\"" + name + "\" has no \"python\" loader: only a python runtime forks from a template");
  }
  return true;
}

// A field name (RFC 9110 5.1: a token), not one the proxy owns.
bool settable_header(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (unsigned char c : name)
    if (!(std::isalnum(c) || std::strchr("!#$%&'*+-.^_`|~", c))) return false;
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* owned : {"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer",
                            "keep-alive", "proxy-authorization", "proxy-connection", "expect"})
    if (lower == owned) return false;
  return true;
}

// profile.credentials[i] and profile.rules[i]: each host allowed by the profile.
bool parse_interception(Reader& r, const std::string& key, const json& v, NetworkProfile& p) {
  std::vector<network::AllowRule> allow;
  for (auto& e : p.allow) allow.push_back(*network::parse_allow(e));
  auto host_of = [&](const json& e, const std::string& at, uint16_t port, std::string& out) {
    if (!e.contains("host") || !e["host"].is_string()) return r.fail(at + ".host", "is required: a DNS name");
    out = e["host"].get<std::string>();
    auto a = network::parse_authority(out + ":" + std::to_string(port), std::nullopt);
    if (!a || a->literal || a->host != out)
      return r.fail(at + ".host", "\"" + out + "\" must be a DNS name in lower case without a trailing dot");
    if (!network::allows(allow, *a))
      return r.fail(at + ".host", "\"" + out + ":" + std::to_string(port) + "\" is not in " + key + ".allow");
    return true;
  };
  if (v.contains("credentials")) {
    const std::string at = key + ".credentials";
    if (!v["credentials"].is_array())
      return r.fail(at, "must be a list of {host, port, header, value_file, value_prefix}");
    for (size_t i = 0; i < v["credentials"].size(); ++i) {
      const json& e = v["credentials"][i];
      const std::string k = at + "[" + std::to_string(i) + "]";
      if (!e.is_object()) return r.fail(k, "must be an object");
      for (auto& [name, unused] : e.items())
        if (name != "host" && name != "port" && name != "header" && name != "value_file" && name != "value_prefix")
          return r.fail(k + "." + name, "unknown key");
      network::Credential c;
      if (e.contains("port")) {
        if (!e["port"].is_number_integer() || e["port"].get<int64_t>() < 1 || e["port"].get<int64_t>() > 65535)
          return r.fail(k + ".port", "must be a port, 1-65535");
        c.port = static_cast<uint16_t>(e["port"].get<int64_t>());
      }
      if (!host_of(e, k, c.port, c.host)) return false;
      if (!e.contains("header") || !e["header"].is_string() || !settable_header(e["header"].get<std::string>()))
        return r.fail(k + ".header",
                      "must be a header field name the proxy may set (not Host, Content-Length, "
                      "Transfer-Encoding, Connection or another it owns)");
      c.header = e["header"].get<std::string>();
      if (e.contains("value_prefix")) {
        if (!e["value_prefix"].is_string()) return r.fail(k + ".value_prefix", "must be a string");
        c.value_prefix = e["value_prefix"].get<std::string>();
        for (unsigned char ch : c.value_prefix)
          if (ch < 0x20 || ch == 0x7f) return r.fail(k + ".value_prefix", "must hold no control character");
      }
      if (!e.contains("value_file") || !e["value_file"].is_string())
        return r.fail(k + ".value_file", "is required: the file that holds the secret");
      c.value_file = e["value_file"].get<std::string>();
      auto secret = read_secret_file(c.value_file);
      if (!secret && r.secrets == Secrets::kRequired) return r.fail(k + ".value_file", secret.error().message);
      if (secret)
        c.value = c.value_prefix + *secret;
      else
        c.value_problem = secret.error().message;
      for (auto& other : p.credentials)
        if (other.host == c.host && other.port == c.port)
          return r.fail(k, "a second credential for " + c.host + ":" + std::to_string(c.port));
      p.credentials.push_back(std::move(c));
    }
  }
  if (v.contains("rules")) {
    const std::string at = key + ".rules";
    if (!v["rules"].is_array()) return r.fail(at, "must be a list of {host, methods, paths}");
    for (size_t i = 0; i < v["rules"].size(); ++i) {
      const json& e = v["rules"][i];
      const std::string k = at + "[" + std::to_string(i) + "]";
      if (!e.is_object()) return r.fail(k, "must be an object");
      for (auto& [name, unused] : e.items())
        if (name != "host" && name != "methods" && name != "paths") return r.fail(k + "." + name, "unknown key");
      network::RequestRule rule;
      // A rule's host on any port the profile allows it.
      if (!e.contains("host") || !e["host"].is_string()) return r.fail(k + ".host", "is required: a DNS name");
      rule.host = e["host"].get<std::string>();
      bool allowed = false;
      for (auto& a : allow) {
        auto auth = network::parse_authority(rule.host + ":" + std::to_string(a.port), std::nullopt);
        if (auth && !auth->literal && auth->host == rule.host && network::allows(allow, *auth)) allowed = true;
      }
      if (!allowed) return r.fail(k + ".host", "\"" + rule.host + "\" is not a host " + key + ".allow lists");
      for (auto& other : p.rules)
        if (other.host == rule.host) return r.fail(k, "a second rule for " + rule.host);
      if (!e.contains("methods") || !r.string_list(e["methods"], k + ".methods", rule.methods, false)) {
        if (r.error.empty()) r.fail(k + ".methods", "is required: a list of methods (\"GET\", \"POST\")");
        return false;
      }
      for (auto& m : rule.methods)
        if (m.empty() || m.size() > 16 || m.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ") != std::string::npos)
          return r.fail(k + ".methods", "\"" + m + "\" is not a method in upper case");
      if (!e.contains("paths") || !r.string_list(e["paths"], k + ".paths", rule.paths, false)) {
        if (r.error.empty()) r.fail(k + ".paths", "is required: a list of path prefixes (\"/v1/reports/\")");
        return false;
      }
      if (rule.paths.empty()) return r.fail(k + ".paths", "must list at least one prefix");
      for (auto& path : rule.paths)
        if (auto ok = network::check_prefix(path); !ok)
          return r.fail(k + ".paths", "\"" + path + "\": " + ok.error().message);
      p.rules.push_back(std::move(rule));
    }
  }
  return true;
}

bool parse_network(Reader& r, const json& n, Network& out) {
  if (!r.only_keys<Network>(n, "network", kNetworkKeys)) return false;
  if (n.contains("hosts")) {
    if (!n["hosts"].is_object()) return r.fail("network.hosts", "must be an object of name -> address");
    for (auto& [name, v] : n["hosts"].items()) {
      const std::string key = "network.hosts." + name;
      auto a = network::parse_authority(name + ":1", std::nullopt);
      if (!a || a->literal) return r.fail(key, "must be a DNS name" + (a ? std::string() : ": " + a.error().message));
      if (a->host != name)
        return r.fail(key, "must be written in lower case without a trailing dot (\"" + a->host + "\")");
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
      if (!r.only_keys<NetworkProfile>(v, key, kProfileKeys)) return false;
      if (!v.contains("allow"))
        return r.fail(key + ".allow", "is required: a list of \"host:port\" or \"*.suffix:port\"");
      if (!r.string_list(v["allow"], key + ".allow", p.allow, false)) return false;
      if (p.allow.empty()) return r.fail(key + ".allow", "must list at least one destination");
      if (v.contains("description")) {
        if (!v["description"].is_string()) return r.fail(key + ".description", "must be a string");
        p.description = v["description"].get<std::string>();
      }
      for (auto& entry : p.allow)
        if (auto rule = network::parse_allow(entry); !rule)
          return r.fail(key + ".allow", "\"" + entry + "\": " + rule.error().message);
      if (!parse_interception(r, key, v, p)) return false;
      if (!r.values<NetworkProfile>(v, key, kProfileKeys, p)) return false;
      out.profiles[name] = std::move(p);
    }
  }
  return true;
}

bool parse_workspaces(Reader& r, const json& w, Workspaces& o) {
  if (!r.only_keys<Workspaces>(w, "workspaces", kWorkspacesKeys) ||
      !r.values<Workspaces>(w, "workspaces", kWorkspacesKeys, o))
    return false;
  if (w.contains("ttl_s") && (!r.only_keys<Workspaces>(w["ttl_s"], "workspaces.ttl_s", kWorkspaceTtlKeys) ||
                              !r.values<Workspaces>(w["ttl_s"], "workspaces.ttl_s", kWorkspaceTtlKeys, o)))
    return false;
  if (o.ttl_s_default > o.ttl_s_max) return r.fail("workspaces.ttl_s.default", "exceeds workspaces.ttl_s.max");
  return true;
}

// The sections in the order their errors are reported: each may use those
// read before it (the message cap the limits, the caches the sandbox's
// environment, the pool the runtimes).
// A check's name: a plain identifier (it is a JSON enum value, a key of the
// result and a word of log lines).
bool is_check_name(const std::string& n) {
  if (n.empty() || n.size() > 64 || (n[0] >= '0' && n[0] <= '9')) return false;
  return n.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == std::string::npos;
}

bool parse_check(Reader& r, const std::string& name, const json& v, const Policy& p, Check& c) {
  const std::string key = "checks." + name;
  if (!is_check_name(name))
    return r.fail(key, "check names are plain identifiers: 1-64 letters, digits and '_', not starting with a digit");
  if (!r.only_keys<Check>(v, key, kCheckKeys)) return false;
  c.name = name;
  if (v.contains("description")) {
    if (!v["description"].is_string()) return r.fail(key + ".description", "must be a string");
    c.description = v["description"].get<std::string>();
  }
  if (!v.contains("runtime") || !v["runtime"].is_string())
    return r.fail(key + ".runtime", "is required: the runtime whose sandbox runs the check");
  c.runtime = v["runtime"].get<std::string>();
  auto rt = p.runtimes.find(c.runtime);
  if (rt == p.runtimes.end()) return r.fail(key + ".runtime", "\"" + c.runtime + "\" is not a runtime of the policy");
  if (!rt->second.available)
    return r.fail(key + ".runtime", "runtime \"" + c.runtime + "\" is not available on this host");
  const bool has_command = v.contains("command"), has_file = v.contains("code_file");
  if (has_command == has_file)
    return r.fail(key, has_command ? "has both \"command\" and \"code_file\": a check is one program"
                                   : "needs \"command\" (the program and its arguments) or \"code_file\" (a "
                                     "program its runtime runs)");
  if (has_command) {
    if (!r.string_list(v["command"], key + ".command", c.command, false)) return false;
    if (c.command.empty() || !is_canonical_absolute(c.command[0]))
      return r.fail(key + ".command", "must start with the program's canonical absolute path");
    if (::access(c.command[0].c_str(), X_OK) != 0)
      return r.fail(key + ".command", c.command[0] + " is not executable on this host");
  } else {
    if (!v["code_file"].is_string() || v["code_file"].get_ref<const std::string&>().empty())
      return r.fail(key + ".code_file", "must be a string: the program's path");
    c.code_file = v["code_file"].get<std::string>();
    // A relative path is the policy file's neighbour (an example ships both).
    if (c.code_file[0] != '/') {
      if (p.source.empty() || p.source[0] == '<')
        return r.fail(key + ".code_file", "must be an absolute path (this policy has no file to be relative to)");
      std::error_code ec;
      const auto dir = std::filesystem::absolute(std::filesystem::path(p.source).parent_path(), ec);
      if (ec) return r.fail(key + ".code_file", "the policy file's directory: " + ec.message());
      c.code_file = (dir / c.code_file).lexically_normal().string();
    }
    auto program = read_check_program(c.code_file, p.limits.code_max_bytes);
    if (!program) return r.fail(key + ".code_file", program.error().message);
  }
  return r.values<Check>(v, key, kCheckKeys, c);
}

bool parse_checks(Reader& r, const json& doc, Policy& p) {
  if (doc.contains("checks")) {
    const json& checks = doc["checks"];
    if (!checks.is_object()) return r.fail("checks", "must be an object of named checks");
    for (auto& [name, v] : checks.items()) {
      Check c;
      if (!parse_check(r, name, v, p, c)) return false;
      p.checks[name] = std::move(c);
    }
  }
  // Never a job without a check its runtime requires: each must exist.
  for (auto& [name, rt] : p.runtimes) {
    std::set<std::string> seen;
    for (const std::string& check : rt.required_checks) {
      const std::string key = "runtimes." + name + ".required_checks";
      if (!p.checks.count(check))
        return r.fail(key, "\"" + check + "\" is not a check of the policy (checks." + check + ")");
      if (!seen.insert(check).second) return r.fail(key, "\"" + check + "\" is listed twice");
    }
  }
  return true;
}

bool parse_policy(Reader& r, const json& doc, Policy& p) {
  if (!r.only_keys<Policy>(doc, "", kPolicyKeys)) return false;
  if (!doc.contains("version") || doc["version"] != 1) return r.fail("version", "must be 1");
  if (!parse_runtimes(r, doc, p.runtimes)) return false;
  if (doc.contains("limits") && !parse_limits(r, doc["limits"], p.limits)) return false;
  const bool message_cap_set =
      doc.contains("server") && doc["server"].is_object() && doc["server"].contains("message_max_bytes");
  if (doc.contains("server") && !parse_server(r, doc["server"], p.server)) return false;
  if (!fit_message_cap(r, message_cap_set, p.limits, p.server)) return false;
  if (!doc.contains("sandbox")) return r.fail("sandbox", "is required");
  if (!parse_sandbox(r, doc["sandbox"], p.sandbox)) return false;
  if (!check_runtime_caches(r, p.runtimes, p.sandbox)) return false;
  if (doc.contains("admission") && !parse_admission(r, doc["admission"], p.admission)) return false;
  if (doc.contains("retention") && !parse_retention(r, doc["retention"], p.retention)) return false;
  if (doc.contains("artifacts") && !parse_artifacts(r, doc["artifacts"], p.artifacts)) return false;
  if (!complete_extensions(r, p.artifacts)) return false;
  if (doc.contains("pool") && !parse_pool(r, doc["pool"], p.runtimes, p.pool)) return false;
  if (doc.contains("network") && !parse_network(r, doc["network"], p.network)) return false;
  if (doc.contains("workspaces") && !parse_workspaces(r, doc["workspaces"], p.workspaces)) return false;
  if (!parse_checks(r, doc, p)) return false;
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

const Check* Policy::find_check(const std::string& name) const {
  auto it = checks.find(name);
  return it == checks.end() ? nullptr : &it->second;
}

util::Result<std::string> read_secret_file(const std::string& path) {
  auto bad = [&](const std::string& why) { return make_error(util::ErrorCode::kPolicy, path + ": " + why); };
  if (!is_canonical_absolute(path)) return bad("must be a canonical absolute path");
  const uid_t me = ::geteuid();
  util::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd.valid()) return bad(errno == ENOENT ? "is missing" : util::call_error("open", path, errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return bad(util::call_error("fstat", path, errno));
  if (!S_ISREG(st.st_mode)) return bad("is not a regular file (a link is not followed)");
  if (st.st_uid != 0 && st.st_uid != me)
    return bad("belongs to uid " + std::to_string(st.st_uid) + "; only root or the server's user may own a secret");
  if (st.st_mode & (S_IRWXO | S_IWGRP))
    return bad("may be read or changed by others (mode " + std::to_string((st.st_mode >> 6) & 7) +
               std::to_string((st.st_mode >> 3) & 7) + std::to_string(st.st_mode & 7) + "): chmod o-rwx,g-w");
  if (st.st_size > static_cast<off_t>(kSecretMaxBytes)) return bad("is over 8 KiB");
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return bad(n < 0 ? util::call_error("read", path, errno) : "changed while read");
    got += static_cast<size_t>(n);
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (!text.empty() && text.back() == '\r') text.pop_back();
  if (text.empty()) return bad("is empty");
  for (unsigned char c : text)
    if (c < 0x20 || c == 0x7f) return bad("holds a control character or a second line (one line, the value)");
  return text;
}

util::Result<std::string> read_check_program(const std::string& path, uint64_t max_bytes) {
  auto bad = [&](const std::string& why) { return make_error(util::ErrorCode::kPolicy, path + ": " + why); };
  if (!is_canonical_absolute(path)) return bad("must be a canonical absolute path");
  const uid_t me = ::geteuid();
  auto trusted = [&](uid_t owner) { return owner == 0 || owner == me; };
  const std::string owners = me == 0 ? "root" : "root or uid " + std::to_string(me) + " (the server's user)";
  // Every directory above it, from /: another user who could change one
  // could put another program in its place.
  for (size_t end = 0; end != std::string::npos;) {
    const std::string dir = end == 0 ? "/" : path.substr(0, end);
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0) return bad(util::call_error("lstat", dir, errno));
    if (!S_ISDIR(st.st_mode)) return bad(dir + " is not a directory (a link is not followed)");
    if (!trusted(st.st_uid))
      return bad("directory " + dir + " belongs to uid " + std::to_string(st.st_uid) + "; only " + owners +
                 " may own the directories of a check");
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
      return bad("directory " + dir + " is writable by its group or by others (chmod go-w)");
    end = path.find('/', end + 1);
  }
  util::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid())
    return bad(errno == ELOOP ? "is a symbolic link (name the file itself)" : util::call_error("open", path, errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return bad(util::call_error("fstat", path, errno));
  if (!S_ISREG(st.st_mode)) return bad("is not a regular file");
  if (!trusted(st.st_uid))
    return bad("belongs to uid " + std::to_string(st.st_uid) + "; a check's program must belong to " + owners);
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return bad("is writable by its group or by others (chmod go-w)");
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    return bad("is larger than " + std::to_string(max_bytes) + " bytes (limits.code_max_bytes)");
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return bad(util::call_error("read", path, errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  return text;
}

std::vector<std::string> Policy::available_runtimes() const {
  std::vector<std::string> names;
  for (auto& [name, rt] : runtimes)
    if (rt.available) names.push_back(name);
  return names;
}

util::Result<Policy> parse(const json& doc, const std::string& source, Secrets secrets) {
  Reader r;
  r.secrets = secrets;
  Policy p;
  p.source = source;
  if (!parse_policy(r, doc, p)) return make_error(util::ErrorCode::kPolicy, source + ": " + r.error);
  p.sha256 = util::sha256_hex(effective_json(p).dump());
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

util::Result<Policy> load_file(const std::string& path, Secrets secrets) {
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
  return parse(doc, path, secrets);
}

namespace {
json network_json(const Network& n) {
  json profiles = json::object();
  for (auto& [name, p] : n.profiles) {
    json credentials = json::array(), rules = json::array();
    for (auto& c : p.credentials)  // never the value
      credentials.push_back({{"host", c.host},
                             {"port", c.port},
                             {"header", c.header},
                             {"value_file", c.value_file},
                             {"value_prefix", c.value_prefix}});
    for (auto& rule : p.rules) rules.push_back({{"host", rule.host}, {"methods", rule.methods}, {"paths", rule.paths}});
    profiles[name] = {
        {"description", p.description},         {"credentials", credentials}, {"rules", rules}, {"allow", p.allow},
        {"max_connections", p.max_connections}, {"max_bytes", p.max_bytes}};
  }
  return {{"profiles", profiles}, {"hosts", n.hosts}, {"allow_private", n.allow_private}};
}
}  // namespace

nlohmann::json effective_json(const Policy& p) {
  json runtimes = json::object();
  for (auto& [name, rt] : p.runtimes)
    runtimes[name] = {{"description", rt.description},
                      {"command", rt.command},
                      {"code_file", rt.code_file},
                      {"optional", rt.optional},
                      {"loader", rt.loader}};
  for (auto& [name, rt] : p.runtimes) {
    runtimes[name]["preload"] = rt.preload;
    runtimes[name]["warmup"] = rt.warmup;
    runtimes[name]["required_checks"] = rt.required_checks;
    if (!rt.cache_code.empty()) runtimes[name]["cache"] = {{"code", rt.cache_code}, {"env", rt.cache_env}};
    if (!rt.image_digest.empty()) runtimes[name]["image"] = {{"layout", rt.image_layout}, {"digest", rt.image_digest}};
  }
  json checks = json::object();
  for (auto& [name, c] : p.checks) {
    checks[name] = {{"description", c.description},
                    {"runtime", c.runtime},
                    {"timeout_s", c.timeout_s},
                    {"max_output_bytes", c.max_output_bytes}};
    if (c.command.empty())
      checks[name]["code_file"] = c.code_file;
    else
      checks[name]["command"] = c.command;
  }
  const Limits& l = p.limits;
  const Sandbox& s = p.sandbox;
  return {
      {"version", 1},
      {"runtimes", runtimes},
      {"limits",
       {{"timeout_s", {{"default", l.timeout_s_default}, {"max", l.timeout_s_max}}},
        {"stdout_max_bytes", l.stdout_max_bytes},
        {"stderr_max_bytes", l.stderr_max_bytes},
        {"code_max_bytes", l.code_max_bytes},
        {"input_max_bytes", l.input_max_bytes},
        {"inputs_per_job_max", l.inputs_per_job_max},
        {"work_max_bytes", l.work_max_bytes},
        {"tmp_max_bytes", l.tmp_max_bytes},
        {"outputs_max_bytes", l.outputs_max_bytes},
        {"outputs_max_files", l.outputs_max_files},
        {"artifact_inline_max_bytes", l.artifact_inline_max_bytes},
        {"memory_max_bytes", l.memory_max_bytes},
        {"pids_max", l.pids_max},
        {"nofile_max", l.nofile_max},
        {"cpu_max_cores", l.cpu_max_cores}}},
      {"server",
       {{"message_max_bytes", p.server.message_max_bytes},
        // As unsigned, the type the loader asks for (parse(effective_json(p)) must load).
        {"json_max_depth", static_cast<uint64_t>(p.server.json_max_depth)},
        {"concurrent_calls_max", static_cast<uint64_t>(p.server.concurrent_calls_max)},
        {"http_connections_per_address_max", p.server.http_connections_per_address_max},
        {"database", p.server.database},
        {"store", p.server.store}}},
      {"admission",
       {{"jobs_running_max", p.admission.jobs_running_max},
        {"jobs_running_per_tenant_max", p.admission.jobs_running_per_tenant_max},
        {"jobs_queued_max", p.admission.jobs_queued_max},
        {"cpu_seconds_per_tenant_per_hour", p.admission.cpu_seconds_per_tenant_per_hour},
        {"tasks_per_tenant_max", p.admission.tasks_per_tenant_max},
        {"store_bytes_per_tenant_max", p.admission.store_bytes_per_tenant_max},
        {"store_files_per_tenant_max", p.admission.store_files_per_tenant_max}}},
      {"retention",
       {{"inputs_ttl_s", p.retention.inputs_ttl_s},
        {"artifacts_ttl_s", p.retention.artifacts_ttl_s},
        {"jobs_ttl_s", p.retention.jobs_ttl_s},
        {"jobs_per_tenant_max", p.retention.jobs_per_tenant_max},
        {"janitor_interval_s", p.retention.janitor_interval_s},
        {"tasks_ttl_s", p.retention.tasks_ttl_s},
        {"tasks_ttl_max_s", p.retention.tasks_ttl_max_s}}},
      {"pool",
       {{"enabled", p.pool.enabled},
        {"runtimes", p.pool.runtimes},
        {"size", p.pool.size},
        {"idle_memory_max_bytes", p.pool.idle_memory_max_bytes},
        {"claim_wait_ms", p.pool.claim_wait_ms},
        {"first_use", p.pool.first_use},
        {"templates", p.pool.templates},
        {"template_forks_max", p.pool.template_forks_max},
        {"template_age_max_s", p.pool.template_age_max_s}}},
      {"artifacts",
       {{"allowed_media_types", p.artifacts.allowed_media_types},
        {"file_max_bytes", p.artifacts.file_max_bytes},
        {"csv_formulas", p.artifacts.csv_reject ? "reject" : "neutralise"},
        {"active_content", p.artifacts.active_content_as_text ? "text" : "reject"},
        {"allowed_extensions", p.artifacts.allowed_extensions},
        {"image_pixels_max", p.artifacts.image_pixels_max},
        {"pdf_active", p.artifacts.pdf_strip ? "strip" : "reject"}}},
      {"network", network_json(p.network)},
      {"checks", checks},
      {"workspaces",
       {{"ttl_s", {{"default", p.workspaces.ttl_s_default}, {"max", p.workspaces.ttl_s_max}}},
        {"per_tenant_max", p.workspaces.per_tenant_max},
        {"size_max_bytes", p.workspaces.size_max_bytes}}},
      {"sandbox",
       {{"uid_range", {{"first", s.uid_first}, {"count", s.uid_count}}},
        {"require", {{"landlock", s.require_landlock}, {"cgroups", s.require_cgroups}}},
        {"readonly_paths", s.readonly_paths},
        {"env", s.env}}},
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
