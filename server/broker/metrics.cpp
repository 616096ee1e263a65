// Metrics registry and the Prometheus text format. Runs on broker worker
// threads (updates) and HTTP threads (render); one mutex, held briefly.
#include "server/broker/metrics.h"

#include <charconv>
#include <cmath>
#include <iterator>

namespace broker {
namespace metrics {

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string escape_help(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  if (ec != std::errc()) return "NaN";
  return std::string(buf, end);
}

void TextWriter::family(std::string_view name, std::string_view type, std::string_view help) {
  out_.append("# HELP ").append(name).append(" ").append(escape_help(help)).append("\n");
  out_.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

void TextWriter::sample(std::string_view name, const Labels& labels, double value) {
  out_.append(name);
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i) out_ += ',';
      out_.append(labels[i].first).append("=\"").append(escape_label_value(labels[i].second)).append("\"");
    }
    out_ += '}';
  }
  out_.append(" ").append(format_value(value)).append("\n");
}

Histogram::Histogram(std::vector<double> bounds) : upper_bounds(std::move(bounds)), counts(upper_bounds.size() + 1) {}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < upper_bounds.size() && value > upper_bounds[i]) ++i;  // buckets are "less than or equal"
  ++counts[i];
  sum += value;
  ++count;
}

void write_histogram(TextWriter& out, std::string_view name, std::string_view help, const Histogram& h) {
  out.family(name, "histogram", help);
  const std::string bucket = std::string(name) + "_bucket";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.upper_bounds.size(); ++i) {
    cumulative += h.counts[i];
    out.sample(bucket, {{"le", format_value(h.upper_bounds[i])}}, static_cast<double>(cumulative));
  }
  cumulative += h.counts.back();
  out.sample(bucket, {{"le", "+Inf"}}, static_cast<double>(cumulative));
  out.sample(std::string(name) + "_sum", {}, h.sum);
  out.sample(std::string(name) + "_count", {}, static_cast<double>(h.count));
}

}  // namespace metrics

Metrics::Metrics() : duration_(std::vector<double>(std::begin(kJobDurationBuckets), std::end(kJobDurationBuckets))) {
  // Every known series from the start: a rate() over a series that appears
  // only with its first event misses that event.
  for (const char* s : {"completed", "failed", "timed_out", "memory_exceeded", "cancelled", "sandbox_error"})
    jobs_by_status_[s] = 0;
  for (const char* v : {"accepted", "sanitized", "rejected"}) artifacts_by_verdict_[v] = 0;
}

void Metrics::job_ended(const std::string& status, double duration_s) {
  std::lock_guard lock(mu_);
  ++jobs_by_status_[status];
  duration_.observe(duration_s < 0 ? 0 : duration_s);
}

void Metrics::artifact_judged(const std::string& verdict) {
  std::lock_guard lock(mu_);
  ++artifacts_by_verdict_[verdict];
}

std::string Metrics::render(const Live& live) const {
  metrics::TextWriter out;
  {
    std::lock_guard lock(mu_);
    out.family("throwbox_jobs_total", "counter", "Jobs that were admitted and ended, by final status.");
    for (auto& [status, n] : jobs_by_status_)
      out.sample("throwbox_jobs_total", {{"status", status}}, static_cast<double>(n));
    metrics::write_histogram(out, "throwbox_job_duration_seconds",
                             "Seconds from a job's admission to its recorded result (sandbox set-up, run, "
                             "artifact gate).",
                             duration_);
    out.family("throwbox_artifacts_total", "counter", "Files jobs left in /outputs, by the artifact gate's verdict.");
    for (auto& [verdict, n] : artifacts_by_verdict_)
      out.sample("throwbox_artifacts_total", {{"verdict", verdict}}, static_cast<double>(n));
  }
  out.family("throwbox_jobs_running", "gauge", "Jobs running now.");
  out.sample("throwbox_jobs_running", {}, static_cast<double>(live.jobs_running));
  out.family("throwbox_jobs_queued", "gauge", "Jobs waiting for a slot now (admission queue depth).");
  out.sample("throwbox_jobs_queued", {}, static_cast<double>(live.jobs_queued));
  out.family("throwbox_warm_pool_idle", "gauge", "Warm sandboxes built ahead and waiting for a job.");
  out.sample("throwbox_warm_pool_idle", {}, static_cast<double>(live.warm_pool_idle));
  out.family("throwbox_warm_pool_claims_total", "counter", "Jobs that ran in a warm sandbox.");
  out.sample("throwbox_warm_pool_claims_total", {}, static_cast<double>(live.warm_pool_claims));
  out.family("throwbox_http_sessions", "gauge", "Streamable HTTP sessions open now (all tenants).");
  out.sample("throwbox_http_sessions", {}, static_cast<double>(live.http_sessions));
  return out.text();
}

}  // namespace broker
