// Store layout under its root (the state directory, or a store of its own
// several servers share):
//   tenants/<tenant>/blobs/<sha256>          content, 0444 (bound read-only into sandboxes)
//   tenants/<tenant>/blobs/.lock             flock, exclusive: held by each put of the
//                                            tenant's (its quota counted, its files
//                                            written) and by each removal the janitor makes
//   tenants/<tenant>/usage                   "<bytes> <records>": what the tenant keeps,
//                                            moved by each put, counted again from the
//                                            directory by each janitor's round (lock held)
//   tenants/<tenant>/inputs/<input_id>.json  metadata
//   tenants/<tenant>/artifacts/<id>.json     metadata
// Server threads only; never touched from inside a sandbox.
#include "server/store/store.h"

#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <set>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "server/util/crypto.h"
#include "server/util/fd.h"
#include "server/util/fs.h"
#include "server/util/text.h"

namespace store {
namespace {

using nlohmann::json;
constexpr size_t kMetaMaxBytes = 64 * 1024;

// The lock file of a tenant's blobs directory (flock: on NFS, the kernel
// takes it as a lock the server knows). One tenant's lock: another tenant's
// put never waits for it, however slow a write is.
constexpr const char* kBlobLock = ".lock";

class BlobLock {
 public:
  BlobLock(const std::string& dir, int how) {
    const std::string path = dir + "/" + kBlobLock;
    fd_.reset(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd_.valid()) {
      error_ = util::call_error("open", path, errno);
      return;
    }
    while (::flock(fd_.get(), how) != 0) {
      if (errno == EINTR) continue;
      error_ = util::call_error("flock", path, errno);
      fd_.reset();
      return;
    }
  }
  bool held() const { return fd_.valid(); }
  const std::string& error() const { return error_; }

 private:
  util::UniqueFd fd_;  // closing it unlocks
  std::string error_;
};

// Handles are 32 lowercase hex digits; anything else is unknown before any lookup.
bool is_handle(const std::string& id) {
  return id.size() == 32 && id.find_first_not_of("0123456789abcdef") == std::string::npos;
}

util::Error not_found(const char* what) {
  return util::make_error(
      util::ErrorCode::kNotFound,
      std::string("unknown ") + what + " (it does not exist, has expired, or belongs to another tenant)");
}

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::char_traits<char>::length(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// A tenant's blobs directory and its `sub` directory made, and the tenant's
// lock taken (released with the returned object).
util::Result<std::unique_ptr<BlobLock>> lock_tenant(const std::string& tenant_dir, const char* sub) {
  const std::string blobs = tenant_dir + "/blobs";
  if (auto s = util::make_dirs(blobs, 0700); !s) return s.error();
  if (auto s = util::make_dirs(tenant_dir + "/" + sub, 0700); !s) return s.error();
  auto lock = std::make_unique<BlobLock>(blobs, LOCK_EX);
  if (!lock->held()) return util::make_error(util::ErrorCode::kIo, lock->error());
  return lock;
}

// A record's file: <32 hex>.json.
bool is_record_file(const char* name) {
  const std::string n(name);
  return n.size() == 37 && ends_with(n, ".json") && is_handle(n.substr(0, 32));
}

// Calls f(dir_fd, name) for each entry of dir but . and ..; a directory
// that is not there has none.
template <typename F>
void each_entry(const std::string& dir, F&& f) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (const struct dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    f(::dirfd(d), e->d_name);
  }
  ::closedir(d);
}

util::Error quota_full(const std::string& why) {
  return util::make_error(util::ErrorCode::kTooLarge,
                          std::string(Store::kQuotaFull) + ": " + why +
                              "; files go when they expire (retention.inputs_ttl_s, retention.artifacts_ttl_s)");
}

}  // namespace

util::Status validate_input_name(const std::string& name) {
  if (const char* why = util::file_name_problem(name))
    return util::make_error(util::ErrorCode::kInvalidArgument, std::string("name: ") + why);
  return util::ok_status();
}

std::string guess_media_type(const std::string& name, const std::string& content) {
  static const std::pair<const char*, const char*> kByExtension[] = {
      {".csv", "text/csv"},          {".tsv", "text/tab-separated-values"},
      {".json", "application/json"}, {".md", "text/markdown"},
      {".txt", "text/plain"},        {".png", "image/png"},
      {".jpg", "image/jpeg"},        {".jpeg", "image/jpeg"},
      {".gif", "image/gif"},         {".pdf", "application/pdf"},
      {".log", "text/plain"},        {".py", "text/x-python"}};
  bool text = util::is_valid_utf8(content) && content.find('\0') == std::string::npos;
  for (auto& [ext, type] : kByExtension) {
    if (!ends_with(name, ext)) continue;
    bool declared_text = is_text_media_type(type);
    if (declared_text == text) return type;
    break;
  }
  return text ? "text/plain" : "application/octet-stream";
}

bool is_text_media_type(const std::string& t) { return t.rfind("text/", 0) == 0 || t == "application/json"; }

std::string artifact_uri(const std::string& artifact_id) { return "throwbox://artifacts/" + artifact_id; }

std::string artifact_id_from_uri(const std::string& uri) {
  static const std::string kPrefix = "throwbox://artifacts/";
  if (uri.rfind(kPrefix, 0) != 0) return "";
  std::string id = uri.substr(kPrefix.size());
  return is_handle(id) ? id : "";
}

std::string artifact_part_uri(const std::string& artifact_id, uint64_t index) {
  return artifact_uri(artifact_id) + "/parts/" + std::to_string(index);
}

std::optional<ArtifactPart> artifact_part_from_uri(const std::string& uri) {
  static const std::string kPrefix = "throwbox://artifacts/";
  static const std::string kParts = "/parts/";
  if (uri.rfind(kPrefix, 0) != 0) return std::nullopt;
  const size_t slash = uri.find('/', kPrefix.size());
  if (slash == std::string::npos || uri.compare(slash, kParts.size(), kParts) != 0) return std::nullopt;
  std::string id = uri.substr(kPrefix.size(), slash - kPrefix.size());
  std::string k = uri.substr(slash + kParts.size());
  // One spelling per part: "7", never "07", "+7" or "7 "; 18 digits at most (no overflow).
  if (!is_handle(id) || k.empty() || k.size() > 18 || k.find_first_not_of("0123456789") != std::string::npos ||
      (k.size() > 1 && k[0] == '0'))
    return std::nullopt;
  return ArtifactPart{id, std::stoull(k)};
}

std::string client_message(const util::Error& error) {
  if (error.code != util::ErrorCode::kIo) return error.message;
  const std::string& m = error.message;
  if (m.find("ENOSPC") != std::string::npos || m.find("EDQUOT") != std::string::npos)
    return "the store is full: no space is left for this file (the server's log names the file); retry later";
  if (m.find("EROFS") != std::string::npos) return "the store is read-only: nothing was written";
  if (m.find("EACCES") != std::string::npos || m.find("EPERM") != std::string::npos)
    return "the store refused the write (permissions): nothing was written";
  return "the store could not keep the file (an I/O error the server's log names): nothing was written";
}

Store::Store(std::string state_dir, std::string root)
    : state_dir_(std::move(state_dir)), root_(root.empty() ? state_dir_ : std::move(root)) {}

util::Status Store::check_tenant(const std::string& tenant) const {
  if (tenant.empty() || tenant.size() > 64 ||
      tenant.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") != std::string::npos)
    return util::make_error(util::ErrorCode::kInvalidArgument, "tenant names are 1-64 of [a-z0-9_-]");
  return util::ok_status();
}

std::string Store::tenant_dir(const std::string& tenant) const { return root_ + "/tenants/" + tenant; }

void Store::set_tenant_quota(uint64_t bytes_max, uint64_t records_max) {
  bytes_max_ = bytes_max;
  records_max_ = records_max;
}

TenantUsage Store::tenant_usage(const std::string& tenant) const {
  TenantUsage u;
  if (!check_tenant(tenant)) return u;
  const std::string dir = tenant_dir(tenant);
  each_entry(dir + "/blobs", [&](int fd, const char* name) {
    struct stat st {};
    if (std::strcmp(name, kBlobLock) != 0 && ::fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
      u.bytes += static_cast<uint64_t>(st.st_size);
  });
  for (const char* sub : {"/inputs", "/artifacts"})
    each_entry(dir + sub, [&](int, const char* name) { u.records += is_record_file(name) ? 1 : 0; });
  return u;
}

std::string Store::usage_path(const std::string& tenant) const { return tenant_dir(tenant) + "/usage"; }

TenantUsage Store::usage_locked(const std::string& tenant) const {
  if (auto text = util::read_file(usage_path(tenant), 64)) {
    unsigned long long bytes = 0, records = 0;
    if (std::sscanf(text->c_str(), "%llu %llu", &bytes, &records) == 2) return TenantUsage{bytes, records};
  }
  return tenant_usage(tenant);  // none yet, or unreadable: counted
}

util::Status Store::set_usage_locked(const std::string& tenant, const TenantUsage& u) const {
  return util::write_file_atomic(usage_path(tenant), std::to_string(u.bytes) + " " + std::to_string(u.records) + "\n",
                                 0600);
}

util::Result<std::string> Store::put_blob_locked(const std::string& tenant, const std::string& sha256,
                                                 const std::string& content, TenantUsage& used) {
  const std::string path = tenant_dir(tenant) + "/blobs/" + sha256;
  const bool there = ::access(path.c_str(), F_OK) == 0;
  // Read with the lock held: what every server sharing the store wrote, and
  // nothing written meanwhile.
  used = usage_locked(tenant);
  const uint64_t records_max = records_max_, bytes_max = bytes_max_;
  if (used.records >= records_max)
    return quota_full("it keeps " + std::to_string(used.records) + " inputs and artifacts, the most " +
                      "admission.store_files_per_tenant_max allows");
  if (!there && (content.size() > bytes_max || used.bytes > bytes_max - content.size()))
    return quota_full("this file's " + std::to_string(content.size()) + " bytes and the " + std::to_string(used.bytes) +
                      " it keeps would pass admission.store_bytes_per_tenant_max (" + std::to_string(bytes_max) + ")");
  // Moved before anything is written: a put a crash cuts short is counted
  // (never missed) until the janitor's next round counts again.
  if (auto s = set_usage_locked(tenant, {used.bytes + (there ? 0 : content.size()), used.records + 1}); !s)
    return s.error();
  if (there) {
    // Content-addressed: already there. Fresh mtime, so the janitor keeps it.
    ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
    return path;
  }
  // World-readable file inside 0700 directories: only a read-only bind reaches it.
  if (auto s = util::write_file_atomic(path, content, 0444); !s) {
    (void)set_usage_locked(tenant, used);
    return s.error();
  }
  return path;
}

util::Result<InputRecord> Store::put_input(const std::string& tenant, const std::string& name,
                                           const std::string& content, const std::string& media_type) {
  if (auto s = check_tenant(tenant); !s) return s.error();
  if (auto s = validate_input_name(name); !s) return s.error();
  InputRecord r;
  r.name = name;
  r.size = content.size();
  r.sha256 = util::sha256_hex(content);
  r.media_type = media_type.empty() ? guess_media_type(name, content) : media_type;
  const std::string dir = tenant_dir(tenant) + "/inputs";
  auto lock = lock_tenant(tenant_dir(tenant), "inputs");
  if (!lock) return lock.error();
  // Idempotent: the same name and content give the same input_id (its blob
  // refreshed), whatever the quota.
  std::string key_path = dir + "/by-content-" + util::sha256_hex(name + '\0' + r.sha256);
  if (auto existing = util::read_file(key_path, 64); existing && is_handle(*existing)) {
    if (auto rec = get_input(tenant, *existing); rec && ::utimensat(AT_FDCWD, rec->blob_path.c_str(), nullptr, 0) == 0)
      return rec;
  }
  TenantUsage before;
  auto blob = put_blob_locked(tenant, r.sha256, content, before);
  if (!blob) return blob.error();
  r.blob_path = *blob;
  r.input_id = util::random_id();
  json meta{
      {"input_id", r.input_id}, {"name", r.name}, {"size", r.size}, {"sha256", r.sha256}, {"media_type", r.media_type}};
  const std::string meta_path = dir + "/" + r.input_id + ".json";
  if (auto s = util::write_file_atomic(meta_path, meta.dump(), 0600); !s) {
    (void)set_usage_locked(tenant, before);  // its blob, if new, is the janitor's to count and remove
    return s.error();
  }
  if (auto s = util::write_file_atomic(key_path, r.input_id, 0600); !s) {
    ::unlink(meta_path.c_str());
    (void)set_usage_locked(tenant, before);
    return s.error();
  }
  return r;
}

util::Result<InputRecord> Store::get_input(const std::string& tenant, const std::string& id) const {
  if (!check_tenant(tenant) || !is_handle(id)) return not_found("input_id");
  auto text = util::read_file(tenant_dir(tenant) + "/inputs/" + id + ".json", kMetaMaxBytes);
  if (!text) return not_found("input_id");
  json m = json::parse(*text, nullptr, false);
  if (m.is_discarded()) return util::make_error(util::ErrorCode::kIo, "input metadata is corrupt: " + id);
  InputRecord r;
  r.input_id = id;
  r.name = m.value("name", "");
  r.size = m.value("size", uint64_t{0});
  r.sha256 = m.value("sha256", "");
  r.media_type = m.value("media_type", "");
  r.blob_path = tenant_dir(tenant) + "/blobs/" + r.sha256;
  return r;
}

util::Result<ArtifactRecord> Store::put_artifact(const std::string& tenant, ArtifactRecord r,
                                                 const std::string& content) {
  if (auto s = check_tenant(tenant); !s) return s.error();
  r.size = content.size();
  r.sha256 = util::sha256_hex(content);
  const std::string dir = tenant_dir(tenant) + "/artifacts";
  auto lock = lock_tenant(tenant_dir(tenant), "artifacts");
  if (!lock) return lock.error();
  TenantUsage before;
  auto blob = put_blob_locked(tenant, r.sha256, content, before);
  if (!blob) return blob.error();
  r.blob_path = *blob;
  r.artifact_id = util::random_id();
  json meta{{"artifact_id", r.artifact_id}, {"job_id", r.job_id},         {"name", r.name},       {"size", r.size},
            {"sha256", r.sha256},           {"media_type", r.media_type}, {"verdict", r.verdict}, {"reason", r.reason}};
  if (auto s = util::write_file_atomic(dir + "/" + r.artifact_id + ".json", meta.dump(), 0600); !s) {
    (void)set_usage_locked(tenant, before);
    return s.error();
  }
  return r;
}

util::Result<ArtifactRecord> Store::get_artifact(const std::string& tenant, const std::string& id) const {
  if (!check_tenant(tenant) || !is_handle(id)) return not_found("artifact_id");
  auto text = util::read_file(tenant_dir(tenant) + "/artifacts/" + id + ".json", kMetaMaxBytes);
  if (!text) return not_found("artifact_id");
  json m = json::parse(*text, nullptr, false);
  if (m.is_discarded()) return util::make_error(util::ErrorCode::kIo, "artifact metadata is corrupt: " + id);
  ArtifactRecord r;
  r.artifact_id = id;
  r.job_id = m.value("job_id", "");
  r.name = m.value("name", "");
  r.size = m.value("size", uint64_t{0});
  r.sha256 = m.value("sha256", "");
  r.media_type = m.value("media_type", "");
  r.verdict = m.value("verdict", "");
  r.reason = m.value("reason", "");
  r.blob_path = tenant_dir(tenant) + "/blobs/" + r.sha256;
  return r;
}

std::vector<ArtifactRecord> Store::list_artifacts(const std::string& tenant, size_t limit) const {
  std::vector<std::pair<std::filesystem::file_time_type, std::string>> found;
  if (!check_tenant(tenant)) return {};
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator(tenant_dir(tenant) + "/artifacts", ec)) {
    std::string file = e.path().filename().string();
    if (file.size() != 37 || !ends_with(file, ".json")) continue;
    found.emplace_back(e.last_write_time(ec), file.substr(0, 32));
  }
  std::sort(found.begin(), found.end(), std::greater<>());
  std::vector<ArtifactRecord> out;
  for (auto& [_, id] : found) {
    if (out.size() >= limit) break;
    if (auto r = get_artifact(tenant, id)) out.push_back(*r);
  }
  return out;
}

size_t Store::expire(uint64_t inputs_ttl_s, uint64_t artifacts_ttl_s) {
  namespace fs = std::filesystem;
  // The walk takes no lock, so uploads and job results are not stalled behind
  // it: files are written whole (a rename) and only this function removes
  // them. Each removal takes the tenant's lock for one unlink and looks at
  // the file again first: a blob that a put reused meanwhile (it refreshes
  // the mtime with the lock held) is no longer old, so it stays.
  auto older_than = [](const fs::path& p, uint64_t ttl_s) {
    std::error_code ec;
    auto t = fs::last_write_time(p, ec);
    return !ec && fs::file_time_type::clock::now() - t > std::chrono::seconds(ttl_s);
  };
  size_t removed = 0;
  auto remove_if_still_old = [&](const fs::path& blobs_dir, const fs::path& p, uint64_t ttl_s) {
    BlobLock lock(blobs_dir.string(), LOCK_EX);
    std::error_code ec;
    if (lock.held() && older_than(p, ttl_s) && fs::remove(p, ec)) ++removed;
  };
  std::error_code ec;
  for (auto& tenant : fs::directory_iterator(root_ + "/tenants", ec)) {
    std::set<std::string> referenced;
    std::vector<std::pair<fs::path, uint64_t>> stale;
    for (auto [sub, ttl] : {std::pair<const char*, uint64_t>{"inputs", inputs_ttl_s}, {"artifacts", artifacts_ttl_s}}) {
      for (auto& e : fs::directory_iterator(tenant.path() / sub, ec)) {
        if (older_than(e.path(), ttl)) {
          stale.emplace_back(e.path(), ttl);
          continue;
        }
        std::string name = e.path().filename().string();
        if (!ends_with(name, ".json")) continue;
        auto text = util::read_file(e.path().string(), kMetaMaxBytes);
        if (!text) continue;
        json m = json::parse(*text, nullptr, false);
        if (!m.is_discarded() && m.contains("sha256") && m["sha256"].is_string())
          referenced.insert(m["sha256"].get<std::string>());
      }
    }
    for (auto& [path, ttl] : stale) remove_if_still_old(tenant.path() / "blobs", path, ttl);
    // Records written after the walk above refreshed their blob's mtime, so
    // the look again under the lock keeps those blobs too.
    const uint64_t min_ttl = std::min(inputs_ttl_s, artifacts_ttl_s);
    std::vector<fs::path> unreferenced;
    for (auto& e : fs::directory_iterator(tenant.path() / "blobs", ec))
      if (e.path().filename() != kBlobLock && !referenced.count(e.path().filename().string()) &&
          older_than(e.path(), min_ttl))
        unreferenced.push_back(e.path());
    for (auto& path : unreferenced) remove_if_still_old(tenant.path() / "blobs", path, min_ttl);
    // What the tenant keeps, counted again from the directory: the removals
    // above, and any put a crash cut short.
    const std::string name = tenant.path().filename().string();
    if (check_tenant(name) && fs::exists(tenant.path() / "blobs", ec)) {
      BlobLock lock((tenant.path() / "blobs").string(), LOCK_EX);
      if (lock.held()) (void)set_usage_locked(name, tenant_usage(name));
    }
  }
  return removed;
}

util::Result<std::string> Store::read_blob(const std::string& blob_path, uint64_t max_bytes) const {
  return util::read_file(blob_path, max_bytes);
}

util::Result<std::string> Store::read_blob_range(const std::string& blob_path, uint64_t offset, uint64_t length) const {
  util::UniqueFd fd(::open(blob_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd.valid()) return util::make_error(util::ErrorCode::kIo, util::call_error("open", blob_path, errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    return util::make_error(util::ErrorCode::kIo, util::call_error("fstat", blob_path, errno));
  if (!S_ISREG(st.st_mode)) return util::make_error(util::ErrorCode::kIo, blob_path + ": not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  std::string data(offset >= size ? 0 : std::min(length, size - offset), '\0');
  size_t got = 0;
  while (got < data.size()) {
    ssize_t n = ::pread(fd.get(), data.data() + got, data.size() - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return util::make_error(util::ErrorCode::kIo, util::call_error("pread", blob_path, errno));
    if (n == 0) break;  // shorter than fstat said: what is there
    got += static_cast<size_t>(n);
  }
  data.resize(got);
  return data;
}

}  // namespace store
