// Job counters and the job-duration histogram, updated by the broker when a
// job ends, and their Prometheus text exposition (format 0.0.4) for /metrics.
// Thread-safe. Holds statuses, verdicts and times only: never a tenant name,
// token, job id or anything a job printed.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace broker {

namespace metrics {

inline constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

// Label values escape backslash, double quote and line feed; HELP text
// escapes backslash and line feed (exposition format 0.0.4, "Comments,
// help text, and type information").
std::string escape_label_value(std::string_view value);
std::string escape_help(std::string_view help);
// Shortest text that reads back as the same double; "+Inf", "-Inf", "NaN".
std::string format_value(double value);

using Labels = std::vector<std::pair<std::string, std::string>>;

// Appends metric families: HELP and TYPE once, then the family's samples.
class TextWriter {
 public:
  void family(std::string_view name, std::string_view type, std::string_view help);
  void sample(std::string_view name, const Labels& labels, double value);
  const std::string& text() const { return out_; }

 private:
  std::string out_;
};

// Per-bucket (not cumulative) counts; counts.size() == upper_bounds.size() + 1,
// the last being the +Inf bucket.
struct Histogram {
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  std::vector<double> upper_bounds;
  std::vector<uint64_t> counts;
  double sum = 0;
  uint64_t count = 0;
};

// _bucket{le=...} cumulative up to +Inf, then _sum and _count.
void write_histogram(TextWriter& out, std::string_view name, std::string_view help, const Histogram& h);

}  // namespace metrics

// Seconds from a job's admission to its recorded result.
inline constexpr double kJobDurationBuckets[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};

class Metrics {
 public:
  Metrics();
  // A job that was admitted and ended: its final status and seconds taken.
  void job_ended(const std::string& status, double duration_s);
  // One artifact the gate judged: accepted, sanitized or rejected.
  void artifact_judged(const std::string& verdict);

  // Values read at scrape time from their owners.
  struct Live {
    uint64_t jobs_running = 0;
    uint64_t jobs_queued = 0;
    uint64_t warm_pool_idle = 0;
    uint64_t warm_pool_claims = 0;
    uint64_t http_sessions = 0;  // open Streamable HTTP sessions (0 over stdio)
  };
  std::string render(const Live& live) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> jobs_by_status_;
  std::map<std::string, uint64_t> artifacts_by_verdict_;
  metrics::Histogram duration_;
};

}  // namespace broker
