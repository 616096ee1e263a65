// Receipt statements, their signing and their verification.
#include "server/broker/receipts.h"

#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <set>

#include "server/artifacts/gate.h"
#include "server/util/base64.h"
#include "server/util/crypto.h"
#include "server/util/fs.h"
#include "server/util/wall_clock.h"

namespace broker {
namespace {

using nlohmann::json;

constexpr const char* kDpkgStatus = "/var/lib/dpkg/status";
constexpr size_t kDpkgStatusMax = 256ull << 20;

// What says a file changed: its identity, size and times; "absent" when it is not there.
std::string stamp_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "absent";
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
         std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ":" +
         std::to_string(st.st_ctim.tv_sec) + "." + std::to_string(st.st_ctim.tv_nsec);
}

std::string resolved(const std::string& path) {
  char real[PATH_MAX];
  return ::realpath(path.c_str(), real) ? std::string(real) : path;
}

// sha256 of "<package>:<arch>=<version>\n" for each installed package, sorted;
// "" when there is no dpkg database.
std::string read_packages_sha256() {
  auto text = util::read_file(kDpkgStatus, kDpkgStatusMax);
  if (!text) return "";
  std::set<std::string> lines;
  std::string package, version, arch, status;
  auto flush = [&] {
    if (!package.empty() && status.size() >= 10 && status.compare(status.size() - 10, 10, " installed") == 0)
      lines.insert(package + ":" + arch + "=" + version);
    package.clear();
    version.clear();
    arch.clear();
    status.clear();
  };
  std::string_view rest = *text;
  while (!rest.empty()) {
    const size_t eol = rest.find('\n');
    const std::string line(rest.substr(0, eol));
    rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
    if (line.empty()) {
      flush();
      continue;
    }
    auto field = [&](const char* name, std::string& into) {
      const size_t n = std::char_traits<char>::length(name);
      if (line.compare(0, n, name) == 0) into = line.substr(n);
    };
    field("Package: ", package);
    field("Version: ", version);
    field("Architecture: ", arch);
    field("Status: ", status);
  }
  flush();
  std::string all;
  for (auto& l : lines) all += l + "\n";
  return util::sha256_hex(all);
}

}  // namespace

std::string canonical_statement(const json& statement) {
  return statement.dump(-1, ' ', true, json::error_handler_t::replace);
}

std::string RuntimeFingerprints::packages_sha256() {
  const std::string stamp = stamp_of(kDpkgStatus);
  {
    std::lock_guard lock(mu_);
    if (stamp == packages_stamp_) return packages_sha256_;
  }
  std::string digest = read_packages_sha256();
  std::lock_guard lock(mu_);
  packages_stamp_ = stamp;
  packages_sha256_ = digest;
  return digest;
}

json RuntimeFingerprints::of(const policy::Runtime& rt) {
  if (!rt.image_digest.empty()) {
    // An image runtime is its image: the digest names every file of it.
    json fp{{"command", rt.command}, {"image", rt.image_digest}};
    json out = fp;
    out["fingerprint"] = util::sha256_hex(canonical_statement(fp));
    out["name"] = rt.name;
    return out;
  }
  const std::string command0 = rt.command.empty() ? std::string() : rt.command[0];
  // stat follows links: a link moved to another file is another stamp.
  const std::string stamp = stamp_of(command0) + "|" + stamp_of(kDpkgStatus);
  json out;
  {
    std::lock_guard lock(mu_);
    auto it = by_command0_.find(command0);
    if (it != by_command0_.end() && it->second.stamp == stamp && it->second.command == rt.command)
      out = it->second.fingerprint;
  }
  if (out.is_null()) {
    // Outside the lock: reading the interpreter takes milliseconds.
    const std::string interpreter = resolved(command0);
    std::string interpreter_sha256;
    if (auto digest = util::sha256_file_hex(interpreter)) interpreter_sha256 = *digest;
    json fp{{"command", rt.command},
            {"interpreter", interpreter},
            {"interpreter_sha256", interpreter_sha256},
            {"packages_sha256", packages_sha256()}};
    out = fp;
    out["fingerprint"] = util::sha256_hex(canonical_statement(fp));
    std::lock_guard lock(mu_);
    by_command0_[command0] = Entry{stamp, rt.command, out};
  }
  out["name"] = rt.name;
  return out;
}

json receipt_statement(const ReceiptFacts& f) {
  // Member by member: an initializer list copies every nested value.
  const JobResult& r = *f.result;
  const sandbox::Outcome& o = r.outcome;
  json s = json::object();
  s["format"] = kReceiptFormat;
  s["job_id"] = r.job_id;
  s["tenant_digest"] = f.tenant_digest;
  s["runtime"] = f.runtime;
  s["code_sha256"] = f.code_sha256;
  json& inputs = s["inputs"] = json::array();
  for (auto& in : f.inputs) {
    json& e = inputs.emplace_back(json::object());
    e["name"] = in.name;
    e["sha256"] = in.sha256;
  }
  s["policy_sha256"] = f.policy_sha256;
  json& boundary = s["boundary"] = json::object();
  boundary["layers"] = o.layers;
  boundary["network"] = f.network.empty() ? json(nullptr) : json(f.network);
  boundary["workspace"] = f.workspace;
  json& limits = s["limits"] = json::object();
  if (f.spec) {
    const sandbox::LaunchSpec& l = *f.spec;
    limits["timeout_ms"] = l.timeout_ms;
    limits["memory_max_bytes"] = l.memory_max_bytes;
    limits["pids_max"] = l.pids_max;
    limits["nofile_max"] = l.nofile_max;
    limits["cpu_max_millicores"] = static_cast<uint64_t>(std::llround(l.cpu_max_cores * 1000));
    limits["work_max_bytes"] = l.work_max_bytes;
    limits["tmp_max_bytes"] = l.tmp_max_bytes;
    limits["outputs_max_bytes"] = l.outputs_max_bytes;
    limits["outputs_max_files"] = l.outputs_max_files;
    limits["artifact_max_bytes"] = l.artifact_max_bytes;
    limits["stdout_max_bytes"] = l.stdout_max_bytes;
    limits["stderr_max_bytes"] = l.stderr_max_bytes;
  }
  s["status"] = sandbox::to_string(o.status);
  s["exit_code"] = o.exited ? json(o.exit_code) : json(nullptr);
  s["signal"] = o.signal ? json(o.signal) : json(nullptr);
  s["timed_out"] = o.timed_out;
  s["stdout_sha256"] = util::sha256_hex(o.stdout_text);
  s["stderr_sha256"] = util::sha256_hex(o.stderr_text);
  s["stdout_truncated"] = o.stdout_truncated;
  s["stderr_truncated"] = o.stderr_truncated;
  json& artifacts = s["artifacts"] = json::array();
  for (auto& a : r.artifacts) {
    json& e = artifacts.emplace_back(json::object());
    e["name"] = a.name;
    e["sha256"] = a.sha256;
    e["verdict"] = artifacts::to_string(a.verdict);
  }
  json& checks = s["checks"] = json::array();
  for (auto& c : r.checks) {
    json& e = checks.emplace_back(json::object());
    e["name"] = c.name;
    e["sha256"] = c.sha256;
    e["verdict"] = c.verdict;
  }
  s["started_at"] = util::iso8601(f.started_ms);
  s["ended_at"] = util::iso8601(f.ended_ms);
  return s;
}

ReceiptSigner::ReceiptSigner(util::SigningKey key) : key_(std::move(key)), key_id_(key_.key_id()) {}

util::Result<ReceiptSigner> ReceiptSigner::open(const std::string& state_dir) {
  auto key = util::SigningKey::load_or_create(state_dir + "/" + kReceiptKeyFile);
  if (!key) return key.error();
  return ReceiptSigner(std::move(*key));
}

json ReceiptSigner::sign(json statement) const {
  std::string signature = util::base64_encode(key_.sign(canonical_statement(statement)));
  json out = json::object();
  out["statement"] = std::move(statement);
  out["alg"] = "Ed25519";
  out["key_id"] = key_id_;
  out["signature"] = std::move(signature);
  return out;
}

std::string ReceiptSigner::tenant_digest(const std::string& tenant) const {
  return key_.keyed_digest("throwbox tenant digest", tenant);
}

json ReceiptSigner::public_key_json() const {
  return {{"alg", "Ed25519"}, {"key_id", key_id_}, {"public_key_pem", key_.public_pem()}};
}

util::Result<json> verify_receipt(const json& receipt, const util::VerifyKey& key) {
  auto bad = [](const std::string& why) { return util::make_error(util::ErrorCode::kInvalidArgument, why); };
  if (!receipt.is_object()) return bad("a receipt is a JSON object");
  for (auto& [name, value] : receipt.items())
    if (name != "statement" && name != "alg" && name != "key_id" && name != "signature")
      return bad("unknown field \"" + name + "\" (a receipt has statement, alg, key_id and signature)");
  for (const char* name : {"statement", "alg", "key_id", "signature"})
    if (!receipt.contains(name)) return bad(std::string("no \"") + name + "\" field");
  if (!receipt["statement"].is_object()) return bad("statement: not an object");
  if (receipt["alg"] != "Ed25519") return bad("alg: not Ed25519");
  if (!receipt["key_id"].is_string() || !receipt["signature"].is_string())
    return bad("key_id and signature are strings");
  const std::string key_id = receipt["key_id"].get<std::string>();
  if (key_id != key.key_id())
    return bad("signed by another key (key_id " + key_id + ", this key is " + key.key_id() + ")");
  auto sig = util::base64_decode(receipt["signature"].get<std::string>());
  if (!sig) return bad("signature: not base64");
  if (!key.verify(canonical_statement(receipt["statement"]), *sig))
    return bad("the signature does not match the statement: the receipt was changed after it was signed");
  if (receipt["statement"].value("format", "") != kReceiptFormat)
    return bad(std::string("statement.format: not ") + kReceiptFormat);
  return receipt["statement"];
}

}  // namespace broker
