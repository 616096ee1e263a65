// Receipts: a signed statement of what a job ran and what came of it (its
// code, inputs, runtime, policy, boundary and limits by digest; its status,
// output, artifacts and check verdicts by digest), so a second party can
// tell later which code ran on which inputs under which boundary. The
// server's Ed25519 key is <state>/receipt-key.pem (0600, made at first
// start); its public half is served and printed for verifiers.
//
// A receipt is {"statement": {...}, "alg": "Ed25519", "key_id": "<hex>",
// "signature": "<base64>"}: the signature is over canonical_statement(),
// the statement as JSON with keys sorted, no whitespace, non-ASCII and
// control characters as \u escapes, and integers only (what Python's
// json.dumps(s, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
// gives too).
#pragma once
#include <cstdint>
#include <mutex>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/broker/job.h"
#include "server/broker/job_records.h"
#include "server/policy/policy.h"
#include "server/sandbox/spec.h"
#include "server/util/result.h"
#include "server/util/signing.h"

namespace broker {

inline constexpr const char* kReceiptFormat = "throwbox-receipt/1";
inline constexpr const char* kReceiptKeyFile = "receipt-key.pem";

std::string canonical_statement(const nlohmann::json& statement);

// What the runtime ran on: its command, its interpreter (command[0] as the
// kernel resolves it) and that file's sha256, and a digest of the host's
// installed packages and versions (the dpkg database); fingerprint is the
// sha256 of the three. Kept per interpreter and recomputed when either
// file changes (a stat per call); the first of() for an interpreter reads
// it whole (node's is 99 MB: about a second), so the server takes its pool
// runtimes' fingerprints on a thread of their own at start. Any thread.
class RuntimeFingerprints {
 public:
  nlohmann::json of(const policy::Runtime& runtime);

 private:
  struct Entry {
    std::string stamp;  // the files' identity and times when computed
    std::vector<std::string> command;
    nlohmann::json fingerprint;  // what of() returns, less the runtime's name
  };
  // The installed packages' digest, for the dpkg database as it was when read.
  std::string packages_sha256();

  std::mutex mu_;
  std::map<std::string, Entry> by_command0_;      // guarded by mu_
  std::string packages_stamp_, packages_sha256_;  // guarded by mu_
};

// The facts of one job a statement is made of.
struct ReceiptFacts {
  std::string job_id;
  std::string tenant_digest;
  nlohmann::json runtime;  // RuntimeFingerprints::of
  std::string code_sha256;
  std::vector<InputRef> inputs;
  std::string policy_sha256;
  const sandbox::LaunchSpec* spec = nullptr;  // null: the job never had one
  std::string network;                        // the profile's name, "" for none
  bool workspace = false;
  const JobResult* result = nullptr;
  int64_t started_ms = 0;  // wall clock
  int64_t ended_ms = 0;
};
nlohmann::json receipt_statement(const ReceiptFacts& facts);

class ReceiptSigner {
 public:
  // The key in <state_dir>/receipt-key.pem, made when there is none.
  static util::Result<ReceiptSigner> open(const std::string& state_dir);
  explicit ReceiptSigner(util::SigningKey key);

  nlohmann::json sign(nlohmann::json statement) const;
  // HMAC of the tenant's name under this key: the same tenant gives the
  // same digest on this server; the name cannot be read back or guessed
  // from it without the key.
  std::string tenant_digest(const std::string& tenant) const;
  // {"alg", "key_id", "public_key_pem"}: what GET /.well-known/throwbox-receipt-key serves.
  nlohmann::json public_key_json() const;

 private:
  util::SigningKey key_;
  std::string key_id_;
};

// An error (kInvalidArgument) saying what is wrong when the receipt is not
// exactly one this key signed; its statement when it is.
util::Result<nlohmann::json> verify_receipt(const nlohmann::json& receipt, const util::VerifyKey& key);

}  // namespace broker
