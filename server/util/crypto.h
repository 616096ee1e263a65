// sha256 via OpenSSL. Safe in any server thread.
#pragma once
#include <string>
#include <string_view>

#include "server/util/random.h"
#include "server/util/result.h"

namespace util {

std::string sha256_hex(std::string_view data);
// The 32 raw bytes.
std::string sha256_bytes(std::string_view data);
// sha256 hex of a file's bytes, read in 1 MiB pieces (never whole in memory).
// The file is opened without following a final symbolic link only if the
// caller resolved it; errors name the path.
Result<std::string> sha256_file_hex(const std::string& path);
// Lowercase hex of raw bytes.
std::string to_hex(std::string_view bytes);

}  // namespace util
