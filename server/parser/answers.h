// The parser helper child's answers: a request in, the parse of its bytes
// out. Everything here reads hostile bytes, and runs only in a child of
// throwbox-parser (and in the fuzz harnesses, which drive the same code).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "server/artifacts/types.h"
#include "server/helper/wire.h"

namespace parser {

using helper::Kind;
using helper::Message;

// The answer to one request; kFailure when the request is not one this
// child takes. May throw (a parser's exception): the caller answers kFailure.
Message answer_for(const Message& request, const artifacts::types::Sniffer& sniffer);
Message failure(const std::string& why);
// What a child's confinement does to what a compromised parser would try
// first: each attempt's errno name, or "allowed" (doctor reports it).
nlohmann::json probe();

}  // namespace parser
