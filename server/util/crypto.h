// sha256 via OpenSSL. Safe in any server thread.
#pragma once
#include <string>
#include <string_view>

#include "server/util/random.h"

namespace util {

std::string sha256_hex(std::string_view data);
// Lowercase hex of raw bytes.
std::string to_hex(std::string_view bytes);

}  // namespace util
