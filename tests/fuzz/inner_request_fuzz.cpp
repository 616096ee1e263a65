// A request inside an intercepted connection, end to end as the server and
// its parser helper run it: the server finds where the head ends (within
// 16 KiB), the head goes over the helper's wire, the child parses it
// (parser::answer_for), the answer comes back over the wire and the server
// checks it (network::inner_from_json). Whatever the bytes: nothing throws
// out, the helper's own answers always pass the server's checks, and what
// is sent on is one request for the connection's host, its target in
// normal form, without the credential's header.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/helper/wire.h"
#include "server/network/head.h"
#include "server/network/inner_head.h"
#include "server/network/request_rules.h"
#include "server/parser/answers.h"
#include "tests/fuzz/check.h"

namespace {

const artifacts::types::Sniffer& sniffer() {
  static auto s = artifacts::types::Sniffer::create();
  FUZZ_CHECK(s.ok());
  return *s;
}

helper::Message through_wire(const helper::Message& m, uint64_t bytes_max) {
  const std::string wire = helper::encode(m);
  auto h = helper::decode_header(std::string_view(wire).substr(0, helper::kHeaderBytes), bytes_max);
  FUZZ_CHECK(h);
  auto back = helper::decode_body(*h, std::string_view(wire).substr(helper::kHeaderBytes, h->meta_bytes),
                                  wire.substr(helper::kHeaderBytes + h->meta_bytes));
  FUZZ_CHECK(back.ok());
  return std::move(*back);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view stream(reinterpret_cast<const char*>(data), size);
  const size_t end = stream.substr(0, network::kHeadMaxBytes).find("\r\n\r\n");
  if (end == std::string_view::npos) return 0;
  static const network::Authority dest = *network::parse_authority("api.example.com:443", std::nullopt);

  helper::Message request;
  request.kind = helper::Kind::kInnerRequest;
  request.meta = {{"authority", dest.text()}, {"credential_header", "Authorization"}};
  request.bytes = std::string(stream.substr(0, end + 4));
  helper::Message answer;
  try {
    answer = parser::answer_for(through_wire(request, helper::kRequestBytesMax), sniffer());
  } catch (const std::exception&) {
    return 0;  // the child answers kFailure: the job's request is refused
  }
  answer = through_wire(answer, network::kForwardMaxBytes);
  FUZZ_CHECK(answer.kind == helper::Kind::kAnswer);
  auto checked = network::inner_from_json(answer.meta, answer.bytes, dest, "Authorization");
  FUZZ_CHECK(checked.ok());
  if (!checked->ok) {
    for (unsigned char c : checked->reason) FUZZ_CHECK(c >= 0x20 && c != 0x7f);
    return 0;
  }
  auto again = network::normalise_target(checked->path + checked->query);
  FUZZ_CHECK(again.ok() && again->path == checked->path);
  FUZZ_CHECK(checked->forward.find("\r\n\r\n") + 4 == checked->forward.size());
  return 0;
}
