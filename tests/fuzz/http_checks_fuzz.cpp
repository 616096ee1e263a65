// The HTTP transport's header checks (server/transport/http_headers.cpp):
// check_session_id accepts exactly what util::random_id mints; mirror_mismatch
// agrees with an independent reading of 2026-07-28 server validation, always
// accepts headers built from the body, and every mismatch it reports is valid
// UTF-8 within its bound. Neither throws.
// Input: a byte of which headers are present, then "\n"-separated fields:
// Mcp-Session-Id, Mcp-Method, MCP-Protocol-Version, Mcp-Name, the body's
// method, and (the rest) its params as JSON text.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/transport/http_headers.h"
#include "server/util/base64.h"
#include "server/util/random.h"
#include "server/util/text.h"
#include "tests/fuzz/check.h"

namespace http = transport::http;
using nlohmann::json;

namespace {

constexpr const char* kVersionKey = "io.modelcontextprotocol/protocolVersion";

bool minted_shape(const std::string& id) {
  if (id.size() != 32) return false;
  for (char c : id)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// The spec's rule, read independently: the three headers say what the body
// says, Mcp-Name (decoded) only for the methods that name something.
bool mirrors(const http::MirrorHeaders& h, const std::string& method, const json& params, const json& version) {
  if (!h.method || *h.method != method) return false;
  if (!h.protocol_version || !version.is_string() || version.get<std::string>() != *h.protocol_version) return false;
  const char* field = method == "resources/read"                          ? "uri"
                      : method == "tools/call" || method == "prompts/get" ? "name"
                                                                          : nullptr;
  if (!field) return true;
  if (!h.name) return false;
  auto name = http::decode_header_value(*h.name);
  return name && params.is_object() && params.contains(field) && params[field].is_string() &&
         params[field].get<std::string>() == *name;
}

void check_message(const std::optional<std::string>& why) {
  if (!why) return;
  FUZZ_CHECK(!why->empty());
  FUZZ_CHECK(util::is_valid_utf8(*why));
  FUZZ_CHECK(why->size() <= http::kMirrorMismatchMaxBytes);
  (void)json("Header mismatch: " + *why).dump();  // strict: throws on invalid UTF-8
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t present = data[0];
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  std::vector<std::string> f;
  while (f.size() < 5) {
    const size_t end = rest.find('\n');
    f.emplace_back(rest.substr(0, end));
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
  }
  auto field = [&](int i) { return (present >> i) & 1 ? std::optional<std::string>(f[i]) : std::nullopt; };

  // Mcp-Session-Id.
  const std::optional<std::string> sid = field(0);
  const http::SessionIdCheck check = http::check_session_id(sid);
  if (!sid)
    FUZZ_CHECK(check == http::SessionIdCheck::kMissing);
  else
    FUZZ_CHECK(check == (minted_shape(*sid) ? http::SessionIdCheck::kWellFormed : http::SessionIdCheck::kMalformed));
  FUZZ_CHECK(http::check_session_id(util::random_id()) == http::SessionIdCheck::kWellFormed);

  // The 2026-07-28 mirroring.
  const http::MirrorHeaders headers{field(1), field(2), field(3)};
  const std::string& method = f[4];
  json params = json::parse(rest, nullptr, false);
  if (params.is_discarded()) params = nullptr;  // as the session sees absent params
  json version;
  if (params.is_object() && params.contains("_meta") && params["_meta"].is_object() &&
      params["_meta"].contains(kVersionKey))
    version = params["_meta"][kVersionKey];
  const http::MirrorBody body{method, params, version, kVersionKey};
  const std::optional<std::string> why = http::mirror_mismatch(headers, body);
  check_message(why);
  FUZZ_CHECK(!why == mirrors(headers, method, params, version));

  // Headers a client builds from the body always mirror it (a name that is
  // not plain visible ASCII goes base64-encoded).
  if (version.is_string()) {
    http::MirrorHeaders built{method, version.get<std::string>(), std::nullopt};
    const char* name_field = method == "resources/read" ? "uri" : "name";
    if (params.is_object() && params.contains(name_field) && params[name_field].is_string())
      built.name = "=?base64?" + util::base64_encode(params[name_field].get<std::string>()) + "?=";
    const bool names_something = method == "tools/call" || method == "resources/read" || method == "prompts/get";
    const auto built_why = http::mirror_mismatch(built, body);
    check_message(built_why);
    if (built.name || !names_something) FUZZ_CHECK(!built_why);
  }
  return 0;
}
