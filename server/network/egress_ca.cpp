// The egress CA and its per-host certificates (OpenSSL X509).
#include "server/network/egress_ca.h"

#include <unistd.h>

#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdlib>
#include <stdexcept>

#include "server/util/fs.h"

namespace network {
namespace {

constexpr size_t kPemMax = 64 * 1024;
constexpr size_t kSystemBundleMax = 16 << 20;
constexpr long kCaDays = 3650;
constexpr long kLeafDays = 7;

std::shared_ptr<evp_pkey_st> own_key(EVP_PKEY* k) { return std::shared_ptr<evp_pkey_st>(k, EVP_PKEY_free); }
std::shared_ptr<x509_st> own_cert(X509* c) { return std::shared_ptr<x509_st>(c, X509_free); }

util::Error ca_error(const std::string& what) {
  return util::make_error(util::ErrorCode::kInvalidArgument, "egress CA: " + what);
}

std::string pem_of_cert(X509* c) {
  BIO* bio = BIO_new(BIO_s_mem());
  if (!bio || PEM_write_bio_X509(bio, c) != 1) {
    BIO_free(bio);
    throw std::runtime_error("PEM_write_bio_X509 failed");
  }
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string out(data, n > 0 ? static_cast<size_t>(n) : 0);
  BIO_free(bio);
  return out;
}

std::string pem_of_key(EVP_PKEY* k) {
  BIO* bio = BIO_new(BIO_s_mem());
  if (!bio || PEM_write_bio_PrivateKey(bio, k, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    BIO_free(bio);
    throw std::runtime_error("PEM_write_bio_PrivateKey failed");
  }
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string out(data, n > 0 ? static_cast<size_t>(n) : 0);
  BIO_free(bio);
  return out;
}

std::shared_ptr<evp_pkey_st> new_ec_key() {
  EVP_PKEY* k = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
  if (!k) throw std::runtime_error("EC P-256 key generation failed");
  return own_key(k);
}

bool add_ext(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (!ext) return false;
  const bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

// A certificate's common fields: a random 127-bit serial, valid from an hour ago.
std::shared_ptr<x509_st> new_cert(EVP_PKEY* key, const std::string& common_name, long days) {
  auto cert = own_cert(X509_new());
  if (!cert) throw std::runtime_error("X509_new failed");
  X509* c = cert.get();
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) throw std::runtime_error("RAND_bytes failed");
  serial[0] &= 0x7f;
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  const bool ok =
      bn && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(c)) && X509_set_version(c, 2) == 1 &&
      X509_gmtime_adj(X509_getm_notBefore(c), -3600) && X509_gmtime_adj(X509_getm_notAfter(c), days * 86400) &&
      X509_set_pubkey(c, key) == 1 &&
      X509_NAME_add_entry_by_txt(X509_get_subject_name(c), "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1, 0) == 1;
  BN_free(bn);
  if (!ok) throw std::runtime_error("building a certificate failed");
  return cert;
}

util::Result<std::shared_ptr<x509_st>> read_cert(const std::string& path) {
  auto text = util::read_file(path, kPemMax);
  if (!text) return ca_error(text.error().message);
  BIO* bio = BIO_new_mem_buf(text->data(), static_cast<int>(text->size()));
  if (!bio) throw std::runtime_error("BIO_new_mem_buf failed");
  X509* c = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (!c) return ca_error(path + ": not a PEM certificate");
  return own_cert(c);
}

util::Result<std::shared_ptr<evp_pkey_st>> read_key(const std::string& path) {
  auto text = util::read_private_file(path, kPemMax);
  if (!text) return ca_error(text.error().message);
  BIO* bio = BIO_new_mem_buf(text->data(), static_cast<int>(text->size()));
  if (!bio) throw std::runtime_error("BIO_new_mem_buf failed");
  EVP_PKEY* k = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (!k) return ca_error(path + ": not a PEM private key");
  return own_key(k);
}

// A new CA: its key first (so a certificate never exists without one).
util::Status create_ca(const std::string& cert_path, const std::string& key_path) {
  auto key = new_ec_key();
  auto cert = new_cert(key.get(), "throwbox egress CA", kCaDays);
  X509* c = cert.get();
  if (X509_set_issuer_name(c, X509_get_subject_name(c)) != 1 ||
      !add_ext(c, c, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") ||
      !add_ext(c, c, NID_key_usage, "critical,keyCertSign,cRLSign") ||
      !add_ext(c, c, NID_subject_key_identifier, "hash") || X509_sign(c, key.get(), EVP_sha256()) <= 0)
    return util::make_error(util::ErrorCode::kInternal, "egress CA: making the certificate failed");
  if (auto s = util::create_private_file(key_path, pem_of_key(key.get())); !s) return ca_error(s.error().message);
  // The key that is there now (another process may have won the race) is the one the certificate must carry.
  auto kept = read_key(key_path);
  if (!kept) return kept.error();
  if (EVP_PKEY_eq(kept->get(), key.get()) != 1) return util::ok_status();
  return util::write_file_atomic(cert_path, pem_of_cert(c), 0644, true);
}

}  // namespace

EgressCa::EgressCa(std::shared_ptr<x509_st> ca, std::shared_ptr<evp_pkey_st> ca_key, std::string ca_pem,
                   std::shared_ptr<evp_pkey_st> leaf_key)
    : ca_(std::move(ca)), ca_key_(std::move(ca_key)), ca_pem_(std::move(ca_pem)), leaf_key_(std::move(leaf_key)) {}

util::Result<std::unique_ptr<EgressCa>> EgressCa::open(const std::string& state_dir) {
  const std::string cert_path = state_dir + "/" + kCertFile, key_path = state_dir + "/" + kKeyFile;
  if (::access(key_path.c_str(), F_OK) != 0) {
    if (::access(cert_path.c_str(), F_OK) == 0)
      return ca_error(cert_path + " is there without its key " + key_path + ": move it away to make a new CA");
    if (auto s = create_ca(cert_path, key_path); !s) return s.error();
  }
  auto key = read_key(key_path);
  if (!key) return key.error();
  auto cert = read_cert(cert_path);
  if (!cert) return cert.error();
  if (X509_check_private_key(cert->get(), key->get()) != 1)
    return ca_error(cert_path + " does not match its key " + key_path);
  if (X509_check_ca(cert->get()) == 0) return ca_error(cert_path + " is not a CA certificate");
  return std::make_unique<EgressCa>(*cert, *key, pem_of_cert(cert->get()), new_ec_key());
}

util::Result<EgressCa::Leaf> EgressCa::make_leaf(const std::string& host) const {
  auto cert = new_cert(leaf_key_.get(), host, kLeafDays);
  X509* c = cert.get();
  const std::string san = "DNS:" + host;
  if (X509_set_issuer_name(c, X509_get_subject_name(ca_.get())) != 1 ||
      !add_ext(c, ca_.get(), NID_basic_constraints, "critical,CA:FALSE") ||
      !add_ext(c, ca_.get(), NID_key_usage, "critical,digitalSignature") ||
      !add_ext(c, ca_.get(), NID_ext_key_usage, "serverAuth") ||
      !add_ext(c, ca_.get(), NID_subject_alt_name, san.c_str()) ||
      !add_ext(c, ca_.get(), NID_authority_key_identifier, "keyid:always") ||
      X509_sign(c, ca_key_.get(), EVP_sha256()) <= 0)
    return util::make_error(util::ErrorCode::kInternal, "egress CA: making the certificate of " + host + " failed");
  return Leaf{cert, leaf_key_, pem_of_cert(c)};
}

util::Result<EgressCa::Leaf> EgressCa::leaf_for(const std::string& host) {
  const auto now = std::chrono::system_clock::now();
  {
    std::lock_guard lock(mu_);
    auto it = leaves_.find(host);
    if (it != leaves_.end() && now < it->second.renew_at) return it->second.leaf;
  }
  // Made outside the lock: a signature takes a fraction of a millisecond.
  auto leaf = make_leaf(host);
  if (!leaf) return leaf.error();
  std::lock_guard lock(mu_);
  ++made_;
  leaves_[host] = Cached{*leaf, now + std::chrono::hours(24 * (kLeafDays - 1))};
  return *leaf;
}

util::Result<std::string> EgressCa::write_bundle(const std::string& state_dir, std::string& warning) const {
  const char* env = std::getenv(X509_get_default_cert_file_env());
  const std::string system = env != nullptr && *env != '\0' ? env : X509_get_default_cert_file();
  std::string bundle;
  if (auto text = util::read_file(system, kSystemBundleMax)) {
    bundle = std::move(*text);
    if (!bundle.empty() && bundle.back() != '\n') bundle += '\n';
  } else {
    warning = "egress CA bundle: the system's CAs (" + system + ") cannot be read: " + text.error().message +
              "; jobs trust only the server's CA";
  }
  bundle += ca_pem_;
  const std::string path = state_dir + "/" + kBundleFile;
  if (auto s = util::write_file_atomic(path, bundle, 0644); !s) return s.error();
  return path;
}

uint64_t EgressCa::leaves_made() const {
  std::lock_guard lock(mu_);
  return made_;
}

}  // namespace network
