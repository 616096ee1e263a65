// Receipts: the key file (made once, 0600, refused when others can read it),
// the canonical form, signing and verification (any byte changed, another
// key, another shape: invalid), the tenant digest and the runtime's
// fingerprint.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "server/broker/receipts.h"
#include "server/util/signing.h"
#include "tests/unit/temp_dir.h"

using nlohmann::json;

namespace {

struct TempDir : unit::TempDir {
  TempDir() : unit::TempDir("receipts") {}
};

json sample_statement() {
  return {{"format", broker::kReceiptFormat},
          {"job_id", "0123456789abcdef"},
          {"tenant_digest", std::string(64, 'a')},
          {"runtime",
           {{"name", "python"},
            {"command", {"/usr/bin/python3", "-I"}},
            {"interpreter", "/usr/bin/python3.11"},
            {"interpreter_sha256", std::string(64, 'b')},
            {"packages_sha256", std::string(64, 'c')},
            {"fingerprint", std::string(64, 'd')}}},
          {"code_sha256", std::string(64, 'e')},
          {"inputs", {{{"name", "bank.csv"}, {"sha256", std::string(64, 'f')}}}},
          {"policy_sha256", std::string(64, '1')},
          {"boundary", {{"layers", {"userns", "seccomp"}}, {"network", nullptr}, {"workspace", false}}},
          {"limits", {{"timeout_ms", 10000}, {"memory_max_bytes", 268435456}}},
          {"status", "completed"},
          {"exit_code", 0},
          {"signal", nullptr},
          {"timed_out", false},
          {"stdout_sha256", std::string(64, '2')},
          {"stderr_sha256", std::string(64, '3')},
          {"stdout_truncated", false},
          {"stderr_truncated", false},
          {"artifacts", {{{"name", "out.csv"}, {"sha256", std::string(64, '4')}, {"verdict", "accepted"}}}},
          {"checks", {{{"name", "totals"}, {"sha256", std::string(64, '5')}, {"verdict", "pass"}}}},
          {"started_at", "2026-12-06T10:00:00.000Z"},
          {"ended_at", "2026-12-06T10:00:01.250Z"}};
}

// Every leaf of j, by JSON pointer.
void leaves(const json& j, const std::string& at, std::vector<std::string>& out) {
  if (j.is_object()) {
    for (auto& [k, v] : j.items()) leaves(v, at + "/" + k, out);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) leaves(j[i], at + "/" + std::to_string(i), out);
  } else {
    out.push_back(at);
  }
}

// The leaf changed by one byte (a string's last character, a number's last
// digit); true, false and null become the nearest other value.
json one_byte_changed(const json& v) {
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    if (s.empty()) return "x";
    s.back() = s.back() == 'x' ? 'y' : 'x';
    return s;
  }
  if (v.is_number_unsigned()) return v.get<uint64_t>() ^ 1u;
  if (v.is_number_integer()) return v.get<int64_t>() ^ 1;
  if (v.is_boolean()) return !v.get<bool>();
  return 0;  // null
}

}  // namespace

TEST_CASE("the key is made once, 0600, and the same key is read back") {
  TempDir dir;
  auto a = broker::ReceiptSigner::open(dir.path);
  REQUIRE(a);
  struct stat st {};
  REQUIRE(::stat((dir.path + "/" + broker::kReceiptKeyFile).c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(st.st_uid == ::geteuid());
  auto b = broker::ReceiptSigner::open(dir.path);
  REQUIRE(b);
  CHECK(a->public_key_json() == b->public_key_json());
  const json pub = a->public_key_json();
  CHECK(pub["alg"] == "Ed25519");
  CHECK(pub["key_id"].get<std::string>().size() == 64);
  CHECK(pub["public_key_pem"].get<std::string>().find("BEGIN PUBLIC KEY") != std::string::npos);
  // No file left beside it by the making.
  size_t files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path)) files += e.is_regular_file() ? 1 : 0;
  CHECK(files == 1);
}

TEST_CASE("a key file others may read, or that is no key, is refused") {
  TempDir dir;
  const std::string path = dir.path + "/" + broker::kReceiptKeyFile;
  REQUIRE(broker::ReceiptSigner::open(dir.path));
  ::chmod(path.c_str(), 0640);
  auto open = broker::ReceiptSigner::open(dir.path);
  REQUIRE_FALSE(open);
  CHECK(open.error().message.find("mode 0640") != std::string::npos);
  CHECK(open.error().message.find(path) != std::string::npos);
  ::chmod(path.c_str(), 0600);
  std::ofstream(path, std::ios::trunc) << "not a key\n";
  auto garbage = broker::ReceiptSigner::open(dir.path);
  REQUIRE_FALSE(garbage);
  CHECK(garbage.error().message.find("not a PEM private key") != std::string::npos);
  ::unlink(path.c_str());
  REQUIRE(::symlink("/etc/hostname", path.c_str()) == 0);
  CHECK_FALSE(broker::ReceiptSigner::open(dir.path));
}

TEST_CASE("canonical form: keys sorted, no spaces, non-ASCII escaped") {
  json s = {{"b", 1}, {"a", "caf\xc3\xa9\n"}, {"c", {{"z", nullptr}, {"y", true}}}};
  CHECK(broker::canonical_statement(s) == R"({"a":"caf\u00e9\n","b":1,"c":{"y":true,"z":null}})");
  // Parsed back and made canonical again: the same bytes.
  CHECK(broker::canonical_statement(json::parse(s.dump(2))) == broker::canonical_statement(s));
}

TEST_CASE("a receipt verifies; any field changed by one byte does not") {
  TempDir dir;
  auto signer = broker::ReceiptSigner::open(dir.path);
  REQUIRE(signer);
  auto key = util::VerifyKey::from_pem(signer->public_key_json()["public_key_pem"].get<std::string>());
  REQUIRE(key);
  const json receipt = signer->sign(sample_statement());
  auto ok = broker::verify_receipt(json::parse(receipt.dump()), *key);
  REQUIRE(ok);
  CHECK((*ok)["job_id"] == "0123456789abcdef");

  std::vector<std::string> paths;
  leaves(receipt, "", paths);
  CHECK(paths.size() > 30);
  for (const std::string& p : paths) {
    json changed = receipt;
    json::json_pointer ptr(p);
    changed[ptr] = one_byte_changed(changed[ptr]);
    INFO("changed: " << p);
    CHECK_FALSE(broker::verify_receipt(changed, *key));
  }
  // One byte of the signature itself.
  auto sig = receipt["signature"].get<std::string>();
  json flipped = receipt;
  sig[10] = sig[10] == 'A' ? 'B' : 'A';
  flipped["signature"] = sig;
  CHECK_FALSE(broker::verify_receipt(flipped, *key));
  // A field added, one removed, an integer written as a float.
  json added = receipt;
  added["statement"]["note"] = "";
  CHECK_FALSE(broker::verify_receipt(added, *key));
  json removed = receipt;
  removed["statement"].erase("stderr_sha256");
  CHECK_FALSE(broker::verify_receipt(removed, *key));
  json as_float = receipt;
  as_float["statement"]["exit_code"] = 0.0;
  CHECK_FALSE(broker::verify_receipt(as_float, *key));
  json outer = receipt;
  outer["extra"] = 1;
  auto refused = broker::verify_receipt(outer, *key);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message.find("unknown field \"extra\"") != std::string::npos);
}

TEST_CASE("a receipt signed by another server's key does not verify") {
  TempDir one, two;
  auto a = broker::ReceiptSigner::open(one.path);
  auto b = broker::ReceiptSigner::open(two.path);
  REQUIRE(a);
  REQUIRE(b);
  auto key_b = util::VerifyKey::from_pem(b->public_key_json()["public_key_pem"].get<std::string>());
  REQUIRE(key_b);
  json receipt = a->sign(sample_statement());
  auto other = broker::verify_receipt(receipt, *key_b);
  REQUIRE_FALSE(other);
  CHECK(other.error().message.find("another key") != std::string::npos);
  // Claiming b's key id does not help: the signature is a's.
  receipt["key_id"] = b->public_key_json()["key_id"];
  auto claimed = broker::verify_receipt(receipt, *key_b);
  REQUIRE_FALSE(claimed);
  CHECK(claimed.error().message.find("does not match") != std::string::npos);
}

TEST_CASE("the tenant digest hides the name and is the key's own") {
  TempDir one, two;
  auto a = broker::ReceiptSigner::open(one.path);
  auto b = broker::ReceiptSigner::open(two.path);
  REQUIRE(a);
  REQUIRE(b);
  const std::string d = a->tenant_digest("alice");
  CHECK(d.size() == 64);
  CHECK(d == a->tenant_digest("alice"));
  CHECK(d != a->tenant_digest("bob"));
  CHECK(d != b->tenant_digest("alice"));
  CHECK(d.find("alice") == std::string::npos);
}

TEST_CASE("a runtime's fingerprint names its interpreter and changes with its command") {
  broker::RuntimeFingerprints fps;
  policy::Runtime rt;
  rt.name = "sh";
  rt.command = {"/bin/sh", "-e"};
  const json a = fps.of(rt);
  CHECK(a["name"] == "sh");
  CHECK(a["interpreter"].get<std::string>().front() == '/');
  CHECK(a["interpreter_sha256"].get<std::string>().size() == 64);
  CHECK(a["fingerprint"].get<std::string>().size() == 64);
  CHECK(fps.of(rt) == a);  // kept, and the same
  rt.command = {"/bin/sh"};
  CHECK(fps.of(rt)["fingerprint"] != a["fingerprint"]);
}
