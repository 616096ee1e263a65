// A proxy request head as a job sends it: parsed in the parser helper
// (parse_head, with Boost.Beast's parser), checked again in the server
// (head_from_json) before the proxy acts on it. The server itself only finds
// where the head ends; it never parses what the job wrote.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/network/address.h"
#include "server/util/result.h"

namespace network {

// The most a request head may take: request line and headers.
constexpr size_t kHeadMaxBytes = 16 * 1024;

struct Head {
  enum class Kind { kConnect, kAbsolute, kMalformed };
  Kind kind = Kind::kMalformed;
  std::string reason;   // kMalformed: the one line the job gets with its 400
  Authority dest;       // kConnect, kAbsolute: where it goes
  std::string forward;  // kAbsolute: the head sent on (origin form, Host the authority, no proxy headers, one request)
};

// `bytes` ends with the head's blank line.
Head parse_head(std::string_view bytes);

// The answer's document: kind, reason, authority (the forwarded head, bytes
// a job wrote, travels beside it as the answer's raw bytes).
nlohmann::json to_json(const Head& head);
// A head as the helper answered it, trusted no further than the server's own
// checks allow: the destination parsed again (parse_authority), the
// forwarded head one request line for that authority, every length bounded.
util::Result<Head> head_from_json(const nlohmann::json& j, std::string forward);
// The most bytes a forwarded head may take (the head and the Host the proxy sets).
constexpr size_t kForwardMaxBytes = kHeadMaxBytes + 512;

}  // namespace network
