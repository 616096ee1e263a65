// Ed25519 keys, signatures and keyed digests (OpenSSL EVP). A SigningKey
// lives in one file (PKCS#8 PEM, mode 0600, owned by the process's user),
// made on first use; a VerifyKey is its public half (SubjectPublicKeyInfo
// PEM). Safe in any thread once made.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "server/util/result.h"

struct evp_pkey_st;
struct evp_md_ctx_st;

namespace util {

class SigningKey {
 public:
  // Reads the key at path, or makes one there when there is none (two
  // processes racing get the same key). An error when the file is not a
  // regular file of this process's user, can be read or written by anyone
  // else, or is not an Ed25519 private key.
  static Result<SigningKey> load_or_create(const std::string& path);
  // As above, never making one.
  static Result<SigningKey> load(const std::string& path);

  std::string sign(std::string_view message) const;  // 64 raw bytes
  std::string public_raw() const;                    // 32 raw bytes
  std::string public_pem() const;
  // sha256 hex of the public key's raw bytes: names the key.
  std::string key_id() const;
  // HMAC-SHA256 hex of data, keyed by a digest of the private key and
  // purpose: stable for this key, unguessable without it.
  std::string keyed_digest(std::string_view purpose, std::string_view data) const;

 private:
  explicit SigningKey(std::shared_ptr<evp_pkey_st> key);
  std::shared_ptr<evp_pkey_st> key_;
  // A signing context set up once and copied for each signature: setting
  // one up looks the algorithm up in OpenSSL's provider store (about 50 us
  // of a cold signature's 90). Only read after construction.
  std::shared_ptr<evp_md_ctx_st> prepared_;
};

class VerifyKey {
 public:
  static Result<VerifyKey> from_pem(std::string_view pem);
  bool verify(std::string_view message, std::string_view signature) const;
  std::string public_raw() const;
  std::string key_id() const;

 private:
  explicit VerifyKey(std::shared_ptr<evp_pkey_st> key) : key_(std::move(key)) {}
  std::shared_ptr<evp_pkey_st> key_;
};

}  // namespace util
