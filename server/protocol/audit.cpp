// Audit log writing and the per-call record. O_APPEND writes of whole lines;
// a failed write is logged once per failure and never fails the call.
#include "server/protocol/audit.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <spdlog/spdlog.h>

#include "server/util/crypto.h"
#include "server/util/fd.h"

namespace protocol {
namespace {
std::string iso_now() {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}
}  // namespace

Audit::Audit(std::string path, uint64_t max_bytes) : path_(std::move(path)), max_bytes_(max_bytes) {}

void Audit::append(nlohmann::json record) {
  record["time"] = iso_now();
  std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::lock_guard lock(mu_);
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) + line.size() > max_bytes_)
    ::rename(path_.c_str(), (path_ + ".1").c_str());  // bounded: one previous file kept
  util::UniqueFd fd(::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid() || !util::write_all(fd.get(), line.data(), line.size()))
    spdlog::error("audit log {}: write failed (errno {})", path_, errno);
}

nlohmann::json audit_record(const std::string& tenant, const std::string& tool, const nlohmann::json& args,
                            const nlohmann::json& result, int64_t duration_ms) {
  using nlohmann::json;
  json r{
      {"tenant", tenant}, {"tool", tool}, {"duration_ms", duration_ms}, {"is_error", result.value("isError", false)}};
  const json sc = result.value("structuredContent", json::object());
  if (tool == "run_code") {
    if (args.contains("runtime") && args["runtime"].is_string()) r["runtime"] = args["runtime"];
    if (args.contains("code") && args["code"].is_string())
      r["code_sha256"] = util::sha256_hex(args["code"].get_ref<const std::string&>());
    if (args.contains("input_ids")) r["input_ids"] = args["input_ids"];
    if (args.contains("timeout_s")) r["timeout_s"] = args["timeout_s"];
    if (args.contains("network") && args["network"].is_string() &&
        args["network"].get_ref<const std::string&>().size() <= 32)
      r["network"] = args["network"];
    if (args.contains("workspace_id") && args["workspace_id"].is_string() &&
        args["workspace_id"].get_ref<const std::string&>().size() <= 64)
      r["workspace_id"] = args["workspace_id"];
    if (args.contains("artifact_ids")) r["artifact_ids"] = args["artifact_ids"];
    if (sc.contains("workspace")) r["job_workspace"] = sc["workspace"];
    // Destinations, addresses, byte counts and verdicts: never the payload.
    if (sc.contains("network")) r["job_network"] = sc["network"];
    if (args.contains("idempotency_key") && args["idempotency_key"].is_string())
      r["idempotency_key_sha256"] = util::sha256_hex(args["idempotency_key"].get_ref<const std::string&>());
    for (const char* k :
         {"job_id", "status", "exit_code", "signal", "duration_ms", "cpu_ms", "peak_memory_bytes", "sandbox_layers",
          "stdout_truncated", "stderr_truncated", "stdout_cut_bytes", "stderr_cut_bytes"})
      if (sc.contains(k)) r[std::string("job_") + k] = sc[k];
    json verdicts = json::array();
    for (auto& a : sc.value("artifacts", json::array()))
      verdicts.push_back({{"name", a.value("name", "")},
                          {"verdict", a.value("verdict", "")},
                          {"sha256", a.value("sha256", "")},
                          {"artifact_id", a.value("artifact_id", json(nullptr))}});
    r["artifacts"] = verdicts;
  } else if (tool == "open_workspace" || tool == "close_workspace") {
    if (args.contains("workspace_id") && args["workspace_id"].is_string() &&
        args["workspace_id"].get_ref<const std::string&>().size() <= 64)
      r["workspace_id"] = args["workspace_id"];
    for (const char* k : {"workspace_id", "expires_at", "ttl_s", "size_max_bytes", "closed"})
      if (sc.contains(k)) r[k] = sc[k];
  } else if (tool == "upload_input") {
    for (const char* k : {"input_id", "name", "size", "sha256", "media_type"})
      if (sc.contains(k)) r[k] = sc[k];
  } else if (tool == "fetch_artifact") {
    if (args.contains("artifact_id") && args["artifact_id"].is_string() &&
        args["artifact_id"].get_ref<const std::string&>().size() <= 64)
      r["artifact_id"] = args["artifact_id"];
    for (const char* k : {"name", "size", "sha256", "media_type"})
      if (sc.contains(k)) r[k] = sc[k];
  }
  return r;
}

}  // namespace protocol
