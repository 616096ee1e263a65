// Hashes and handles: sha256 via OpenSSL, opaque ids from the kernel CSPRNG.
// Safe in any server thread.
#pragma once
#include <string>
#include <string_view>

namespace util {

std::string sha256_hex(std::string_view data);
// 128 bits from getrandom(2), hex-encoded: unguessable, never a path.
std::string random_id();

}  // namespace util
