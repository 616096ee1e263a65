// artifacts::pdf::check on arbitrary bytes: it never throws (qpdf's
// exceptions become rejections), a rejection carries a reason and no bytes,
// an acceptance in kReject is the input unchanged, and whatever kStrip lets
// out passes kReject on its own.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/artifacts/pdf.h"
#include "tests/fuzz/check.h"

namespace pdf = artifacts::pdf;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  pdf::Result r = pdf::check(bytes, pdf::Mode::kReject);
  FUZZ_CHECK(r.ok ? r.output == bytes && r.removed == 0 : !r.reason.empty() && r.output.empty());

  pdf::Result s = pdf::check(bytes, pdf::Mode::kStrip);
  if (!s.ok) {
    FUZZ_CHECK(!s.reason.empty() && s.output.empty());
    return 0;
  }
  FUZZ_CHECK((s.removed == 0) == (s.output == bytes));
  FUZZ_CHECK(s.removed > 0 || r.ok);
  pdf::Result again = pdf::check(s.output, pdf::Mode::kReject);
  FUZZ_CHECK(again.ok && again.output == s.output);
  return 0;
}
