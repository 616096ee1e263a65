// artifacts::types::decide on a fuzzed file name and content, with the
// system's libmagic: an accepted file has an allowed media type and no
// reason; a refused one has a reason, valid UTF-8 (it goes into the
// verdict's JSON); the extension table answers in lowercase.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "server/artifacts/types.h"
#include "server/util/text.h"
#include "tests/fuzz/check.h"

namespace types = artifacts::types;

namespace {

const types::Sniffer& sniffer() {
  static const types::Sniffer s = [] {
    auto created = types::Sniffer::create();
    if (!created.ok()) {
      std::fprintf(stderr, "libmagic: %s\n", created.error().message.c_str());
      std::abort();
    }
    return std::move(*created);
  }();
  return s;
}

const std::vector<std::string> kAllowed = {"text/plain", "text/csv",      "application/json", "image/png",
                                           "image/jpeg", "image/svg+xml", "text/html",        "application/pdf"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // "<file name>\n<content>"; without a newline the whole input is content of "out.txt".
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string_view name = "out.txt", bytes = in;
  if (size_t nl = in.find('\n'); nl != std::string_view::npos && nl <= 255) {
    name = in.substr(0, nl);
    bytes = in.substr(nl + 1);
  }
  const std::string by_ext = types::media_type_for_extension(name);
  for (char c : by_ext) FUZZ_CHECK(!(c >= 'A' && c <= 'Z'));

  types::Decision d = types::decide(name, bytes, sniffer(), kAllowed);
  if (d.ok) {
    FUZZ_CHECK(!d.media_type.empty() && d.reason.empty());
    bool allowed = false;
    for (auto& a : kAllowed) allowed = allowed || a == d.media_type;
    FUZZ_CHECK(allowed);
  } else {
    FUZZ_CHECK(!d.reason.empty() && d.media_type.empty());
    if (util::is_valid_utf8(name)) FUZZ_CHECK(util::is_valid_utf8(d.reason));
  }
  return 0;
}
