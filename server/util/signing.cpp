// Ed25519 with OpenSSL 3's EVP interface.
#include "server/util/signing.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>

#include <stdexcept>

#include "server/util/crypto.h"
#include "server/util/fs.h"

namespace util {
namespace {

constexpr size_t kKeyFileMax = 4096;

std::shared_ptr<evp_pkey_st> own(EVP_PKEY* k) { return std::shared_ptr<evp_pkey_st>(k, EVP_PKEY_free); }

std::string bio_text(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return std::string(data, n > 0 ? static_cast<size_t>(n) : 0);
}

std::string raw_public(EVP_PKEY* k) {
  unsigned char buf[32];
  size_t len = sizeof buf;
  if (EVP_PKEY_get_raw_public_key(k, buf, &len) != 1) throw std::runtime_error("EVP_PKEY_get_raw_public_key failed");
  return std::string(reinterpret_cast<char*>(buf), len);
}

Error key_error(const std::string& path, const std::string& what) {
  return make_error(ErrorCode::kInvalidArgument, "receipt key " + path + ": " + what);
}

Result<std::shared_ptr<evp_pkey_st>> parse_private(const std::string& path, const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (!bio) throw std::runtime_error("BIO_new_mem_buf failed");
  EVP_PKEY* k = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (!k) return key_error(path, "not a PEM private key");
  auto key = own(k);
  if (EVP_PKEY_get_id(k) != EVP_PKEY_ED25519) return key_error(path, "not an Ed25519 key");
  return key;
}

// A new key written to path unless a file is there (link(2) does not replace).
Status create_key_file(const std::string& path) {
  EVP_PKEY* k = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
  if (!k) return make_error(ErrorCode::kInternal, "receipt key: Ed25519 key generation failed");
  auto key = own(k);
  BIO* bio = BIO_new(BIO_s_mem());
  if (!bio || PEM_write_bio_PrivateKey(bio, k, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    BIO_free(bio);
    return make_error(ErrorCode::kInternal, "receipt key: PEM encoding failed");
  }
  std::string pem = bio_text(bio);
  BIO_free(bio);
  return create_private_file(path, pem);
}

}  // namespace

SigningKey::SigningKey(std::shared_ptr<evp_pkey_st> key) : key_(std::move(key)) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (ctx && EVP_DigestSignInit(ctx, nullptr, nullptr, nullptr, key_.get()) == 1)
    prepared_ = std::shared_ptr<evp_md_ctx_st>(ctx, EVP_MD_CTX_free);
  else
    EVP_MD_CTX_free(ctx);
}

Result<SigningKey> SigningKey::load(const std::string& path) {
  auto text = read_private_file(path, kKeyFileMax);
  if (!text) {
    if (text.error().code == ErrorCode::kNotFound) return text.error();
    return make_error(ErrorCode::kInvalidArgument, "receipt key " + text.error().message);
  }
  auto key = parse_private(path, *text);
  if (!key) return key.error();
  return SigningKey(std::move(*key));
}

Result<SigningKey> SigningKey::load_or_create(const std::string& path) {
  auto loaded = load(path);
  if (loaded || loaded.error().code != ErrorCode::kNotFound) return loaded;
  if (auto s = create_key_file(path); !s) return s.error();
  return load(path);
}

std::string SigningKey::sign(std::string_view message) const {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (!ctx) throw std::runtime_error("EVP_MD_CTX_new failed");
  unsigned char sig[64];
  size_t len = sizeof sig;
  const bool ready = (prepared_ && EVP_MD_CTX_copy_ex(ctx, prepared_.get()) == 1) ||
                     EVP_DigestSignInit(ctx, nullptr, nullptr, nullptr, key_.get()) == 1;
  const bool ok = ready && EVP_DigestSign(ctx, sig, &len, reinterpret_cast<const unsigned char*>(message.data()),
                                          message.size()) == 1;
  EVP_MD_CTX_free(ctx);
  if (!ok) throw std::runtime_error("Ed25519 signing failed");
  return std::string(reinterpret_cast<char*>(sig), len);
}

std::string SigningKey::public_raw() const { return raw_public(key_.get()); }

std::string SigningKey::public_pem() const {
  BIO* bio = BIO_new(BIO_s_mem());
  if (!bio || PEM_write_bio_PUBKEY(bio, key_.get()) != 1) {
    BIO_free(bio);
    throw std::runtime_error("PEM_write_bio_PUBKEY failed");
  }
  std::string pem = bio_text(bio);
  BIO_free(bio);
  return pem;
}

std::string SigningKey::key_id() const { return sha256_hex(public_raw()); }

std::string SigningKey::keyed_digest(std::string_view purpose, std::string_view data) const {
  unsigned char raw[32];
  size_t len = sizeof raw;
  if (EVP_PKEY_get_raw_private_key(key_.get(), raw, &len) != 1)
    throw std::runtime_error("EVP_PKEY_get_raw_private_key failed");
  std::string seed(purpose);
  seed.push_back('\0');
  seed.append(reinterpret_cast<char*>(raw), len);
  OPENSSL_cleanse(raw, sizeof raw);
  const std::string mac_key = sha256_hex(seed);
  OPENSSL_cleanse(seed.data(), seed.size());
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  if (!HMAC(EVP_sha256(), mac_key.data(), static_cast<int>(mac_key.size()),
            reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac, &mac_len))
    throw std::runtime_error("HMAC failed");
  return to_hex(std::string_view(reinterpret_cast<char*>(mac), mac_len));
}

Result<VerifyKey> VerifyKey::from_pem(std::string_view pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (!bio) throw std::runtime_error("BIO_new_mem_buf failed");
  EVP_PKEY* k = PEM_read_bio_PUBKEY(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (!k) return make_error(ErrorCode::kInvalidArgument, "not a PEM public key");
  auto key = own(k);
  if (EVP_PKEY_get_id(k) != EVP_PKEY_ED25519) return make_error(ErrorCode::kInvalidArgument, "not an Ed25519 key");
  return VerifyKey(std::move(key));
}

bool VerifyKey::verify(std::string_view message, std::string_view signature) const {
  if (signature.size() != 64) return false;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (!ctx) throw std::runtime_error("EVP_MD_CTX_new failed");
  const bool ok = EVP_DigestVerifyInit(ctx, nullptr, nullptr, nullptr, key_.get()) == 1 &&
                  EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
                                   reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1;
  EVP_MD_CTX_free(ctx);
  return ok;
}

std::string VerifyKey::public_raw() const { return raw_public(key_.get()); }
std::string VerifyKey::key_id() const { return sha256_hex(public_raw()); }

}  // namespace util
