// Cancellation: an eventfd a job's reader polls beside the runner's stdout.
#include "server/broker/job.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <stdexcept>

#include "server/util/text.h"

namespace broker {

Cancellation::Cancellation() : efd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!efd_.valid()) throw std::runtime_error("eventfd failed");
}

void Cancellation::cancel() {
  if (requested_.exchange(true)) return;
  uint64_t one = 1;
  // An eventfd write of 1 cannot fail short of a bad fd; nothing to do then.
  if (::write(efd_.get(), &one, sizeof one) < 0) return;
}

nlohmann::json to_json(const ArtifactSummary& a) {
  nlohmann::json out = nlohmann::json::object();
  out["artifact_id"] = a.artifact_id ? nlohmann::json(*a.artifact_id) : nlohmann::json(nullptr);
  out["name"] = a.name;
  out["media_type"] = a.media_type;
  out["size"] = a.size;
  out["sha256"] = a.sha256;
  out["verdict"] = to_string(a.verdict);
  out["reason"] = a.reason;
  return out;
}

nlohmann::json ending_json(const sandbox::Outcome& o) {
  nlohmann::json out = nlohmann::json::object();
  out["status"] = sandbox::to_string(o.status);
  out["exit_code"] = o.exited ? nlohmann::json(o.exit_code) : nlohmann::json(nullptr);
  out["signal"] = o.signal ? nlohmann::json(util::signal_name(o.signal)) : nlohmann::json(nullptr);
  out["timed_out"] = o.timed_out;
  out["stdout"] = o.stdout_text;
  out["stderr"] = o.stderr_text;
  out["stdout_truncated"] = o.stdout_truncated;
  out["stderr_truncated"] = o.stderr_truncated;
  out["duration_ms"] = o.duration_ms;
  out["cpu_ms"] = o.cpu_ms;
  out["peak_memory_bytes"] = o.peak_memory_bytes;
  return out;
}

}  // namespace broker
