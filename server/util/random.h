// Opaque handles from the kernel CSPRNG. No OpenSSL: the runner links this too.
#pragma once
#include <string>

namespace util {

// 128 bits from getrandom(2), hex-encoded: unguessable, never a path.
std::string random_id();

}  // namespace util
