// Workspace copies between a host tree and a sandbox's /work. See workspace.h.
// One walk (Walker) serves both directions; the two ends differ only in their
// TreeRules: who creates, what a special file means, which bounds hold.
#include "server/sandbox/workspace.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <memory>

#include "server/sandbox/fs_identity.h"
#include "server/util/fd.h"
#include "server/util/text.h"

namespace sandbox::workspace {
namespace {

constexpr uint64_t kNearlyFullBytes = 64 << 10;
constexpr size_t kSendfileChunk = 1 << 30;
constexpr uint64_t kResolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;

int open_beneath(int dirfd, const char* name, uint64_t flags, uint64_t resolve, mode_t mode = 0) {
  struct open_how how {};
  how.flags = flags | O_CLOEXEC | O_NOFOLLOW;
  how.mode = (flags & O_CREAT) ? mode : 0;
  how.resolve = resolve | kResolve;
  for (;;) {
    long fd = ::syscall(SYS_openat2, dirfd, name, &how, sizeof how);
    if (fd < 0 && errno == EINTR) continue;
    return static_cast<int>(fd);
  }
}

const char* special_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "an unknown file type";
}

// The creating identity for one step on the destination side, if the rules name one.
class CreateScope {
 public:
  explicit CreateScope(const std::optional<CreateAs>& as) {
    if (as) as_.emplace(as->uid, as->gid);
  }

 private:
  std::optional<AsSandboxUser> as_;
};

// A source entry's mode, put back when the copy is done with it (unlock).
class Unlocked {
 public:
  Unlocked() = default;
  Unlocked(const Unlocked&) = delete;
  Unlocked& operator=(const Unlocked&) = delete;
  ~Unlocked() {
    if (fd_.valid()) (void)::chmod(via_.c_str(), mode_);  // at worst the source keeps u+r
  }
  void hold(util::UniqueFd fd, std::string via, mode_t mode) {
    fd_ = std::move(fd);
    via_ = std::move(via);
    mode_ = mode;
  }

 private:
  util::UniqueFd fd_;
  std::string via_;
  mode_t mode_ = 0;
};

struct Walker {
  const TreeRules& rules;
  Tally tally;
  uint64_t seen = 0;

  std::string src_name(const std::string& rel) const { return rules.src_label + "/" + util::to_valid_utf8(rel); }
  std::string dst_name(const std::string& rel) const { return rules.dst_label + "/" + util::to_valid_utf8(rel); }

  util::Error src_error(const char* call, const std::string& rel, int err) const {
    return util::make_error(util::ErrorCode::kIo, util::call_error(call, src_name(rel), err));
  }
  util::Error dst_error(const char* call, const std::string& rel, int err) const {
    std::string message = util::call_error(call, dst_name(rel), err);
    if ((err == ENOSPC || err == EDQUOT) && !rules.nospace_note.empty()) message += "; " + rules.nospace_note;
    return util::make_error(util::ErrorCode::kIo, message);
  }
  util::Error changed(const std::string& rel) const {
    return util::make_error(util::ErrorCode::kIo, src_name(rel) + ": changed while being copied");
  }

  // The source's times on the copy: a build tool comparing them sees the tree as it was left.
  static int copy_times_fd(int fd, const struct stat& st) {
    const struct timespec times[2] = {st.st_atim, st.st_mtim};
    return ::futimens(fd, times);
  }

  // The file's data ranges only (SEEK_DATA, SEEK_HOLE): a hole stays a hole,
  // so a copy occupies what the original did, and a tree that fit one tmpfs
  // fits another of the same size.
  util::Status copy_bytes(int in, int out, uint64_t size, const std::string& rel) {
    uint64_t pos = 0;
    while (pos < size) {
      const off_t data = ::lseek(in, static_cast<off_t>(pos), SEEK_DATA);
      if (data < 0 && errno == ENXIO) break;  // only a hole from here on
      if (data < 0) return src_error("lseek(SEEK_DATA)", rel, errno);
      off_t hole = ::lseek(in, data, SEEK_HOLE);
      if (hole < 0) return src_error("lseek(SEEK_HOLE)", rel, errno);
      if (static_cast<uint64_t>(data) >= size) break;
      const uint64_t end = std::min<uint64_t>(static_cast<uint64_t>(hole), size);
      if (::lseek(out, data, SEEK_SET) < 0) return dst_error("lseek", rel, errno);
      off_t from = data;
      while (static_cast<uint64_t>(from) < end) {
        const size_t want = static_cast<size_t>(std::min<uint64_t>(end - static_cast<uint64_t>(from), kSendfileChunk));
        ssize_t n = ::sendfile(out, in, &from, want);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
          const int err = errno;
          return err == ENOSPC || err == EDQUOT || err == EFBIG ? dst_error("sendfile", rel, err)
                                                                : src_error("sendfile", rel, err);
        }
        if (n == 0) return changed(rel);  // shrank while being copied
      }
      pos = end;
    }
    if (::ftruncate(out, static_cast<off_t>(size)) != 0) return dst_error("ftruncate", rel, errno);
    // A file that grew meanwhile is noticed, not cut at its old size.
    struct stat after {};
    if (::fstat(in, &after) != 0) return src_error("fstat", rel, errno);
    if (static_cast<uint64_t>(after.st_size) != size) return changed(rel);
    return util::ok_status();
  }

  // What the entry occupies counts toward allocated_max (rules): a tmpfs's pages.
  util::Status charge_allocation(const std::string& rel, const struct stat& st) {
    const uint64_t occupied = static_cast<uint64_t>(st.st_blocks) * 512;
    if (occupied > rules.allocated_max - tally.allocated)
      return util::make_error(util::ErrorCode::kTooLarge,
                              src_name(rel) + ": the files take more than " + std::to_string(rules.allocated_max) +
                                  " bytes together" +
                                  (rules.allocated_note.empty() ? "" : "; " + rules.allocated_note));
    tally.allocated += occupied;
    return util::ok_status();
  }

  // TreeRules::unlock_unreadable: the entry's mode with `need` added, through
  // an O_PATH descriptor re-checked against the fstatat (a link put in the
  // entry's place is never chmod'ed), until the Unlocked goes out of scope.
  util::Status unlock(int src, const char* leaf, const std::string& rel, const struct stat& st, mode_t need,
                      Unlocked& unlocked) {
    if (!rules.unlock_unreadable || (st.st_mode & need) == need) return util::ok_status();
    util::UniqueFd path(open_beneath(src, leaf, O_PATH, RESOLVE_NO_XDEV));
    if (!path.valid()) return src_error("openat2", rel, errno);
    struct stat fst {};
    if (::fstat(path.get(), &fst) != 0) return src_error("fstat", rel, errno);
    if (fst.st_ino != st.st_ino || fst.st_dev != st.st_dev || (fst.st_mode & S_IFMT) != (st.st_mode & S_IFMT))
      return changed(rel);
    std::string via = "/proc/self/fd/" + std::to_string(path.get());
    if (::chmod(via.c_str(), (fst.st_mode & 07777) | need) != 0) return src_error("chmod", rel, errno);
    unlocked.hold(std::move(path), std::move(via), fst.st_mode & 07777);
    return util::ok_status();
  }

  util::Status copy_file(int src, int dst, const char* leaf, const std::string& rel, const struct stat& st) {
    Unlocked unlocked;
    if (auto s = unlock(src, leaf, rel, st, S_IRUSR, unlocked); !s) return s;
    // O_NONBLOCK: an entry swapped for a FIFO since the fstatat must not block the open.
    util::UniqueFd in(open_beneath(src, leaf, O_RDONLY | O_NONBLOCK | O_NOCTTY, RESOLVE_NO_XDEV));
    if (!in.valid()) return src_error("openat2", rel, errno);
    struct stat fst {};
    if (::fstat(in.get(), &fst) != 0) return src_error("fstat", rel, errno);
    if (!S_ISREG(fst.st_mode) || fst.st_ino != st.st_ino || fst.st_dev != st.st_dev) return changed(rel);
    fst.st_mode = st.st_mode;  // as it was, before any unlock
    const uint64_t size = static_cast<uint64_t>(fst.st_size);
    if (size > rules.bytes_max - tally.bytes)
      return util::make_error(util::ErrorCode::kTooLarge, src_name(rel) + ": the files reach more than " +
                                                              std::to_string(rules.bytes_max) + " bytes together");
    if (auto c = charge_allocation(rel, fst); !c) return c;
    CreateScope as(rules.create_as);
    util::UniqueFd out(open_beneath(dst, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOCTTY, 0, 0600));
    if (!out.valid()) return dst_error("openat2", rel, errno);
    if (auto s = copy_bytes(in.get(), out.get(), size, rel); !s) return s;
    // No set-id or sticky bit: a copy never gains a privilege the tree's owner lacked.
    if (::fchmod(out.get(), fst.st_mode & 0777) != 0) return dst_error("fchmod", rel, errno);
    if (copy_times_fd(out.get(), fst) != 0) return dst_error("futimens", rel, errno);
    tally.bytes += size;
    ++tally.entries;
    return util::ok_status();
  }

  // The link itself, re-created: its target is the tree owner's business and is never resolved here.
  util::Status copy_symlink(int src, int dst, const char* leaf, const std::string& rel, const struct stat& st) {
    char target[PATH_MAX];
    ssize_t n = ::readlinkat(src, leaf, target, sizeof target);
    if (n < 0) return src_error("readlinkat", rel, errno);
    if (static_cast<size_t>(n) >= sizeof target) return src_error("readlinkat", rel, ENAMETOOLONG);
    target[n] = '\0';
    if (auto c = charge_allocation(rel, st); !c) return c;
    CreateScope as(rules.create_as);
    if (::symlinkat(target, dst, leaf) != 0) return dst_error("symlinkat", rel, errno);
    const struct timespec times[2] = {st.st_atim, st.st_mtim};
    if (::utimensat(dst, leaf, times, AT_SYMLINK_NOFOLLOW) != 0) return dst_error("utimensat", rel, errno);
    ++tally.entries;
    return util::ok_status();
  }

  util::Status skip_special(const std::string& rel, const struct stat& st) {
    if (rules.special == Special::refuse)
      return util::make_error(util::ErrorCode::kIo, src_name(rel) + ": " + special_kind(st.st_mode) +
                                                        " (a workspace holds files, directories and symlinks only)");
    ++tally.skipped;
    if (tally.skipped_names.size() < kSkippedNamesMax)
      tally.skipped_names.push_back(src_name(rel) + " (" + special_kind(st.st_mode) + ")");
    return util::ok_status();
  }

  util::Status copy_subdir(int src, int dst, const char* leaf, const std::string& rel, const struct stat& st,
                           int depth) {
    if (depth + 1 > rules.depth_max)
      return util::make_error(util::ErrorCode::kTooLarge,
                              src_name(rel) + ": directories nested deeper than " + std::to_string(rules.depth_max));
    Unlocked unlocked;  // for the whole walk below it: its entries are reached through it
    if (auto s = unlock(src, leaf, rel, st, S_IRUSR | S_IXUSR, unlocked); !s) return s;
    // Not across a mount: the tree is one filesystem on either side.
    util::UniqueFd sub_src(open_beneath(src, leaf, O_RDONLY | O_DIRECTORY, RESOLVE_NO_XDEV));
    if (!sub_src.valid()) return src_error("openat2", rel, errno);
    struct stat fst {};
    if (::fstat(sub_src.get(), &fst) != 0) return src_error("fstat", rel, errno);
    if (fst.st_ino != st.st_ino || fst.st_dev != st.st_dev) return changed(rel);
    fst.st_mode = st.st_mode;  // as it was, before any unlock
    util::UniqueFd sub_dst;
    {
      // 0700 while it is filled: the creating identity must be able to write into it.
      CreateScope as(rules.create_as);
      if (::mkdirat(dst, leaf, 0700) != 0) return dst_error("mkdirat", rel, errno);
      sub_dst.reset(open_beneath(dst, leaf, O_RDONLY | O_DIRECTORY, 0));
      if (!sub_dst.valid()) return dst_error("openat2", rel, errno);
    }
    ++tally.entries;
    if (auto s = copy_dir(sub_src.get(), sub_dst.get(), rel, depth + 1); !s) return s;
    CreateScope as(rules.create_as);
    if (::fchmod(sub_dst.get(), (fst.st_mode & 0777) | rules.dir_mode_add) != 0) return dst_error("fchmod", rel, errno);
    if (copy_times_fd(sub_dst.get(), fst) != 0) return dst_error("futimens", rel, errno);
    return util::ok_status();
  }

  util::Status copy_entry(int src, int dst, const char* leaf, const std::string& rel, int depth) {
    if (++seen > rules.entries_max)
      return util::make_error(util::ErrorCode::kTooLarge,
                              rules.src_label + ": more than " + std::to_string(rules.entries_max) + " entries");
    struct stat st {};
    if (::fstatat(src, leaf, &st, AT_SYMLINK_NOFOLLOW) != 0) return src_error("fstatat", rel, errno);
    if (S_ISDIR(st.st_mode)) return copy_subdir(src, dst, leaf, rel, st, depth);
    if (S_ISREG(st.st_mode)) return copy_file(src, dst, leaf, rel, st);
    if (S_ISLNK(st.st_mode)) return copy_symlink(src, dst, leaf, rel, st);
    return skip_special(rel, st);
  }

  util::Status copy_dir(int src, int dst, const std::string& prefix, int depth) {
    // A listing of its own: readdir's offset is not shared with src.
    util::UniqueFd listing(open_beneath(src, ".", O_RDONLY | O_DIRECTORY, 0));
    if (!listing.valid()) return src_error("openat2", prefix.empty() ? "." : prefix, errno);
    std::unique_ptr<DIR, int (*)(DIR*)> dir(::fdopendir(listing.get()), ::closedir);
    if (!dir) return src_error("fdopendir", prefix.empty() ? "." : prefix, errno);
    listing.release();
    for (;;) {
      errno = 0;
      struct dirent* e = ::readdir(dir.get());
      if (!e) {
        if (errno != 0) return src_error("readdir", prefix.empty() ? "." : prefix, errno);
        return util::ok_status();
      }
      const char* leaf = e->d_name;
      if (leaf[0] == '.' && (leaf[1] == '\0' || (leaf[1] == '.' && leaf[2] == '\0'))) continue;
      std::string rel = prefix.empty() ? std::string(leaf) : prefix + "/" + leaf;
      if (rel == rules.skip) continue;
      if (auto s = copy_entry(src, dst, leaf, rel, depth); !s) return s;
    }
  }
};

// rm -rf of what save_tree made, by descriptors: never a path walk, never a
// link followed. Each directory is read to the end before anything in it
// goes (removing while readdir reads may skip entries).
int remove_contents(int dir_fd) {
  util::UniqueFd listing(open_beneath(dir_fd, ".", O_RDONLY | O_DIRECTORY, 0));
  if (!listing.valid()) return errno;
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::fdopendir(listing.get()), ::closedir);
  if (!dir) return errno;
  listing.release();
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(dir.get())) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  int first_error = 0;
  for (const std::string& name : names) {
    if (::unlinkat(dir_fd, name.c_str(), 0) == 0) continue;
    if (errno != EISDIR) {
      if (!first_error) first_error = errno;
      continue;
    }
    util::UniqueFd sub(open_beneath(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY, RESOLVE_NO_XDEV));
    if (!sub.valid() || ::fchmod(sub.get(), 0700) != 0) {
      if (!first_error) first_error = errno;
      continue;
    }
    if (int e = remove_contents(sub.get()); e && !first_error) first_error = e;
    if (::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) != 0 && !first_error) first_error = errno;
  }
  return first_error;
}

// The sandbox's /work, opened (O_PATH) beneath its root (/work is a mount of
// its own: no RESOLVE_NO_XDEV).
util::Result<util::UniqueFd> open_sandbox_work(pid_t init_pid) {
  const std::string root_path = "/proc/" + std::to_string(init_pid) + "/root";
  util::UniqueFd root(::open(root_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) return util::make_error(util::ErrorCode::kSandbox, util::call_error("open", root_path, errno));
  util::UniqueFd work(open_beneath(root.get(), "work", O_PATH | O_DIRECTORY, 0));
  if (!work.valid()) return util::make_error(util::ErrorCode::kSandbox, util::call_error("openat2", "/work", errno));
  return work;
}

// Copy-out: /work itself made unreadable by the job (TreeRules::unlock_unreadable).
util::Status unlock_work(int work) {
  struct stat st {};
  if (::fstat(work, &st) != 0) return util::make_error(util::ErrorCode::kIo, util::call_error("fstat", "/work", errno));
  if ((st.st_mode & 0500) == 0500) return util::ok_status();
  const std::string via = "/proc/self/fd/" + std::to_string(work);
  if (::chmod(via.c_str(), (st.st_mode & 0777) | 0500) != 0)
    return util::make_error(util::ErrorCode::kIo, util::call_error("chmod", "/work", errno));
  return util::ok_status();
}

}  // namespace

util::Result<Tally> copy_tree(int src_dir, int dst_dir, const TreeRules& rules) {
  Walker w{rules, {}, 0};
  if (auto s = w.copy_dir(src_dir, dst_dir, "", 0); !s) return s.error();
  return std::move(w.tally);
}

util::Result<Tally> save_tree(int src_dir, const std::string& dst_path, const TreeRules& rules) {
  // EEXIST too: the broker names a fresh path, and a tree already there is not ours to fill.
  if (::mkdir(dst_path.c_str(), 0700) != 0)
    return util::make_error(util::ErrorCode::kIo, util::call_error("mkdir", rules.dst_label, errno));
  util::UniqueFd dst(::open(dst_path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dst.valid()) {
    const int err = errno;
    ::rmdir(dst_path.c_str());
    return util::make_error(util::ErrorCode::kIo, util::call_error("open", rules.dst_label, err));
  }
  auto copied = copy_tree(src_dir, dst.get(), rules);
  if (copied) return copied;
  util::Error error = copied.error();
  const int removing = remove_contents(dst.get());
  dst.reset();
  if (removing != 0 || ::rmdir(dst_path.c_str()) != 0)
    error.message +=
        "; removing the partial copy: " + util::call_error("remove", rules.dst_label, removing ? removing : errno);
  return error;
}

uint64_t code_room_bytes(uint64_t code_bytes) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return (code_bytes + page - 1) / page * page;
}

bool nearly_full(const struct statfs& st) {
  const uint64_t size = static_cast<uint64_t>(st.f_blocks) * static_cast<uint64_t>(st.f_bsize);
  const uint64_t free = static_cast<uint64_t>(st.f_bavail) * static_cast<uint64_t>(st.f_bsize);
  return free < kNearlyFullBytes || free * 100 < size || (st.f_files > 0 && st.f_ffree == 0);
}

util::Status copy_in(pid_t init_pid, const LaunchSpec& spec, const std::string& workspace_in) {
  if (spec.code_path.rfind("/work/", 0) != 0)
    return util::make_error(util::ErrorCode::kSandbox, "code_path must be under /work");
  // The broker's tree, read with the runner's own identity (0700, the server's user).
  util::UniqueFd src(::open(workspace_in.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!src.valid()) return util::make_error(util::ErrorCode::kSandbox, util::call_error("open", "workspace_in", errno));
  auto work = open_sandbox_work(init_pid);
  if (!work) return work.error();
  struct statfs fs {};
  if (::fstatfs(work->get(), &fs) != 0)
    return util::make_error(util::ErrorCode::kSandbox, util::call_error("fstatfs", "/work", errno));
  TreeRules rules;
  rules.special = Special::refuse;
  rules.create_as = CreateAs{spec.host_uid, spec.host_gid};
  rules.unlock_unreadable = true;
  rules.skip = spec.code_path.substr(sizeof "/work/" - 1);  // the job's code wins
  rules.src_label = "workspace_in";
  rules.dst_label = "/work";
  rules.nospace_note = "the workspace does not fit its cap (/work: " +
                       std::to_string(static_cast<uint64_t>(fs.f_blocks) * static_cast<uint64_t>(fs.f_bsize)) +
                       " bytes, " + std::to_string(static_cast<uint64_t>(fs.f_files)) + " inodes)";
  auto copied = copy_tree(src.get(), work->get(), rules);
  if (!copied)
    return util::make_error(util::ErrorCode::kSandbox, "copying the workspace into /work: " + copied.error().message);
  return util::ok_status();
}

Report copy_out(pid_t init_pid, const LaunchSpec& spec) {
  Report r;
  auto work = open_sandbox_work(init_pid);
  if (!work) {
    r.error = work.error().message;
    return r;
  }
  struct statfs fs {};
  if (::fstatfs(work->get(), &fs) != 0) {
    r.error = util::call_error("fstatfs", "/work", errno);
    return r;
  }
  r.full = nearly_full(fs);
  if (spec.code_path.rfind("/work/", 0) != 0) {
    r.error = "code_path must be under /work";
    return r;
  }
  if (auto u = unlock_work(work->get()); !u) {
    r.error = u.error().message;
    return r;
  }
  TreeRules rules;
  rules.special = Special::skip;
  // The server's user walks and removes the host copy (a normal user has no
  // CAP_DAC_OVERRIDE): every directory keeps u+rwx there.
  rules.dir_mode_add = 0700;
  rules.bytes_max = static_cast<uint64_t>(fs.f_blocks) * static_cast<uint64_t>(fs.f_bsize);
  // The code file is the call's, not the workspace's; the rest is kept only
  // within the workspace's size, so the next call's /work has room for it
  // and for any code (code_room_bytes).
  rules.skip = spec.code_path.substr(sizeof "/work/" - 1);
  if (spec.workspace_max_bytes == 0) {
    r.error = "a workspace job without workspace_max_bytes";
    return r;
  }
  rules.allocated_max = spec.workspace_max_bytes;
  rules.allocated_note =
      "more than the workspace's size (workspaces.size_max_bytes): not saved, the workspace is as "
      "the call before left it; delete files and run again";
  rules.unlock_unreadable = true;
  rules.src_label = "/work";
  rules.dst_label = "workspace_out";
  auto saved = save_tree(work->get(), spec.workspace_out, rules);
  if (!saved) {
    r.error = saved.error().message;
    return r;
  }
  r.saved = true;
  r.tally = std::move(*saved);
  return r;
}

void add_to_outcome(const Report& report, Outcome& o) {
  o.workspace_saved = report.saved;
  o.workspace_full = report.full;
  o.workspace_bytes = report.tally.bytes;
  o.workspace_entries = report.tally.entries;
  o.workspace_skipped = report.tally.skipped;
  o.workspace_skipped_names = report.tally.skipped_names;
  o.workspace_error = report.error;
}

}  // namespace sandbox::workspace
