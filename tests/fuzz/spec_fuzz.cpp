// The runner's readers (server/sandbox/spec.cpp) on one JSON document read as
// a launch spec, a claim and an outcome: none throws; what one accepts has its
// numbers in range, and parse -> to_json -> parse is a fixed point, in memory
// and through the wire text.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/sandbox/spec.h"
#include "tests/fuzz/check.h"

using nlohmann::json;

namespace {

// Reads j, writes it back and reads that: the same JSON, in memory and as text.
template <class Read>
void check_fixed_point(const json& j, Read read) {
  auto first = read(j);
  if (!first.ok()) {
    FUZZ_CHECK(!first.error().message.empty());
    return;
  }
  const json written = sandbox::to_json(*first);
  auto second = read(written);
  FUZZ_CHECK(second.ok());
  FUZZ_CHECK(sandbox::to_json(*second) == written);
  auto third = read(json::parse(written.dump()));
  FUZZ_CHECK(third.ok());
  FUZZ_CHECK(sandbox::to_json(*third) == written);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  // The broker's own reader: nlohmann's non-throwing parse of the line.
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return 0;

  check_fixed_point(j, sandbox::spec_from_json);
  if (auto s = sandbox::spec_from_json(j); s.ok()) {
    FUZZ_CHECK(s->timeout_ms >= 1 && s->timeout_ms <= 24ULL * 3600 * 1000);
    FUZZ_CHECK(s->host_uid != UINT32_MAX && s->host_gid != UINT32_MAX);
    FUZZ_CHECK(s->cpu_max_cores >= 0 && s->cpu_max_cores <= 65536);
    FUZZ_CHECK(!s->argv.empty() && s->argv[0].starts_with('/') && s->scratch_dir.starts_with('/'));
    FUZZ_CHECK(s->memory_max_bytes <= INT64_MAX && s->work_max_bytes <= INT64_MAX);
  }
  check_fixed_point(j, sandbox::claim_from_json);
  if (auto c = sandbox::claim_from_json(j); c.ok()) FUZZ_CHECK(c->timeout_ms >= 1);
  check_fixed_point(j, sandbox::outcome_from_json);
  if (auto o = sandbox::outcome_from_json(j); o.ok()) {
    FUZZ_CHECK(o->exit_code >= 0 && o->exit_code <= 255 && o->signal >= 0 && o->signal <= 64);
    for (auto& f : o->files) FUZZ_CHECK(f.size <= INT64_MAX);
  }
  return 0;
}
