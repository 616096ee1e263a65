// The Prometheus text exposition (format 0.0.4) of broker::Metrics: HELP and
// TYPE lines, label and help escaping, cumulative histogram buckets, _sum and
// _count. Pure; no server.
#include <doctest/doctest.h>

#include <sstream>
#include <string>
#include <vector>

#include "server/broker/metrics.h"

using broker::Metrics;
namespace m = broker::metrics;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

bool has_line(const std::string& text, const std::string& line) {
  for (auto& l : lines_of(text))
    if (l == line) return true;
  return false;
}

// The value of the sample line that starts with `series` followed by a space.
std::string value_of(const std::string& text, const std::string& series) {
  for (auto& l : lines_of(text))
    if (l.rfind(series + " ", 0) == 0) return l.substr(series.size() + 1);
  return "(absent)";
}

}  // namespace

TEST_CASE("label values escape backslash, double quote and line feed, nothing else") {
  CHECK(m::escape_label_value("plain") == "plain");
  CHECK(m::escape_label_value("a\\b") == "a\\\\b");
  CHECK(m::escape_label_value("say \"hi\"") == "say \\\"hi\\\"");
  CHECK(m::escape_label_value("two\nlines") == "two\\nlines");
  CHECK(m::escape_label_value("tab\there") == "tab\there");
}

TEST_CASE("help text escapes backslash and line feed but keeps double quotes") {
  CHECK(m::escape_help("a \"quoted\" word") == "a \"quoted\" word");
  CHECK(m::escape_help("back\\slash\nnext") == "back\\\\slash\\nnext");
}

TEST_CASE("values: integers without a fraction, shortest round-trip text, special values") {
  CHECK(m::format_value(0) == "0");
  CHECK(m::format_value(42) == "42");
  CHECK(m::format_value(0.01) == "0.01");
  CHECK(m::format_value(2.5) == "2.5");
  CHECK(m::format_value(1.0 / 0.0) == "+Inf");
  CHECK(m::format_value(-1.0 / 0.0) == "-Inf");
  CHECK(m::format_value(0.0 / 0.0) == "NaN");
}

TEST_CASE("a family has one HELP and one TYPE line, then its samples with escaped labels") {
  m::TextWriter w;
  w.family("x_total", "counter", "Things\nseen.");
  w.sample("x_total", {{"kind", "a\"b"}, {"path", "c\\d"}}, 3);
  w.sample("x_total", {}, 1);
  CHECK(w.text() ==
        "# HELP x_total Things\\nseen.\n"
        "# TYPE x_total counter\n"
        "x_total{kind=\"a\\\"b\",path=\"c\\\\d\"} 3\n"
        "x_total 1\n");
}

TEST_CASE("histogram buckets are cumulative, end with +Inf, and match _count; _sum adds the values") {
  m::Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 3.0, 100.0}) h.observe(v);
  m::TextWriter w;
  m::write_histogram(w, "d_seconds", "Durations.", h);
  CHECK(w.text() ==
        "# HELP d_seconds Durations.\n"
        "# TYPE d_seconds histogram\n"
        "d_seconds_bucket{le=\"0.1\"} 2\n"  // 0.1 itself falls in le="0.1": buckets are <=
        "d_seconds_bucket{le=\"1\"} 3\n"
        "d_seconds_bucket{le=\"10\"} 4\n"
        "d_seconds_bucket{le=\"+Inf\"} 5\n"
        "d_seconds_sum 103.65\n"
        "d_seconds_count 5\n");
}

TEST_CASE("an empty registry lists every status and verdict at zero and the live gauges") {
  Metrics metrics;
  std::string text = metrics.render({1, 2, 3, 4});
  for (const char* s : {"completed", "failed", "timed_out", "memory_exceeded", "cancelled", "sandbox_error"})
    CHECK(value_of(text, std::string("throwbox_jobs_total{status=\"") + s + "\"}") == "0");
  for (const char* v : {"accepted", "sanitized", "rejected"})
    CHECK(value_of(text, std::string("throwbox_artifacts_total{verdict=\"") + v + "\"}") == "0");
  CHECK(value_of(text, "throwbox_jobs_running") == "1");
  CHECK(value_of(text, "throwbox_jobs_queued") == "2");
  CHECK(value_of(text, "throwbox_warm_pool_idle") == "3");
  CHECK(value_of(text, "throwbox_warm_pool_claims_total") == "4");
  CHECK(value_of(text, "throwbox_job_duration_seconds_bucket{le=\"+Inf\"}") == "0");
  CHECK(value_of(text, "throwbox_job_duration_seconds_count") == "0");
  CHECK(value_of(text, "throwbox_job_duration_seconds_sum") == "0");
}

TEST_CASE("every family has HELP and TYPE lines, TYPE before its first sample, each once") {
  Metrics metrics;
  metrics.job_ended("completed", 0.2);
  std::string text = metrics.render({});
  struct Family {
    const char* name;
    const char* type;
  };
  for (Family f : {Family{"throwbox_jobs_total", "counter"}, Family{"throwbox_jobs_running", "gauge"},
                   Family{"throwbox_jobs_queued", "gauge"}, Family{"throwbox_job_duration_seconds", "histogram"},
                   Family{"throwbox_artifacts_total", "counter"}, Family{"throwbox_warm_pool_idle", "gauge"},
                   Family{"throwbox_warm_pool_claims_total", "counter"}}) {
    CAPTURE(f.name);
    std::string type_line = std::string("# TYPE ") + f.name + " " + f.type;
    CHECK(has_line(text, type_line));
    size_t help = 0, type = 0, type_at = 0, first_sample_at = 0;
    auto lines = lines_of(text);
    for (size_t i = 0; i < lines.size(); ++i) {
      if (lines[i].rfind(std::string("# HELP ") + f.name + " ", 0) == 0) ++help;
      if (lines[i] == type_line) ++type, type_at = i;
      if (!first_sample_at && lines[i].rfind(f.name, 0) == 0) first_sample_at = i;
    }
    CHECK(help == 1);
    CHECK(type == 1);
    CHECK(type_at < first_sample_at);
  }
  // Every line is a comment or "name{labels} value": no blank lines in between.
  for (auto& l : lines_of(text)) CHECK((l.rfind("# ", 0) == 0 || l.find(' ') != std::string::npos));
}

TEST_CASE("jobs and verdicts are counted; durations land in cumulative buckets") {
  Metrics metrics;
  metrics.job_ended("completed", 0.02);
  metrics.job_ended("completed", 0.3);
  metrics.job_ended("timed_out", 12);
  metrics.job_ended("failed", 90);  // beyond the last bound: only +Inf
  metrics.artifact_judged("accepted");
  metrics.artifact_judged("sanitized");
  metrics.artifact_judged("accepted");
  std::string text = metrics.render({});
  CHECK(value_of(text, "throwbox_jobs_total{status=\"completed\"}") == "2");
  CHECK(value_of(text, "throwbox_jobs_total{status=\"timed_out\"}") == "1");
  CHECK(value_of(text, "throwbox_jobs_total{status=\"failed\"}") == "1");
  CHECK(value_of(text, "throwbox_artifacts_total{verdict=\"accepted\"}") == "2");
  CHECK(value_of(text, "throwbox_artifacts_total{verdict=\"sanitized\"}") == "1");
  CHECK(value_of(text, "throwbox_artifacts_total{verdict=\"rejected\"}") == "0");
  CHECK(value_of(text, "throwbox_job_duration_seconds_bucket{le=\"0.01\"}") == "0");
  CHECK(value_of(text, "throwbox_job_duration_seconds_bucket{le=\"0.025\"}") == "1");
  CHECK(value_of(text, "throwbox_job_duration_seconds_bucket{le=\"0.5\"}") == "2");
  CHECK(value_of(text, "throwbox_job_duration_seconds_bucket{le=\"10\"}") == "2");
  CHECK(value_of(text, "throwbox_job_duration_seconds_bucket{le=\"30\"}") == "3");
  CHECK(value_of(text, "throwbox_job_duration_seconds_bucket{le=\"60\"}") == "3");
  CHECK(value_of(text, "throwbox_job_duration_seconds_bucket{le=\"+Inf\"}") == "4");
  CHECK(value_of(text, "throwbox_job_duration_seconds_count") == "4");
  CHECK(std::stod(value_of(text, "throwbox_job_duration_seconds_sum")) == doctest::Approx(102.32));
}

TEST_CASE("an unexpected status is still escaped in its label") {
  Metrics metrics;
  metrics.job_ended("odd\"status\n", 0);
  CHECK(has_line(metrics.render({}), "throwbox_jobs_total{status=\"odd\\\"status\\n\"} 1"));
}
