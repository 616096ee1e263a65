// Acceptance checks: which run, what they see, their verdicts (checks.h).
#include "server/broker/checks.h"

#include <set>

#include "server/util/crypto.h"
#include "server/util/text.h"

namespace broker {
namespace {

using nlohmann::json;

// Evidence is a sentence or a short report, never a dump: a check that
// prints more is cut here, and says so.
constexpr size_t kEvidenceMaxBytes = 4096;

std::string bounded(const std::string& text, size_t max_bytes) {
  std::string valid = util::to_valid_utf8(text);
  if (valid.size() <= max_bytes) return valid;
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(valid[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  return valid.substr(0, cut) + " [cut at " + std::to_string(max_bytes) + " bytes]";
}

// The last line with something on it, without its newline.
std::string last_line(const std::string& text) {
  size_t end = text.size();
  while (end > 0) {
    while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r')) --end;
    const size_t start = text.rfind('\n', end == 0 ? 0 : end - 1);
    const size_t from = start == std::string::npos ? 0 : start + 1;
    std::string line = text.substr(from, end - from);
    if (line.find_first_not_of(" \t") != std::string::npos) return line;
    if (from == 0) break;
    end = from;
  }
  return "";
}

// The end of stderr, for the evidence of a check that did not give a verdict.
std::string stderr_tail(const sandbox::Outcome& o) {
  std::string tail = o.stderr_text.size() > 512 ? o.stderr_text.substr(o.stderr_text.size() - 512) : o.stderr_text;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  return tail.empty() ? "" : "; its stderr ends: " + util::to_valid_utf8(tail);
}

}  // namespace

bool in_view(const ArtifactSummary& a) {
  return a.artifact_id && util::input_path_problem("artifacts/" + a.name) == nullptr;
}

CheckResult check_error(const std::string& why) {
  CheckResult r;
  r.verdict = "error";
  r.evidence = why;
  return r;
}

util::Result<std::vector<const policy::Check*>> checks_to_run(const policy::Policy& policy, const std::string& runtime,
                                                              const std::vector<std::string>& asked) {
  std::vector<const policy::Check*> out;
  std::set<std::string> seen;
  if (const policy::Runtime* rt = policy.find_runtime(runtime))
    for (const std::string& name : rt->required_checks)
      if (const policy::Check* c = policy.find_check(name); c && seen.insert(name).second) out.push_back(c);
  for (const std::string& name : asked) {
    const policy::Check* c = policy.find_check(name);
    if (!c) {
      std::string names;
      for (auto& [n, _] : policy.checks) names += (names.empty() ? "" : ", ") + n;
      return util::make_error(util::ErrorCode::kInvalidArgument,
                              "checks: \"" + util::to_valid_utf8(name) + "\" is not a check of this server" +
                                  (names.empty() ? " (it has none)" : "; checks: " + names));
    }
    if (seen.insert(name).second) out.push_back(c);
  }
  return out;
}

std::string check_program_sha256(const policy::Check& check, const std::string& code) {
  if (check.command.empty()) return util::sha256_hex(code);
  std::string argv;
  for (const std::string& a : check.command) argv += a + '\0';
  return util::sha256_hex(argv);
}

json check_view_json(const JobResult& result, const std::string& runtime, const std::vector<InputRef>& inputs) {
  json artifacts = json::array();
  for (const ArtifactSummary& a : result.artifacts) {
    json& e = artifacts.emplace_back(to_json(a));
    e.erase("artifact_id");  // a handle of the tenant's, of no use inside
    // where the check finds it; rejected ones are not there
    e["path"] = in_view(a) ? json("/job/artifacts/" + a.name) : json(nullptr);
  }
  json in = json::array();
  for (const InputRef& i : inputs)
    in.push_back({{"name", i.name}, {"sha256", i.sha256}, {"path", "/job/inputs/" + i.name}});
  json view = ending_json(result.outcome);
  view["job_id"] = result.job_id;
  view["runtime"] = runtime;
  view["inputs"] = std::move(in);
  view["artifacts"] = std::move(artifacts);
  return view;
}

CheckResult check_verdict(const sandbox::Outcome& o, uint64_t max_output_bytes) {
  using sandbox::Status;
  switch (o.status) {
    case Status::completed:
    case Status::failed:
      break;
    case Status::timed_out:
      return check_error("the check ran past its timeout_s" + stderr_tail(o));
    case Status::memory_exceeded:
      return check_error("the check ran out of memory" + stderr_tail(o));
    case Status::cancelled:
      return check_error("the check was cancelled with its call");
    case Status::sandbox_error:
      return check_error("the check's sandbox failed: " + bounded(o.error, 512));
  }
  if (!o.exited)
    return check_error("the check was killed by " + (o.signal ? util::signal_name(o.signal) : std::string("a signal")) +
                       stderr_tail(o));
  if (o.stdout_truncated || o.stdout_text.size() > max_output_bytes)
    return check_error("the check wrote more than its max_output_bytes (" + std::to_string(max_output_bytes) +
                       ") to stdout");
  const std::string line = last_line(o.stdout_text);
  json verdict = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!verdict.is_object() || !verdict.contains("verdict") || !verdict["verdict"].is_string() ||
      (verdict["verdict"] != "pass" && verdict["verdict"] != "fail"))
    return check_error(
        "the check's last stdout line is not {\"verdict\": \"pass\"|\"fail\", \"evidence\": \"...\"} (exit " +
        std::to_string(o.exit_code) + ")" + stderr_tail(o));
  if (verdict.contains("evidence") && !verdict["evidence"].is_string())
    return check_error("the check's evidence is not a string");
  CheckResult r;
  r.verdict = verdict["verdict"].get<std::string>();
  r.evidence = bounded(verdict.value("evidence", ""), kEvidenceMaxBytes);
  // A check that says pass and exits with a failure contradicts itself.
  if (r.verdict == "pass" && o.exit_code != 0)
    return check_error("the check said pass but exited with status " + std::to_string(o.exit_code));
  return r;
}

json to_json(const CheckResult& c) {
  return {{"name", c.name},
          {"verdict", c.verdict},
          {"evidence", c.evidence},
          {"sha256", c.sha256},
          {"duration_ms", c.duration_ms}};
}

std::vector<CheckResult> checks_from_json(const json& list) {
  std::vector<CheckResult> out;
  if (!list.is_array()) return out;
  for (const json& c : list) {
    if (!c.is_object()) continue;
    CheckResult r;
    r.name = c.value("name", "");
    r.verdict = c.value("verdict", "error");
    r.evidence = c.value("evidence", "");
    r.sha256 = c.value("sha256", "");
    r.duration_ms = c.value("duration_ms", uint64_t{0});
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace broker
