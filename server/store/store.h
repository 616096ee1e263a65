// The tenant-scoped, content-addressed store for inputs and artifacts.
// Thread-safe (metadata files are written atomically; blobs are immutable).
// Handles are random and opaque; a handle of another tenant reads as unknown.
#pragma once
#include <atomic>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "server/util/result.h"

namespace store {

struct InputRecord {
  std::string input_id;
  std::string name;
  uint64_t size = 0;
  std::string sha256;
  std::string media_type;
  std::string blob_path;  // host path, never shown to a client
};

struct ArtifactRecord {
  std::string artifact_id;
  std::string job_id;
  std::string name;  // relative to /outputs
  uint64_t size = 0;
  std::string sha256;
  std::string media_type;
  std::string verdict;  // accepted | sanitized
  std::string reason;
  std::string blob_path;
};

// Name of a file inside /inputs: a single path component, printable UTF-8.
util::Status validate_input_name(const std::string& name);
// Media type from the name and a look at the content.
std::string guess_media_type(const std::string& name, const std::string& content);
bool is_text_media_type(const std::string& media_type);
// throwbox://artifacts/<id>, the resource URI of an artifact.
std::string artifact_uri(const std::string& artifact_id);
// The id inside such a URI, or "" when it is not one.
std::string artifact_id_from_uri(const std::string& uri);

// An artifact above limits.artifact_inline_max_bytes is read in parts of
// exactly part_bytes (the last one shorter): throwbox://artifacts/<id>/parts/<k>.
struct ArtifactPart {
  std::string artifact_id;
  uint64_t index = 0;
};
std::string artifact_part_uri(const std::string& artifact_id, uint64_t index);
// The id and index inside such a URI (k in decimal without leading zeros), or
// nullopt when it is not one.
std::optional<ArtifactPart> artifact_part_from_uri(const std::string& uri);
inline uint64_t artifact_parts(uint64_t size, uint64_t part_bytes) { return (size + part_bytes - 1) / part_bytes; }

// What one tenant keeps in the store: the bytes of its files (each content
// once) and how many inputs and artifacts name them.
struct TenantUsage {
  uint64_t bytes = 0;
  uint64_t records = 0;
};

// What a client is told when the store could not keep a file: the cause,
// never the host's paths ("the store is full ..."); an error that is not
// the store's I/O (a bad name, a bad tenant) is passed as it is.
std::string client_message(const util::Error& error);

class Store {
 public:
  // Records and blobs under root (the state directory unless the server is
  // given a store of its own, which several servers may share: every file is
  // written whole and renamed into place, blobs are named by their content,
  // and a tenant's writes and the janitor's removals take the tenant's lock
  // file in turn, across servers).
  explicit Store(std::string state_dir, std::string root = "");

  util::Status check_tenant(const std::string& tenant) const;
  // The most one tenant may keep (admission.store_bytes_per_tenant_max and
  // admission.store_files_per_tenant_max); until set, no bound. A put that
  // would pass either fails kTooLarge, its message starting kQuotaFull; one
  // that names what is already kept (the same upload again) does not.
  void set_tenant_quota(uint64_t bytes_max, uint64_t records_max);
  static constexpr const char* kQuotaFull = "the tenant's share of the store is full";
  // Counted from the tenant's directory (what every server sharing the store wrote).
  TenantUsage tenant_usage(const std::string& tenant) const;
  // media_type: as sniffed by the caller (the gate); empty: guessed here.
  util::Result<InputRecord> put_input(const std::string& tenant, const std::string& name, const std::string& content,
                                      const std::string& media_type = "");
  util::Result<InputRecord> get_input(const std::string& tenant, const std::string& input_id) const;
  util::Result<ArtifactRecord> put_artifact(const std::string& tenant, ArtifactRecord record,
                                            const std::string& content);
  util::Result<ArtifactRecord> get_artifact(const std::string& tenant, const std::string& artifact_id) const;
  // The tenant's artifacts, newest first, at most `limit`.
  std::vector<ArtifactRecord> list_artifacts(const std::string& tenant, size_t limit) const;
  // Removes inputs and artifacts older than their TTL, then blobs no record
  // references (only blobs older than the shorter TTL, so a blob just reused
  // by a new record is never taken). Returns how many files were removed.
  size_t expire(uint64_t inputs_ttl_s, uint64_t artifacts_ttl_s);
  util::Result<std::string> read_blob(const std::string& blob_path, uint64_t max_bytes) const;
  // Bytes [offset, offset + length) of a blob, read from there (pread) rather
  // than the whole file; fewer at its end.
  util::Result<std::string> read_blob_range(const std::string& blob_path, uint64_t offset, uint64_t length) const;

  // This server's own directory (scratch, caches, its ledger file, its keys).
  const std::string& state_dir() const { return state_dir_; }
  // Where records and blobs live (== state_dir() unless a store was given).
  const std::string& root() const { return root_; }

 private:
  std::string tenant_dir(const std::string& tenant) const;
  // With the tenant's lock held: the blob there (refreshed) or written, once
  // the quota has room for it and for one more record, which it counts
  // (`used`: what the tenant kept before, to put back if the record fails).
  util::Result<std::string> put_blob_locked(const std::string& tenant, const std::string& sha256,
                                            const std::string& content, TenantUsage& used);
  // The tenant's usage file (tenant lock held): read, counted when missing, written.
  std::string usage_path(const std::string& tenant) const;
  TenantUsage usage_locked(const std::string& tenant) const;
  util::Status set_usage_locked(const std::string& tenant, const TenantUsage& u) const;

  std::string state_dir_;
  std::string root_;
  std::atomic<uint64_t> bytes_max_{std::numeric_limits<uint64_t>::max()};
  std::atomic<uint64_t> records_max_{std::numeric_limits<uint64_t>::max()};
};

}  // namespace store
