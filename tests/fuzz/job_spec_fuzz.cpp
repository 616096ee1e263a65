// broker::build_job_spec on a fuzzed request (run_code's arguments as JSON)
// against the bundled policy: whatever spec the broker builds, the runner's
// reader accepts, as the same spec, with the deadline under the policy's
// ceiling; whatever it refuses names the field.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "server/broker/job_spec.h"
#include "tests/fuzz/check.h"

using nlohmann::json;

namespace {

const policy::Policy& bundled_policy() {
  static const policy::Policy p = [] {
    auto loaded = policy::load_file(THROWBOX_SOURCE_DIR "/policies/default.json");
    if (!loaded.ok()) {
      std::fprintf(stderr, "policy: %s\n", loaded.error().message.c_str());
      std::abort();
    }
    return std::move(*loaded);
  }();
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  json args = json::parse(std::string_view(reinterpret_cast<const char*>(data), size), nullptr, false);
  if (!args.is_object()) return 0;
  const policy::Policy& p = bundled_policy();
  broker::JobRequest req;
  req.tenant = "fuzz";
  if (args.contains("runtime") && args["runtime"].is_string()) req.runtime = args["runtime"];
  if (args.contains("code") && args["code"].is_string()) req.code = args["code"];
  if (args.contains("timeout_s") && args["timeout_s"].is_number()) req.timeout_s = args["timeout_s"].get<double>();
  std::vector<util::Result<store::InputRecord>> inputs;
  if (args.contains("input_ids") && args["input_ids"].is_array())
    for (auto& id : args["input_ids"]) {
      if (!id.is_string()) continue;
      req.input_ids.push_back(id);
      store::InputRecord rec;
      rec.name = id.get<std::string>();
      rec.blob_path = "/var/lib/throwbox/blobs/" + rec.name;
      inputs.push_back(rec);
    }
  broker::SpecHost host = broker::spec_host("/var/lib/throwbox", json::object(), "", {96, 8192, 16, 1600});
  auto spec = broker::build_job_spec(p, host, req, inputs, "job1");
  if (!spec.ok()) {
    FUZZ_CHECK(!spec.error().message.empty());
    return 0;
  }
  FUZZ_CHECK(spec->timeout_ms >= 1 && spec->timeout_ms <= p.limits.timeout_s_max * 1000 + 1);
  const json written = sandbox::to_json(*spec);
  auto read = sandbox::spec_from_json(json::parse(written.dump()));
  FUZZ_CHECK(read.ok());
  FUZZ_CHECK(sandbox::to_json(*read) == written);
  return 0;
}
