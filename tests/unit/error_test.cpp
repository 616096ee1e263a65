// util::Error's typed code and retry-after: the stable names clients' logs and
// the HTTP mapping rely on, and the retry-after admission sets for HTTP's
// Retry-After (no parsing of "retry in N s" out of the message).
#include <doctest/doctest.h>

#include <string>

#include "server/broker/admission.h"
#include "server/util/result.h"

using util::ErrorCode;

TEST_CASE("every code has its stable name") {
  const std::pair<ErrorCode, const char*> names[] = {
      {ErrorCode::kInternal, "internal"},  {ErrorCode::kInvalidArgument, "invalid_argument"},
      {ErrorCode::kNotFound, "not_found"}, {ErrorCode::kConflict, "conflict"},
      {ErrorCode::kBusy, "busy"},          {ErrorCode::kCancelled, "cancelled"},
      {ErrorCode::kTooLarge, "too_large"}, {ErrorCode::kIo, "io"},
      {ErrorCode::kPolicy, "policy"},      {ErrorCode::kSandbox, "sandbox"},
      {ErrorCode::kSpec, "spec"},          {ErrorCode::kAuth, "auth"},
      {ErrorCode::kHttp, "http"},          {ErrorCode::kOutcome, "outcome"}};
  for (auto [code, name] : names) {
    CHECK(util::to_string(code) == name);
  }
}

TEST_CASE("an error has no retry-after unless it says so") {
  util::Error e = util::make_error(ErrorCode::kBusy, "busy: retry in 7 s");
  CHECK_FALSE(e.retry_after_s.has_value());  // the message is never parsed
  util::Error b = util::busy_error("busy", 7);
  CHECK(b.code == ErrorCode::kBusy);
  CHECK(b.retry_after_s == 7u);
}

TEST_CASE("a spent CPU budget is busy with the seconds until it frees") {
  policy::Admission limits;
  limits.jobs_running_max = 4;
  limits.jobs_running_per_tenant_max = 4;
  limits.jobs_queued_max = 4;
  limits.cpu_seconds_per_tenant_per_hour = 1;
  broker::Admission admission(limits);
  REQUIRE(admission.acquire("alice", nullptr).ok());
  admission.release("alice", 1000);
  util::Status refused = admission.acquire("alice", nullptr);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == ErrorCode::kBusy);
  REQUIRE(refused.error().retry_after_s.has_value());
  const uint64_t after = *refused.error().retry_after_s;
  CHECK(after >= 3599);
  CHECK(after <= 3600);
  CHECK(refused.error().message ==
        "busy: this tenant's CPU budget of 1 CPU seconds per hour is spent; retry in " + std::to_string(after) + " s");
  // Another tenant's budget is its own.
  CHECK(admission.acquire("bob", nullptr).ok());
}
