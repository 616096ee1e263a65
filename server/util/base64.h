// Strict base64 (RFC 4648, standard alphabet, padded). Pure; any thread.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace util {

std::string base64_encode(std::string_view bytes);
// nullopt on any character outside the alphabet, bad padding or bad length.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace util
