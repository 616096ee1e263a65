// throwbox receipt: print the server's public key, verify a receipt, replay one.
#include "server/receipt_cli.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <iostream>
#include <map>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "server/broker/jobs.h"
#include "server/broker/receipts.h"
#include "server/policy/live.h"
#include "server/policy/policy.h"
#include "server/sandbox/cgroup_host.h"
#include "server/sandbox/cgroups.h"
#include "server/store/store.h"
#include "server/util/fs.h"
#include "server/util/signing.h"

namespace receipt_cli {
namespace {

using nlohmann::json;

constexpr size_t kReceiptFileMax = 64ull << 20;
constexpr size_t kCodeFileMax = 16ull << 20;
constexpr size_t kInputFileMax = 1ull << 30;

struct Args {
  std::vector<std::string> files;
  std::map<std::string, std::string> options;  // --name -> value
  bool json_output = false;
};

Args parse(const std::vector<std::string>& args, size_t from, const std::vector<std::string>& known) {
  Args out;
  for (size_t i = from; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--json") {
      out.json_output = true;
    } else if (a.size() > 2 && a.compare(0, 2, "--") == 0) {
      bool ok = false;
      for (auto& k : known) ok = ok || k == a;
      if (!ok) throw std::invalid_argument("receipt " + args[0] + ": unknown option " + a);
      if (i + 1 >= args.size()) throw std::invalid_argument("receipt " + args[0] + ": " + a + " needs a value");
      out.options[a] = args[++i];
    } else {
      out.files.push_back(a);
    }
  }
  return out;
}

std::string read_or_throw(const std::string& path, size_t max, const char* what) {
  auto text = util::read_file(path, max);
  if (!text) throw std::runtime_error(std::string(what) + " " + path + ": " + text.error().message);
  return *text;
}

// The receipt in FILE ("-": stdin): the receipt object, or a whole result
// that holds one under "receipt".
json read_receipt(const std::string& path) {
  std::string text;
  if (path == "-") {
    char buf[65536];
    for (;;) {
      const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw std::runtime_error(std::string("receipt: stdin: ") + std::strerror(errno));
      if (n == 0) break;
      text.append(buf, static_cast<size_t>(n));
      if (text.size() > kReceiptFileMax) throw std::runtime_error("receipt: stdin: more than 64 MiB");
    }
  } else {
    text = read_or_throw(path, kReceiptFileMax, "receipt");
  }
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded()) throw std::runtime_error("receipt " + path + ": not valid JSON");
  if (doc.is_object() && !doc.contains("statement") && doc.contains("receipt")) doc = doc["receipt"];
  if (!doc.is_object()) throw std::runtime_error("receipt " + path + ": not a receipt (a JSON object)");
  return doc;
}

// The key to verify with: --key FILE (a public key PEM), else the server's
// own in --state-dir (or the default state directory).
std::optional<util::VerifyKey> verify_key(const Args& a, const std::string& default_state_dir, bool required,
                                          std::string& why_not) {
  if (auto it = a.options.find("--key"); it != a.options.end()) {
    auto key = util::VerifyKey::from_pem(read_or_throw(it->second, 64 * 1024, "key"));
    if (!key) throw std::runtime_error("key " + it->second + ": " + key.error().message);
    return *key;
  }
  auto it = a.options.find("--state-dir");
  const std::string dir = it != a.options.end() ? it->second : default_state_dir;
  auto signer = util::SigningKey::load(dir + "/" + broker::kReceiptKeyFile);
  if (!signer) {
    why_not = signer.error().message;
    if (signer.error().code == util::ErrorCode::kNotFound)
      why_not = "no receipt key in " + dir + " (the server makes one when it first starts; pass --key FILE)";
    if (required) throw std::runtime_error(why_not);
    return std::nullopt;
  }
  auto key = util::VerifyKey::from_pem(signer->public_pem());
  if (!key) throw std::runtime_error(key.error().message);
  return *key;
}

int key_command(const std::vector<std::string>& args, const std::string& default_state_dir) {
  Args a = parse(args, 1, {"--state-dir"});
  if (!a.files.empty()) throw std::invalid_argument("receipt key: unexpected argument \"" + a.files[0] + "\"");
  auto it = a.options.find("--state-dir");
  const std::string dir = it != a.options.end() ? it->second : default_state_dir;
  auto signer = util::SigningKey::load(dir + "/" + broker::kReceiptKeyFile);
  if (!signer) {
    if (signer.error().code == util::ErrorCode::kNotFound)
      throw std::runtime_error("no receipt key in " + dir + ": the server makes one when it first starts");
    throw std::runtime_error(signer.error().message);
  }
  if (a.json_output)
    std::cout << broker::ReceiptSigner(*signer).public_key_json().dump(2) << "\n";
  else
    std::cout << signer->public_pem();
  return 0;
}

int verify_command(const std::vector<std::string>& args, const std::string& default_state_dir) {
  Args a = parse(args, 1, {"--key", "--state-dir"});
  if (a.files.size() != 1) throw std::invalid_argument("receipt verify: give one FILE (the receipt as JSON; -: stdin)");
  json receipt = read_receipt(a.files[0]);
  std::string why_not;
  auto key = verify_key(a, default_state_dir, true, why_not);
  auto statement = broker::verify_receipt(receipt, *key);
  if (!statement) {
    std::cout << "invalid: " << statement.error().message << "\n";
    return 1;
  }
  std::cout << "valid: job " << statement->value("job_id", "?") << ", status " << statement->value("status", "?")
            << ", signed by key " << key->key_id() << " (Ed25519)\n";
  return 0;
}

struct Compared {
  std::string field;
  json receipt, replay;
  bool match() const { return receipt == replay; }
};

// The statements' digests and verdicts, side by side.
std::vector<Compared> compare(const json& a, const json& b) {
  std::vector<Compared> out;
  auto at = [](const json& s, const std::string& ptr) {
    json::json_pointer p(ptr);
    return s.contains(p) ? s[p] : json(nullptr);
  };
  for (const char* f : {"/runtime/fingerprint", "/code_sha256", "/policy_sha256", "/boundary/layers", "/limits",
                        "/status", "/exit_code", "/stdout_sha256", "/stderr_sha256"})
    out.push_back({std::string(f).substr(1), at(a, f), at(b, f)});
  auto by_name = [](const json& s, const char* list) {
    std::map<std::string, json> m;
    if (s.contains(list) && s[list].is_array())
      for (auto& e : s[list])
        if (e.is_object() && e.contains("name") && e["name"].is_string()) m[e["name"].get<std::string>()] = e;
    return m;
  };
  for (const char* list : {"inputs", "artifacts", "checks"}) {
    auto ma = by_name(a, list), mb = by_name(b, list);
    std::map<std::string, bool> names;
    for (auto& [n, e] : ma) names[n] = true;
    for (auto& [n, e] : mb) names[n] = true;
    for (auto& [n, unused] : names) {
      const json ea = ma.count(n) ? ma[n] : json(nullptr), eb = mb.count(n) ? mb[n] : json(nullptr);
      out.push_back({std::string(list) + "/" + n + "/sha256", ea.is_null() ? json(nullptr) : ea.value("sha256", json()),
                     eb.is_null() ? json(nullptr) : eb.value("sha256", json())});
      if (std::string(list) != "inputs")
        out.push_back({std::string(list) + "/" + n + "/verdict",
                       ea.is_null() ? json(nullptr) : ea.value("verdict", json()),
                       eb.is_null() ? json(nullptr) : eb.value("verdict", json())});
    }
  }
  return out;
}

// An input's name as a path beneath DIR: relative, no "." or ".." parts.
bool safe_relative(const std::string& name) {
  if (name.empty() || name[0] == '/') return false;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    const std::string part = name.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

int replay_command(const std::vector<std::string>& args, const std::string& default_state_dir,
                   const std::string& default_policy, const std::function<std::string()>& runner_exe) {
  Args a = parse(args, 1, {"--inputs", "--code", "--policy", "--key", "--state-dir"});
  if (a.files.size() != 1 || !a.options.count("--code"))
    throw std::invalid_argument(
        "receipt replay: give FILE (the receipt) and --code FILE (and --inputs DIR when the job had inputs)");
  json receipt = read_receipt(a.files[0]);
  if (!receipt.contains("statement") || !receipt["statement"].is_object())
    throw std::runtime_error("receipt " + a.files[0] + ": no statement");
  const json& stated = receipt["statement"];
  std::string why_not, signature = "not checked: ";
  if (auto key = verify_key(a, default_state_dir, false, why_not)) {
    auto ok = broker::verify_receipt(receipt, *key);
    if (!ok) {
      std::cout << "invalid: " << ok.error().message << "\n";
      return 1;
    }
    signature = "valid (key " + key->key_id() + ")";
  } else {
    signature += why_not;
  }
  const std::string runtime = stated.value("runtime", json::object()).value("name", "");
  const std::string policy_path = a.options.count("--policy") ? a.options["--policy"] : default_policy;
  auto pol = policy::load_file(policy_path);
  if (!pol) throw std::runtime_error(pol.error().message);
  if (!pol->find_runtime(runtime) || !pol->find_runtime(runtime)->available)
    throw std::runtime_error("the receipt's runtime \"" + runtime + "\" is not available under " + policy_path);

  broker::JobRequest req;
  req.tenant = "replay";
  req.runtime = runtime;
  req.code = read_or_throw(a.options["--code"], kCodeFileMax, "code");
  const json limits = stated.value("limits", json::object());
  if (limits.contains("timeout_ms") && limits["timeout_ms"].is_number_unsigned())
    req.timeout_s = static_cast<double>(limits["timeout_ms"].get<uint64_t>()) / 1000.0;
  const json boundary = stated.value("boundary", json::object());
  if (boundary.contains("network") && boundary["network"].is_string()) {
    req.network = boundary["network"].get<std::string>();
    if (!pol->network.profiles.count(req.network))
      throw std::runtime_error("the receipt's job used network profile \"" + req.network + "\", which " + policy_path +
                               " lacks");
  }
  for (auto& c : stated.value("checks", json::array()))
    if (c.is_object() && c.value("name", "") != "" && pol->find_check(c.value("name", "")))
      req.checks.push_back(c["name"]);

  auto tree = sandbox::cgroup_host::ServerTree::set_up();
  const std::string state = default_state_dir + "/replay-" + std::to_string(::getpid());
  if (auto s = util::make_dirs(state, 0700); !s) throw std::runtime_error(s.error().message);
  struct Remove {
    std::string dir;
    ~Remove() { (void)util::remove_tree(dir); }
  } remove{state};
  json replayed;
  std::string replay_status;
  {
    store::Store store(state);
    policy::Live live(std::make_shared<const policy::Policy>(std::move(*pol)));
    broker::Jobs jobs(live, store, runner_exe(), sandbox::cgroups::to_json(tree->host()));
    jobs.start_pool();
    for (auto& in : stated.value("inputs", json::array())) {
      const std::string name = in.is_object() ? in.value("name", "") : "";
      if (!safe_relative(name))
        throw std::runtime_error("the receipt names an input \"" + name + "\" that is not a relative path");
      if (!a.options.count("--inputs"))
        throw std::runtime_error("the receipt's job had inputs: give --inputs DIR holding " + name);
      const std::string path = a.options["--inputs"] + "/" + name;
      const std::string content = read_or_throw(path, kInputFileMax, "input");
      auto rec = store.put_input(req.tenant, name, content, jobs.upload_media_type(name, content));
      if (!rec) throw std::runtime_error("input " + path + ": " + rec.error().message);
      req.input_ids.push_back(rec->input_id);
    }
    auto r = jobs.run(req);
    if (!r) throw std::runtime_error("replay: " + r.error().message);
    if (!r->receipt.is_object()) throw std::runtime_error("replay: the job ended without a receipt");
    replayed = r->receipt["statement"];
    replay_status = sandbox::to_string(r->outcome.status);
  }
  const std::vector<Compared> rows = compare(stated, replayed);
  size_t differ = 0;
  for (auto& r : rows) differ += r.match() ? 0 : 1;
  if (a.json_output) {
    json fields = json::array();
    for (auto& r : rows)
      fields.push_back({{"field", r.field}, {"receipt", r.receipt}, {"replay", r.replay}, {"match", r.match()}});
    std::cout << json{{"signature", signature},
                      {"receipt_job_id", stated.value("job_id", "")},
                      {"replay_job_id", replayed.value("job_id", "")},
                      {"fields", fields},
                      {"differ", differ}}
                     .dump(2)
              << "\n";
  } else {
    std::cout << "receipt: job " << stated.value("job_id", "?") << ", signature " << signature << "\n"
              << "replay:  job " << replayed.value("job_id", "?") << ", status " << replay_status << "\n";
    for (auto& r : rows) {
      std::cout << (r.match() ? "match    " : "differs  ") << r.field;
      if (!r.match()) std::cout << ": receipt " << r.receipt.dump() << ", replay " << r.replay.dump();
      std::cout << "\n";
    }
    std::cout << differ << " of " << rows.size() << " differ\n";
  }
  return differ == 0 ? 0 : 1;
}

}  // namespace

int run(const std::vector<std::string>& args, const std::string& default_state_dir, const std::string& default_policy,
        const std::function<std::string()>& runner_exe) {
  if (args.empty()) throw std::invalid_argument("receipt: missing subcommand (key, verify or replay)");
  if (args[0] == "key") return key_command(args, default_state_dir);
  if (args[0] == "verify") return verify_command(args, default_state_dir);
  if (args[0] == "replay") return replay_command(args, default_state_dir, default_policy, runner_exe);
  throw std::invalid_argument("receipt: unknown subcommand \"" + args[0] + "\" (key, verify or replay)");
}

}  // namespace receipt_cli
