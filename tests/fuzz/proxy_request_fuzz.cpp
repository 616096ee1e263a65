// The proxy's request path for a job's bytes, end to end as the server and
// its parser helper run it: the server finds where the head ends (within
// 16 KiB), the request goes over the helper's wire, the child parses it
// (parser::answer_for, the code a child runs), its answer comes back over
// the wire and the server checks it (network::head_from_json). Whatever the
// bytes: nothing throws out, and what the server accepts is one request for
// one checked destination, the body after it relayed as it came.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/parser/answers.h"
#include "server/helper/wire.h"
#include "server/network/head.h"
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
  // The server: the head is what comes up to the first blank line, at most kHeadMaxBytes.
  const size_t end = stream.substr(0, network::kHeadMaxBytes).find("\r\n\r\n");
  if (end == std::string_view::npos) return 0;  // refused by the server, never sent on
  const std::string head(stream.substr(0, end + 4));
  const std::string body(stream.substr(end + 4));

  helper::Message request;
  request.kind = helper::Kind::kRequestHead;
  request.bytes = head;
  helper::Message answer;
  try {
    answer = parser::answer_for(through_wire(request, helper::kRequestBytesMax), sniffer());
  } catch (const std::exception&) {
    return 0;  // the child answers kFailure: the job's request is refused
  }
  answer = through_wire(answer, network::kForwardMaxBytes);
  FUZZ_CHECK(answer.kind == helper::Kind::kAnswer);
  auto checked = network::head_from_json(answer.meta, answer.bytes);
  FUZZ_CHECK(checked.ok());  // the helper's own answers always pass the server's checks
  if (checked->kind == network::Head::Kind::kMalformed) {
    for (unsigned char c : checked->reason) FUZZ_CHECK(c >= 0x20 && c != 0x7f);
    return 0;
  }
  // One checked destination, parsed again as the server parses authorities.
  auto again = network::parse_authority(checked->dest.text(), std::nullopt);
  FUZZ_CHECK(again.ok() && again->text() == checked->dest.text());
  if (checked->kind == network::Head::Kind::kAbsolute) {
    // One request, ending once at its end; the body goes after it untouched.
    FUZZ_CHECK(checked->forward.find("\r\n\r\n") + 4 == checked->forward.size());
    const std::string sent = checked->forward + body;
    FUZZ_CHECK(sent.compare(checked->forward.size(), std::string::npos, body) == 0);
  }
  return 0;
}
