// policy::parse on any JSON document: it never throws (a bad policy is an
// error naming its key), and a policy it accepts is a fixed point of
// effective_json: parse(effective_json(p)) gives the same effective policy.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/policy/policy.h"
#include "tests/fuzz/check.h"

using nlohmann::json;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded()) return 0;
  util::Result<policy::Policy> p = [&] {
    try {
      return policy::parse(doc, "fuzz.json");
    } catch (...) {
      FUZZ_CHECK(!"policy::parse threw");
      throw;
    }
  }();
  if (!p.ok()) {
    FUZZ_CHECK(!p.error().message.empty());
    return 0;
  }
  const json effective = policy::effective_json(*p);
  auto again = policy::parse(json::parse(effective.dump()), "effective.json");
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(policy::effective_json(*again) == effective);
  for (auto& name : p->available_runtimes()) FUZZ_CHECK(p->find_runtime(name) != nullptr);
  return 0;
}
