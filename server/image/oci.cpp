// OCI image layouts: verify, unpack, cache, build (oci.h).
#include "server/image/oci.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/util/crypto.h"
#include "server/util/fd.h"
#include "server/util/fs.h"
#include "server/util/random.h"
#include "server/util/text.h"

namespace image {
namespace {

using nlohmann::json;
using util::ErrorCode;

constexpr size_t kJsonMax = 4 << 20;  // a manifest, a config, an index
constexpr const char* kManifestType = "application/vnd.oci.image.manifest.v1+json";
constexpr const char* kDockerManifestType = "application/vnd.docker.distribution.manifest.v2+json";
constexpr const char* kConfigType = "application/vnd.oci.image.config.v1+json";
constexpr const char* kLayerGzip = "application/vnd.oci.image.layer.v1.tar+gzip";

std::string archive_error(archive* a, const char* otherwise) {
  const char* m = archive_error_string(a);
  return m ? m : otherwise;
}

// A name as the archive gives it in UTF-8 when it can, else its raw bytes
// (a name in another encoding than the locale's).
const char* utf8_or_raw(const char* utf8, const char* raw) { return utf8 ? utf8 : raw; }

util::Error bad(const std::string& message) { return util::make_error(ErrorCode::kInvalidArgument, message); }
util::Error io(const std::string& call, const std::string& what, int err) {
  return util::make_error(ErrorCode::kIo, util::call_error(call, what, err));
}

// openat2 beneath `dir`, never through a symbolic link.
int open_beneath(int dir, const std::string& path, int flags, mode_t mode = 0) {
  struct open_how how {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.mode = (flags & O_CREAT) ? mode : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(::syscall(SYS_openat2, dir, path.c_str(), &how, sizeof how));
}

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1)
      throw std::runtime_error("EVP_DigestInit(sha256) failed");
  }
  void update(const void* p, size_t n) { EVP_DigestUpdate(ctx_.get(), p, n); }
  std::string hex() {
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_.get(), d, &n);
    return util::to_hex(std::string_view(reinterpret_cast<const char*>(d), n));
  }

 private:
  struct Free {
    void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
  };
  std::unique_ptr<EVP_MD_CTX, Free> ctx_;
};

struct Descriptor {
  std::string media_type;
  Digest digest;
  uint64_t size = 0;
};

util::Result<Descriptor> descriptor(const json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("digest") || !j["digest"].is_string() || !j.contains("size") ||
      !j["size"].is_number_unsigned())
    return bad(where + ": a descriptor needs a string digest and a size");
  Descriptor d;
  d.media_type = j.value("mediaType", "");
  auto dg = parse_digest(j["digest"].get<std::string>());
  if (!dg) return bad(where + ": " + dg.error().message);
  d.digest = *dg;
  d.size = j["size"].get<uint64_t>();
  return d;
}

// blobs/sha256/<hex> of the layout, opened beneath it.
util::Result<util::UniqueFd> open_blob(int layout_fd, const std::string& layout, const Digest& d) {
  const std::string rel = "blobs/sha256/" + d.hex;
  int fd = open_beneath(layout_fd, rel, O_RDONLY | O_NOFOLLOW);
  if (fd < 0) return io("open", layout + "/" + rel, errno);
  return util::UniqueFd(fd);
}

// A small JSON blob, read whole and checked against its digest and size.
util::Result<json> read_json_blob(int layout_fd, const std::string& layout, const Descriptor& d, const char* what) {
  if (d.size > kJsonMax) return bad(std::string(what) + " " + d.digest.str() + ": over 4 MiB");
  auto fd = open_blob(layout_fd, layout, d.digest);
  if (!fd) return fd.error();
  std::string text(d.size + 1, '\0');
  size_t got = 0;
  for (;;) {
    ssize_t n = ::read(fd->get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io("read", layout + "/blobs/sha256/" + d.digest.hex, errno);
    if (n == 0) break;
    got += static_cast<size_t>(n);
    if (got == text.size()) break;
  }
  text.resize(got);
  if (got != d.size)
    return bad(std::string(what) + " " + d.digest.str() + ": " + std::to_string(got) + " bytes, its descriptor says " +
               std::to_string(d.size));
  if (util::sha256_hex(text) != d.digest.hex)
    return bad(std::string(what) + " " + d.digest.str() + ": its content does not have that digest");
  auto doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return bad(std::string(what) + " " + d.digest.str() + ": not JSON");
  return doc;
}

struct Manifest {
  Descriptor config;
  std::vector<Descriptor> layers;
};

util::Result<Manifest> read_manifest(int layout_fd, const std::string& layout, const Digest& digest) {
  // The layout marks itself.
  {
    int fd = open_beneath(layout_fd, "oci-layout", O_RDONLY | O_NOFOLLOW);
    if (fd < 0) return bad(layout + ": not an OCI image layout (no oci-layout file: " + std::strerror(errno) + ")");
    ::close(fd);
  }
  auto fd = open_blob(layout_fd, layout, digest);
  if (!fd) return bad(layout + ": no manifest " + digest.str() + " in the layout (" + fd.error().message + ")");
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0 || !S_ISREG(st.st_mode)) return bad(layout + ": manifest is not a regular file");
  Descriptor d{kManifestType, digest, static_cast<uint64_t>(st.st_size)};
  auto doc = read_json_blob(layout_fd, layout, d, "manifest");
  if (!doc) return doc.error();
  const std::string type = doc->value("mediaType", "");
  if (doc->contains("manifests"))
    return bad("manifest " + digest.str() +
               " is an image index: pin the digest of the linux/amd64 image's own manifest (one of its \"manifests\")");
  if (doc->value("schemaVersion", 0) != 2 || (!type.empty() && type != kManifestType && type != kDockerManifestType))
    return bad("manifest " + digest.str() + ": not an OCI image manifest (schemaVersion 2, mediaType " + kManifestType +
               ")");
  Manifest m;
  auto cfg = descriptor((*doc)["config"], "manifest " + digest.str() + " config");
  if (!cfg) return cfg.error();
  m.config = *cfg;
  if (!(*doc)["layers"].is_array() || (*doc)["layers"].empty()) return bad("manifest " + digest.str() + ": no layers");
  for (const json& l : (*doc)["layers"]) {
    auto layer = descriptor(l, "manifest " + digest.str() + " layer");
    if (!layer) return layer.error();
    const std::string& t = layer->media_type;
    const bool known = t == "application/vnd.oci.image.layer.v1.tar" || t == kLayerGzip ||
                       t == "application/vnd.oci.image.layer.v1.tar+zstd" ||
                       t == "application/vnd.docker.image.rootfs.diff.tar.gzip";
    if (!known)
      return bad("layer " + layer->digest.str() + ": media type \"" + t +
                 "\" is not one this server unpacks (tar, tar+gzip, tar+zstd)");
    m.layers.push_back(*layer);
  }
  auto config = read_json_blob(layout_fd, layout, m.config, "config");
  if (!config) return config.error();
  const std::string os = config->value("os", ""), arch = config->value("architecture", "");
  if (os != "linux" || arch != "amd64")
    return bad("image " + digest.str() + " is for " + (os.empty() ? "?" : os) + "/" + (arch.empty() ? "?" : arch) +
               ", not linux/amd64");
  return m;
}

// Removes name in dir, a tree or not, without following links.
util::Status remove_at(int dir, const std::string& name) {
  struct stat st {};
  if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
    return errno == ENOENT ? util::ok_status() : io("fstatat", name, errno);
  if (!S_ISDIR(st.st_mode)) {
    if (::unlinkat(dir, name.c_str(), 0) != 0 && errno != ENOENT) return io("unlinkat", name, errno);
    return util::ok_status();
  }
  int sub = ::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (sub < 0) return io("openat", name, errno);
  ::fchmod(sub, 0700);  // a read-only directory of a lower layer
  DIR* d = ::fdopendir(sub);
  if (!d) {
    ::close(sub);
    return io("fdopendir", name, errno);
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  util::Status s = util::ok_status();
  for (const std::string& n : names)
    if (s) s = remove_at(::dirfd(d), n);
  ::closedir(d);
  if (!s) return s;
  if (::unlinkat(dir, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) return io("rmdir", name, errno);
  return util::ok_status();
}

// An entry's path as components: "./a/b/" -> {a, b}. "..", a NUL and an
// absolute path are refused; "" and "." are the root ({}).
util::Result<std::vector<std::string>> components(const std::string& path) {
  if (!path.empty() && path[0] == '/') return bad("absolute path \"" + util::to_valid_utf8(path) + "\"");
  if (path.size() > 4096) return bad("a path over 4096 bytes");
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    std::string c = path.substr(i, j - i);
    if (c == "..") return bad("path \"" + util::to_valid_utf8(path) + "\" leaves the tree (..)");
    if (!c.empty() && c != ".") out.push_back(std::move(c));
    i = j + 1;
  }
  return out;
}

std::string join(const std::vector<std::string>& parts, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += (i ? "/" : "") + parts[i];
  return s.empty() ? "." : s;
}

// Unpacks layers into a tree (its root open as root_fd).
class Unpacker {
 private:
  // A blob read through libarchive, hashed as it goes.
  struct Source {
    int fd;
    Sha256 hash;
    uint64_t bytes;
    char buf[65536];
    static la_ssize_t read(archive*, void* self, const void** out) {
      auto* s = static_cast<Source*>(self);
      for (;;) {
        ssize_t n = ::read(s->fd, s->buf, sizeof s->buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -1;
        s->hash.update(s->buf, static_cast<size_t>(n));
        s->bytes += static_cast<uint64_t>(n);
        *out = s->buf;
        return n;
      }
    }
  };

 public:
  Unpacker(int root_fd, const Limits& limits) : root_(root_fd), limits_(limits) {}

  util::Status layer(int layout_fd, const std::string& layout, const Descriptor& d) {
    auto fd = open_blob(layout_fd, layout, d.digest);
    if (!fd) return fd.error();
    struct stat st {};
    if (::fstat(fd->get(), &st) != 0 || !S_ISREG(st.st_mode)) return bad("layer " + d.digest.str() + ": not a file");
    if (static_cast<uint64_t>(st.st_size) != d.size)
      return bad("layer " + d.digest.str() + ": " + std::to_string(st.st_size) + " bytes, its descriptor says " +
                 std::to_string(d.size));
    if (d.size > limits_.blob_bytes_max)
      return bad("layer " + d.digest.str() + ": over " + std::to_string(limits_.blob_bytes_max) + " bytes");
    Source src{fd->get(), Sha256(), 0, {}};
    ++layers_;
    if (auto s = entries(src, "layer " + d.digest.str()); !s) return s;
    // Whatever follows the archive's end is hashed too: the digest is the blob's.
    char buf[65536];
    for (;;) {
      ssize_t n = ::read(src.fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      src.hash.update(buf, static_cast<size_t>(n));
      src.bytes += static_cast<uint64_t>(n);
    }
    if (src.bytes != d.size || src.hash.hex() != d.digest.hex)
      return bad("layer " + d.digest.str() + ": its content does not have that digest; nothing of the image is kept");
    return util::ok_status();
  }

  // Every entry of the tar stream src reads (gzip, zstd or plain), applied.
  util::Status entries(Source& src, const std::string& what) {
    std::unique_ptr<archive, decltype(&archive_read_free)> a(archive_read_new(), archive_read_free);
    archive_read_support_filter_gzip(a.get());
    archive_read_support_filter_zstd(a.get());
    archive_read_support_filter_none(a.get());
    archive_read_support_format_tar(a.get());
    if (archive_read_open(a.get(), &src, nullptr, &Source::read, nullptr) != ARCHIVE_OK)
      return bad(what + ": " + archive_error(a.get(), "?"));
    this_layer_.clear();
    for (;;) {
      archive_entry* e = nullptr;
      int r = archive_read_next_header(a.get(), &e);
      if (r == ARCHIVE_EOF) break;
      if (r < ARCHIVE_WARN) return bad(what + ": " + archive_error(a.get(), "not a tar archive"));
      if (++entries_ > limits_.entries_max)
        return bad("image: over " + std::to_string(limits_.entries_max) + " entries");
      const char* raw = utf8_or_raw(archive_entry_pathname_utf8(e), archive_entry_pathname(e));
      const std::string path = raw ? raw : "";
      auto s = entry(a.get(), e, path);
      if (!s) return bad(what + ", \"" + util::to_valid_utf8(path) + "\": " + s.error().message);
    }
    return util::ok_status();
  }

  // A layout archive (a tar of a layout's directory) into the tree, as it is:
  // the layout's own digests are checked once it is read as a layout.
  util::Status layout_archive(const std::string& path) {
    util::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return io("open", path, errno);
    Source src{fd.get(), Sha256(), 0, {}};
    return entries(src, path);
  }

  // Directory modes, applied last (a directory stays writable while layers go in).
  util::Status finish() {
    for (auto it = dir_modes_.rbegin(); it != dir_modes_.rend(); ++it) {
      int fd = open_beneath(root_, it->first, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
      if (fd < 0) continue;  // removed by a later layer
      ::fchmod(fd, it->second);
      ::close(fd);
    }
    ::fchmod(root_, 0555);
    return util::ok_status();
  }

  Unpacked report() const {
    Unpacked u = counts_;
    u.layers = layers_;
    return u;
  }

 private:
  // The parent directory of parts[0..n-1], made where missing (0755).
  util::Result<util::UniqueFd> parent(const std::vector<std::string>& parts) {
    int fd = ::fcntl(root_, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return io("dup", "root", errno);
    util::UniqueFd dir(fd);
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      int sub = open_beneath(dir.get(), parts[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
      if (sub < 0 && errno == ENOENT) {
        if (::mkdirat(dir.get(), parts[i].c_str(), 0755) != 0 && errno != EEXIST)
          return io("mkdirat", join(parts, i + 1), errno);
        ++counts_.directories;
        sub = open_beneath(dir.get(), parts[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
      }
      if (sub < 0)
        return bad(errno == ELOOP || errno == EXDEV || errno == ENOTDIR
                       ? "its directory " + join(parts, i + 1) + " is a symbolic link or not a directory"
                       : util::call_error("open", join(parts, i + 1), errno));
      dir = util::UniqueFd(sub);
    }
    return dir;
  }

  mode_t kept_mode(mode_t mode) {
    if (mode & (S_ISUID | S_ISGID | S_ISVTX)) ++counts_.special_bits_dropped;
    return mode & 0555;
  }

  util::Status entry(archive* a, archive_entry* e, const std::string& path) {
    auto parts = components(path);
    if (!parts) return parts.error();
    const mode_t type = archive_entry_filetype(e);
    if (parts->empty()) {  // the root itself
      if (type != AE_IFDIR) return bad("the root is not a directory");
      return util::ok_status();
    }
    const std::string name = parts->back();
    // Whiteouts remove what lower layers put there, and are not made.
    if (name.rfind(".wh.", 0) == 0) {
      auto dir = parent(*parts);
      if (!dir) return dir.error();
      ++counts_.whiteouts;
      if (name == ".wh..wh..opq") {
        const std::string prefix = parts->size() > 1 ? join(*parts, parts->size() - 1) + "/" : "";
        DIR* d = ::fdopendir(::fcntl(dir->get(), F_DUPFD_CLOEXEC, 0));
        if (!d) return io("fdopendir", join(*parts, parts->size() - 1), errno);
        std::vector<std::string> lower;
        while (dirent* de = ::readdir(d))
          if (std::strcmp(de->d_name, ".") != 0 && std::strcmp(de->d_name, "..") != 0 &&
              !this_layer_.count(prefix + de->d_name))
            lower.emplace_back(de->d_name);
        ::closedir(d);
        for (const std::string& n : lower)
          if (auto s = remove_at(dir->get(), n); !s) return s;
        return util::ok_status();
      }
      const std::string target = name.substr(4);
      if (target.empty() || target == "." || target == "..") return bad("a whiteout of nothing");
      return remove_at(dir->get(), target);
    }
    if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK && !archive_entry_hardlink(e))
      return bad(type == AE_IFCHR || type == AE_IFBLK ? "a device node: an image may hold none"
                                                      : "a FIFO or socket: an image may hold none");
    auto dir = parent(*parts);
    if (!dir) return dir.error();
    const std::string rel = join(*parts, parts->size());
    this_layer_.insert(rel);
    struct stat st {};
    const bool exists = ::fstatat(dir->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (type == AE_IFDIR && !archive_entry_hardlink(e)) {
      if (exists && !S_ISDIR(st.st_mode))
        if (auto s = remove_at(dir->get(), name); !s) return s;
      if (!exists || !S_ISDIR(st.st_mode)) {
        if (::mkdirat(dir->get(), name.c_str(), 0755) != 0) return io("mkdirat", rel, errno);
        ++counts_.directories;
      }
      dir_modes_[rel] = kept_mode(archive_entry_perm(e));
      return util::ok_status();
    }
    if (exists)
      if (auto s = remove_at(dir->get(), name); !s) return s;
    if (const char* target = utf8_or_raw(archive_entry_hardlink_utf8(e), archive_entry_hardlink(e))) {
      auto tparts = components(target);
      if (!tparts) return tparts.error();
      if (tparts->empty()) return bad("a hard link to the root");
      auto tdir = parent(*tparts);
      if (!tdir) return tdir.error();
      if (::linkat(tdir->get(), tparts->back().c_str(), dir->get(), name.c_str(), 0) != 0)
        return io("linkat", util::to_valid_utf8(target), errno);
      ++counts_.hardlinks;
      return util::ok_status();
    }
    if (type == AE_IFLNK) {
      const char* target = utf8_or_raw(archive_entry_symlink_utf8(e), archive_entry_symlink(e));
      if (!target || !*target) return bad("a symbolic link to nothing");
      if (::symlinkat(target, dir->get(), name.c_str()) != 0) return io("symlinkat", rel, errno);
      ++counts_.symlinks;
      return util::ok_status();
    }
    int fd = ::openat(dir->get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return io("openat", rel, errno);
    util::UniqueFd out(fd);
    const void* block = nullptr;
    size_t size = 0;
    la_int64_t offset = 0;
    for (;;) {
      int r = archive_read_data_block(a, &block, &size, &offset);
      if (r == ARCHIVE_EOF) break;
      if (r < ARCHIVE_WARN) return bad(archive_error(a, "unreadable data"));
      if (bytes_ + size > limits_.bytes_max)
        return bad("image: over " + std::to_string(limits_.bytes_max) + " bytes unpacked");
      bytes_ += size;
      const char* p = static_cast<const char*>(block);
      size_t done = 0;
      while (done < size) {
        ssize_t n = ::pwrite(out.get(), p + done, size - done, offset + static_cast<la_int64_t>(done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return io("write", rel, errno);
        done += static_cast<size_t>(n);
      }
    }
    const la_int64_t length = archive_entry_size(e);
    if (length > 0 && ::ftruncate(out.get(), length) != 0) return io("ftruncate", rel, errno);
    if (::fchmod(out.get(), kept_mode(archive_entry_perm(e))) != 0) return io("fchmod", rel, errno);
    counts_.bytes = bytes_;
    ++counts_.files;
    return util::ok_status();
  }

  int root_;
  Limits limits_;
  uint64_t entries_ = 0;
  uint64_t bytes_ = 0;
  uint64_t layers_ = 0;
  Unpacked counts_;
  std::set<std::string> this_layer_;         // paths made by the layer going in
  std::map<std::string, mode_t> dir_modes_;  // by path, applied deepest first
};

}  // namespace

util::Result<Unpacked> unpack(const std::string& layout, const Digest& manifest, const std::string& dest,
                              const Limits& limits) {
  struct stat st {};
  if (::stat(layout.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    // A layout archive: its files first, beside dest, under the same rules
    // and bounds; then read as a layout; then gone.
    const std::string opened = dest + ".layout";
    if (::mkdir(opened.c_str(), 0700) != 0) return io("mkdir", opened, errno);
    util::Status s = util::ok_status();
    {
      util::UniqueFd root(::open(opened.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      Unpacker u(root.get(), limits);
      s = root.valid() ? u.layout_archive(layout) : io("open", opened, errno);
    }
    auto out = s ? unpack(opened, manifest, dest, limits) : util::Result<Unpacked>(s.error());
    (void)remove_at(AT_FDCWD, opened);
    if (!out) return util::make_error(out.error().code, layout + ": " + out.error().message);
    return out;
  }
  util::UniqueFd layout_fd(::open(layout.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!layout_fd.valid()) return io("open", layout, errno);
  auto m = read_manifest(layout_fd.get(), layout, manifest);
  if (!m) return m.error();
  if (::mkdir(dest.c_str(), 0755) != 0) return io("mkdir", dest, errno);
  auto failed = [&](util::Error e) -> util::Result<Unpacked> {
    (void)remove_at(AT_FDCWD, dest);  // nothing of a refused image is kept
    return e;
  };
  util::UniqueFd root(::open(dest.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root.valid()) return failed(io("open", dest, errno));
  Unpacker u(root.get(), limits);
  for (const Descriptor& layer : m->layers)
    if (auto s = u.layer(layout_fd.get(), layout, layer); !s) return failed(s.error());
  if (auto s = u.finish(); !s) return failed(s.error());
  return u.report();
}

util::Result<std::string> ensure_cached(const std::string& cache_dir, const std::string& layout, const Digest& manifest,
                                        const Limits& limits) {
  const std::string final_dir = cache_dir + "/sha256-" + manifest.hex;
  struct stat st {};
  if (::lstat(final_dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return final_dir;
  if (auto s = util::make_dirs(cache_dir, 0755); !s) return s.error();
  const std::string tmp = cache_dir + "/.unpacking-" + util::random_id();
  auto u = unpack(layout, manifest, tmp, limits);
  if (!u) return u.error();
  if (::rename(tmp.c_str(), final_dir.c_str()) != 0) {
    const int err = errno;
    (void)remove_at(AT_FDCWD, tmp);  // read-only by now: remove_at makes each directory writable first
    if ((err == EEXIST || err == ENOTEMPTY) && ::lstat(final_dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      return final_dir;  // another process unpacked it first
    return io("rename", final_dir, err);
  }
  return final_dir;
}

namespace {

// Writes a gzip stream to fd and hashes both what goes in and what comes out.
class GzipSink {
 public:
  explicit GzipSink(int fd) : fd_(fd) {
    // windowBits 15 + 16: a gzip header with no name and modification time 0.
    if (deflateInit2(&z_, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
      throw std::runtime_error("deflateInit2 failed");
  }
  ~GzipSink() { deflateEnd(&z_); }
  bool write(const void* p, size_t n, int flush = Z_NO_FLUSH) {
    plain_.update(p, n);
    z_.next_in = static_cast<Bytef*>(const_cast<void*>(p));
    z_.avail_in = static_cast<uInt>(n);
    unsigned char out[65536];
    int r = Z_OK;
    do {
      z_.next_out = out;
      z_.avail_out = sizeof out;
      r = deflate(&z_, flush);
      if (r == Z_STREAM_ERROR) return false;
      const size_t have = sizeof out - z_.avail_out;
      packed_.update(out, have);
      packed_bytes_ += have;
      if (!util::write_all(fd_, out, have)) return false;
    } while (z_.avail_out == 0 || (flush == Z_FINISH && r != Z_STREAM_END));
    return true;
  }
  bool finish() { return write(nullptr, 0, Z_FINISH); }
  std::string plain_hex() { return plain_.hex(); }
  std::string packed_hex() { return packed_.hex(); }
  uint64_t packed_bytes() const { return packed_bytes_; }

 private:
  int fd_;
  z_stream z_{};
  Sha256 plain_, packed_;
  uint64_t packed_bytes_ = 0;
};

struct Walked {
  std::string rel;  // "usr/bin/python3"
  struct stat st;
};

util::Status walk(const std::string& root, const std::string& rel, std::vector<Walked>& out) {
  const std::string path = rel.empty() ? root : root + "/" + rel;
  DIR* d = ::opendir(path.c_str());
  if (!d) return io("opendir", path, errno);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) {
    Walked w{rel.empty() ? n : rel + "/" + n, {}};
    if (::lstat((root + "/" + w.rel).c_str(), &w.st) != 0) return io("lstat", root + "/" + w.rel, errno);
    const bool dir = S_ISDIR(w.st.st_mode);
    out.push_back(w);  // (w.rel, not out.back().rel: the walk below grows out)
    if (dir)
      if (auto s = walk(root, w.rel, out); !s) return s;
  }
  return util::ok_status();
}

util::Status write_blob(const std::string& out, const std::string& text, Digest& digest) {
  digest.hex = util::sha256_hex(text);
  return util::write_file_atomic(out + "/blobs/sha256/" + digest.hex, text, 0644);
}

}  // namespace

namespace {
util::Result<Built> build_into(const std::string& rootfs, const std::string& out);
}  // namespace

util::Result<Built> build(const std::string& rootfs, const std::string& out) {
  struct stat st {};
  if (::stat(rootfs.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return bad(rootfs + ": not a directory");
  if (::mkdir(out.c_str(), 0755) != 0) return io("mkdir", out, errno);
  auto built = build_into(rootfs, out);
  if (!built) (void)util::remove_tree(out);  // no half-made layout
  return built;
}

namespace {

util::Result<Built> build_into(const std::string& rootfs, const std::string& out) {
  if (auto s = util::make_dirs(out + "/blobs/sha256", 0755); !s) return s.error();
  std::vector<Walked> entries;
  if (auto s = walk(rootfs, "", entries); !s) return s.error();

  Built built;
  const std::string layer_tmp = out + "/blobs/.layer";
  util::UniqueFd fd(::open(layer_tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd.valid()) return io("open", layer_tmp, errno);
  GzipSink sink(fd.get());
  std::unique_ptr<archive, decltype(&archive_write_free)> a(archive_write_new(), archive_write_free);
  archive_write_set_format_pax_restricted(a.get());
  // Names as the file system has them, bytes not text: no conversion that a
  // name in another encoding than the locale's would fail.
  archive_write_set_format_option(a.get(), "pax", "hdrcharset", "BINARY");
  archive_write_set_bytes_in_last_block(a.get(), 1);
  auto writer = [](archive*, void* self, const void* p, size_t n) -> la_ssize_t {
    return static_cast<GzipSink*>(self)->write(p, n) ? static_cast<la_ssize_t>(n) : -1;
  };
  if (archive_write_open(a.get(), &sink, nullptr, writer, nullptr) != ARCHIVE_OK)
    return bad(std::string("tar: ") + archive_error(a.get(), "?"));
  std::map<std::pair<dev_t, ino_t>, std::string> seen;  // hard links: the first path of each inode
  std::unique_ptr<archive_entry, decltype(&archive_entry_free)> e(archive_entry_new(), archive_entry_free);
  for (const Walked& w : entries) {
    const mode_t t = w.st.st_mode & S_IFMT;
    if (t != S_IFREG && t != S_IFDIR && t != S_IFLNK) {
      ++built.skipped;
      continue;
    }
    archive_entry_clear(e.get());
    archive_entry_set_pathname(e.get(), w.rel.c_str());
    archive_entry_set_mode(e.get(), w.st.st_mode);
    archive_entry_set_uid(e.get(), 0);
    archive_entry_set_gid(e.get(), 0);
    archive_entry_set_mtime(e.get(), 0, 0);
    const std::string path = rootfs + "/" + w.rel;
    if (t == S_IFLNK) {
      std::string target(PATH_MAX, '\0');
      ssize_t n = ::readlink(path.c_str(), target.data(), target.size());
      if (n < 0) return io("readlink", path, errno);
      target.resize(static_cast<size_t>(n));
      archive_entry_set_symlink(e.get(), target.c_str());
      archive_entry_set_size(e.get(), 0);
    } else if (t == S_IFREG && w.st.st_nlink > 1 && seen.count({w.st.st_dev, w.st.st_ino})) {
      archive_entry_set_hardlink(e.get(), seen[{w.st.st_dev, w.st.st_ino}].c_str());
      archive_entry_set_size(e.get(), 0);
    } else {
      if (t == S_IFREG && w.st.st_nlink > 1) seen[{w.st.st_dev, w.st.st_ino}] = w.rel;
      archive_entry_set_size(e.get(), t == S_IFREG ? w.st.st_size : 0);
    }
    if (archive_write_header(a.get(), e.get()) != ARCHIVE_OK) return bad(w.rel + ": " + archive_error(a.get(), "?"));
    if (t == S_IFREG && archive_entry_size(e.get()) > 0) {
      util::UniqueFd in(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
      if (!in.valid()) return io("open", path, errno);
      char buf[65536];
      for (;;) {
        ssize_t n = ::read(in.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return io("read", path, errno);
        if (n == 0) break;
        if (archive_write_data(a.get(), buf, static_cast<size_t>(n)) != n)
          return bad(w.rel + ": " + archive_error(a.get(), "?"));
      }
    }
    ++built.entries;
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK) return bad(std::string("tar: ") + archive_error(a.get(), "?"));
  if (!sink.finish()) return io("write", layer_tmp, errno);
  if (::fsync(fd.get()) != 0) return io("fsync", layer_tmp, errno);
  Digest layer{sink.packed_hex()};
  const std::string diff_id = "sha256:" + sink.plain_hex();
  built.layer_bytes = sink.packed_bytes();
  if (::rename(layer_tmp.c_str(), (out + "/blobs/sha256/" + layer.hex).c_str()) != 0)
    return io("rename", layer_tmp, errno);

  const json config = {{"architecture", "amd64"},
                       {"os", "linux"},
                       {"config", json::object()},
                       {"rootfs", {{"type", "layers"}, {"diff_ids", {diff_id}}}}};
  Digest config_digest;
  const std::string config_text = config.dump();
  if (auto s = write_blob(out, config_text, config_digest); !s) return s.error();
  const json manifest = {
      {"schemaVersion", 2},
      {"mediaType", kManifestType},
      {"config", {{"mediaType", kConfigType}, {"digest", config_digest.str()}, {"size", config_text.size()}}},
      {"layers", {{{"mediaType", kLayerGzip}, {"digest", layer.str()}, {"size", built.layer_bytes}}}}};
  const std::string manifest_text = manifest.dump();
  if (auto s = write_blob(out, manifest_text, built.manifest); !s) return s.error();
  const json index = {{"schemaVersion", 2},
                      {"mediaType", "application/vnd.oci.image.index.v1+json"},
                      {"manifests",
                       {{{"mediaType", kManifestType},
                         {"digest", built.manifest.str()},
                         {"size", manifest_text.size()},
                         {"platform", {{"architecture", "amd64"}, {"os", "linux"}}}}}}};
  if (auto s = util::write_file_atomic(out + "/index.json", index.dump(), 0644); !s) return s.error();
  if (auto s = util::write_file_atomic(out + "/oci-layout", R"({"imageLayoutVersion":"1.0.0"})", 0644); !s)
    return s.error();
  return built;
}

}  // namespace
}  // namespace image
