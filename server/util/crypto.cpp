// sha256 (OpenSSL EVP).
#include "server/util/crypto.h"

#include <fcntl.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <cerrno>
#include <memory>
#include <stdexcept>

#include "server/util/fd.h"
#include "server/util/text.h"

namespace util {
namespace {
std::string to_hex(const unsigned char* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 0xF];
  }
  return s;
}
}  // namespace

std::string to_hex(std::string_view bytes) {
  return to_hex(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

Result<std::string> sha256_file_hex(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return make_error(ErrorCode::kIo, call_error("open", path, errno));
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("EVP_DigestInit_ex(sha256) failed");
  std::unique_ptr<char[]> buf(new char[1 << 20]);
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf.get(), 1 << 20);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error(ErrorCode::kIo, call_error("read", path, errno));
    if (n == 0) break;
    if (EVP_DigestUpdate(ctx.get(), buf.get(), static_cast<size_t>(n)) != 1)
      throw std::runtime_error("EVP_DigestUpdate failed");
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx.get(), digest, &len) != 1) throw std::runtime_error("EVP_DigestFinal_ex failed");
  return to_hex(digest, len);
}

std::string sha256_hex(std::string_view data) { return to_hex(sha256_bytes(data)); }

std::string sha256_bytes(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("EVP_Digest(sha256) failed");
  return std::string(reinterpret_cast<const char*>(digest), len);
}

}  // namespace util
