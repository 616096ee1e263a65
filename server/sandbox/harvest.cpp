// Harvest of /outputs. Every open is openat2 with RESOLVE_BENEATH and
// RESOLVE_NO_SYMLINKS relative to the directory already opened, so a symlink or
// a rename race cannot walk the runner out of the job's /outputs.
#include "server/sandbox/harvest.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "server/util/fd.h"
#include "server/util/text.h"

namespace sandbox::harvest {
namespace {

constexpr int kMaxDepth = 16;
constexpr size_t kMaxNameBytes = 255;
constexpr size_t kMaxPathBytes = 1024;

int open_beneath(int dirfd, const char* name, uint64_t flags, uint64_t resolve) {
  struct open_how how {};
  how.flags = flags | O_CLOEXEC | O_NOFOLLOW;
  how.resolve = resolve | RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  for (;;) {
    long fd = ::syscall(SYS_openat2, dirfd, name, &how, sizeof how);
    if (fd < 0 && errno == EINTR) continue;
    return static_cast<int>(fd);
  }
}

struct Walker {
  const LaunchSpec& spec;
  std::vector<HarvestedFile> files;
  uint64_t total_bytes = 0;
  uint64_t entries = 0;
  bool overflow = false;

  void reject(const std::string& name, uint64_t size, std::string reason) {
    files.push_back({util::to_valid_utf8(name), size, "", std::move(reason)});
  }

  void copy_file(int dirfd, const std::string& leaf, const std::string& rel, const struct stat& st) {
    // O_NONBLOCK: if the entry were swapped for a FIFO after lstat, open must not hang.
    util::UniqueFd in(open_beneath(dirfd, leaf.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY, RESOLVE_NO_XDEV));
    if (!in.valid()) return reject(rel, 0, util::call_error("openat2", rel, errno));
    struct stat fst {};
    if (::fstat(in.get(), &fst) != 0 || !S_ISREG(fst.st_mode) || fst.st_ino != st.st_ino)
      return reject(rel, 0, "changed while being read");
    uint64_t size = static_cast<uint64_t>(fst.st_size);
    if (spec.artifact_max_bytes && size > spec.artifact_max_bytes)
      return reject(
          rel, size,
          "larger than the policy's " + std::to_string(spec.artifact_max_bytes) + " bytes per file (not read)");
    if (total_bytes + size > spec.outputs_max_bytes)
      return reject(rel, size, "outputs exceed " + std::to_string(spec.outputs_max_bytes) + " bytes in total");
    std::string dest = spec.harvest_dir + "/" + std::to_string(files.size());
    util::UniqueFd out(::open(dest.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!out.valid()) return reject(rel, size, util::call_error("open", dest, errno));
    char buf[65536];
    uint64_t copied = 0;
    for (;;) {
      long n = util::read_some(in.get(), buf, sizeof buf);
      if (n < 0) return reject(rel, size, util::call_error("read", rel, errno));
      if (n == 0) break;
      copied += static_cast<uint64_t>(n);
      if (copied > size || !util::write_all(out.get(), buf, static_cast<unsigned long>(n)))
        return reject(rel, size, "changed while being read");
    }
    total_bytes += copied;
    files.push_back({rel, copied, dest, ""});
  }

  void walk(int dirfd, const std::string& prefix, int depth) {
    util::UniqueFd listing(open_beneath(dirfd, ".", O_RDONLY | O_DIRECTORY, RESOLVE_NO_XDEV));
    if (!listing.valid()) return reject(prefix.empty() ? "." : prefix, 0, util::call_error("openat2", prefix, errno));
    std::unique_ptr<DIR, int (*)(DIR*)> dir(::fdopendir(listing.release()), ::closedir);
    if (!dir) return;
    while (struct dirent* e = ::readdir(dir.get())) {
      if (overflow) return;
      std::string leaf = e->d_name;
      if (leaf == "." || leaf == "..") continue;
      std::string rel = prefix.empty() ? leaf : prefix + "/" + leaf;
      if (++entries > spec.outputs_max_files) {
        overflow = true;
        return reject(rel, 0,
                      "more than " + std::to_string(spec.outputs_max_files) +
                          " entries in /outputs; this and the rest were not collected");
      }
      if (leaf.size() > kMaxNameBytes || rel.size() > kMaxPathBytes || !util::is_valid_utf8(rel)) {
        reject(rel, 0, "file name is too long or not valid UTF-8");
        continue;
      }
      struct stat st {};
      if (::fstatat(dirfd, leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        reject(rel, 0, util::call_error("fstatat", rel, errno));
        continue;
      }
      if (S_ISDIR(st.st_mode)) {
        if (depth >= kMaxDepth) {
          reject(rel, 0, "directory nesting deeper than " + std::to_string(kMaxDepth));
          continue;
        }
        util::UniqueFd sub(open_beneath(dirfd, leaf.c_str(), O_PATH | O_DIRECTORY, RESOLVE_NO_XDEV));
        if (!sub.valid()) {
          reject(rel, 0, util::call_error("openat2", rel, errno));
          continue;
        }
        walk(sub.get(), rel, depth + 1);
      } else if (S_ISLNK(st.st_mode)) {
        reject(rel, 0, "symbolic link (links are never followed)");
      } else if (!S_ISREG(st.st_mode)) {
        reject(rel, 0, "not a regular file (FIFO, socket or device)");
      } else if (st.st_nlink > 1) {
        reject(rel, static_cast<uint64_t>(st.st_size), "hard-linked file");
      } else {
        copy_file(dirfd, leaf, rel, st);
      }
    }
  }
};

}  // namespace

std::vector<HarvestedFile> copy_outputs(pid_t init_pid, const LaunchSpec& spec, std::string& error) {
  std::string root_path = "/proc/" + std::to_string(init_pid) + "/root";
  util::UniqueFd root(::open(root_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) {
    error = util::call_error("open", root_path, errno);
    return {};
  }
  util::UniqueFd outputs(open_beneath(root.get(), "outputs", O_PATH | O_DIRECTORY, 0));
  if (!outputs.valid()) {
    error = util::call_error("openat2", root_path + "/outputs", errno);
    return {};
  }
  return copy_tree(outputs.get(), spec);
}

std::vector<HarvestedFile> copy_tree(int outputs_dirfd, const LaunchSpec& spec) {
  Walker w{spec, {}, 0, 0, false};
  w.walk(outputs_dirfd, "", 0);
  return std::move(w.files);
}

}  // namespace sandbox::harvest
