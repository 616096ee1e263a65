// artifacts::active::scan_markup on any bytes: it never crashes; a finding has
// a reason and no finding has none; and the reason, which goes into the
// verdict's JSON, is valid UTF-8 whenever the markup is (the gate scans only
// UTF-8 markup).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/artifacts/active_content.h"
#include "server/util/text.h"
#include "tests/fuzz/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  artifacts::active::Finding f = artifacts::active::scan_markup(text);
  FUZZ_CHECK(f.active == !f.reason.empty());
  if (util::is_valid_utf8(text)) FUZZ_CHECK(util::is_valid_utf8(f.reason));
  // Deterministic: the same bytes, the same finding.
  artifacts::active::Finding g = artifacts::active::scan_markup(text);
  FUZZ_CHECK(g.active == f.active && g.reason == f.reason);
  return 0;
}
