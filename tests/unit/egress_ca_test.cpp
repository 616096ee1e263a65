// The egress CA: made once in the state directory with a private key, read
// back the same, refused when its files are not as it left them; the host
// certificates it makes chain to it, name their host only, and are kept.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <fstream>

#include "server/network/egress_ca.h"
#include "tests/unit/temp_dir.h"

namespace {

// Whether leaf verifies against ca_pem alone, as a TLS client would check a server.
bool chains(const std::string& ca_pem, X509* leaf) {
  BIO* bio = BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size()));
  X509* ca = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  REQUIRE(ca != nullptr);
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca);
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, leaf, nullptr);
  X509_STORE_CTX_set_purpose(ctx, X509_PURPOSE_SSL_SERVER);
  const bool ok = X509_verify_cert(ctx) == 1;
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  X509_free(ca);
  return ok;
}

}  // namespace

TEST_CASE("the CA is made once, its key private, and read back the same") {
  unit::TempDir dir("egress-ca");
  auto a = network::EgressCa::open(dir.path);
  REQUIRE(a);
  struct stat st {};
  REQUIRE(::stat((dir.path + "/" + network::EgressCa::kKeyFile).c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK((*a)->ca_pem().find("BEGIN CERTIFICATE") != std::string::npos);
  auto b = network::EgressCa::open(dir.path);
  REQUIRE(b);
  CHECK((*b)->ca_pem() == (*a)->ca_pem());
}

TEST_CASE("a host's certificate chains to the CA and names that host only") {
  unit::TempDir dir("egress-ca");
  auto a = network::EgressCa::open(dir.path);
  REQUIRE(a);
  auto leaf = (*a)->leaf_for("api.example.com");
  REQUIRE(leaf);
  CHECK(chains((*a)->ca_pem(), leaf->cert.get()));
  CHECK(X509_check_host(leaf->cert.get(), "api.example.com", 0, 0, nullptr) == 1);
  CHECK(X509_check_host(leaf->cert.get(), "other.example.com", 0, 0, nullptr) != 1);
  CHECK(X509_check_host(leaf->cert.get(), "example.com", 0, 0, nullptr) != 1);
  CHECK(X509_check_private_key(leaf->cert.get(), leaf->key.get()) == 1);
  CHECK(X509_check_ca(leaf->cert.get()) == 0);
  // Another server's CA does not vouch for it.
  unit::TempDir other("egress-ca");
  auto b = network::EgressCa::open(other.path);
  REQUIRE(b);
  CHECK_FALSE(chains((*b)->ca_pem(), leaf->cert.get()));
}

TEST_CASE("a host's certificate is made once and kept") {
  unit::TempDir dir("egress-ca");
  auto a = network::EgressCa::open(dir.path);
  REQUIRE(a);
  auto one = (*a)->leaf_for("api.example.com");
  auto two = (*a)->leaf_for("api.example.com");
  REQUIRE(one);
  REQUIRE(two);
  CHECK(one->pem == two->pem);
  CHECK((*a)->leaves_made() == 1);
  REQUIRE((*a)->leaf_for("files.example.com"));
  CHECK((*a)->leaves_made() == 2);
}

TEST_CASE("a CA whose files are not as it left them is refused, naming the file") {
  unit::TempDir dir("egress-ca");
  REQUIRE(network::EgressCa::open(dir.path));
  const std::string key = dir.path + "/" + network::EgressCa::kKeyFile;
  const std::string cert = dir.path + "/" + network::EgressCa::kCertFile;
  ::chmod(key.c_str(), 0644);
  auto readable = network::EgressCa::open(dir.path);
  REQUIRE_FALSE(readable);
  CHECK(readable.error().message.find(key + ": others may read or write it (mode 0644)") != std::string::npos);
  ::chmod(key.c_str(), 0600);
  ::unlink(key.c_str());
  auto keyless = network::EgressCa::open(dir.path);
  REQUIRE_FALSE(keyless);
  CHECK(keyless.error().message.find("without its key") != std::string::npos);
  // A key that is not the certificate's.
  unit::TempDir other("egress-ca");
  REQUIRE(network::EgressCa::open(other.path));
  std::ifstream in(other.path + "/" + network::EgressCa::kKeyFile);
  std::string pem((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  {
    std::ofstream out(key);
    out << pem;
  }
  ::chmod(key.c_str(), 0600);
  auto mismatched = network::EgressCa::open(dir.path);
  REQUIRE_FALSE(mismatched);
  CHECK(mismatched.error().message.find("does not match its key") != std::string::npos);
}
