// The HTTP transport's tokens file reader and bearer header parsing
// (server/transport/auth.cpp): neither throws; an accepted file has at most
// one entry per line; a bearer token is 1-4096 visible ASCII bytes and reads
// back from "Bearer <token>".
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/transport/auth.h"
#include "tests/fuzz/check.h"

using transport::http::Auth;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto auth = Auth::parse(text, "tokens");
  if (auth.ok()) {
    size_t lines = 1;
    for (char c : text) lines += c == '\n';
    FUZZ_CHECK(auth->size() <= lines);
    (void)auth->tenant_for(text);
  } else {
    FUZZ_CHECK(auth.error().message.starts_with("tokens:"));
  }

  auto token = transport::http::bearer_token(text);
  if (token) {
    FUZZ_CHECK(!token->empty() && token->size() <= 4096);
    for (unsigned char c : *token) FUZZ_CHECK(c > 0x20 && c < 0x7f);
    FUZZ_CHECK(transport::http::bearer_token("Bearer " + *token) == token);
    if (auth.ok()) (void)auth->tenant_for(*token);
  }
  return 0;
}
