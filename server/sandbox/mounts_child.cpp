// Sandbox mounts, pid 1's half: the plan (mounts.cpp) applied between clone
// and execve, syscalls only, every failure through fail_in_child. Never
// allocates (unit.child_side_symbols). The order is build_root_in_child's.
#include "server/sandbox/mounts.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <sys/mount.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "server/sandbox/child_report.h"

namespace sandbox::mounts {
namespace {

int mount_setattr_raw(const char* path, unsigned long long set) {
  struct mount_attr attr {};
  attr.attr_set = set;
  return static_cast<int>(
      ::syscall(SYS_mount_setattr, AT_FDCWD, path, AT_RECURSIVE | AT_SYMLINK_NOFOLLOW, &attr, sizeof attr));
}

void make_mountpoint(const Bind& b, int sock) {
  if (b.is_dir) {
    if (::mkdir(b.target.c_str(), 0755) != 0 && errno != EEXIST) fail_in_child(sock, "mkdir", b.target.c_str(), errno);
    return;
  }
  int fd = ::open(b.target.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0444);
  if (fd < 0) fail_in_child(sock, "open", b.target.c_str(), errno);
  ::close(fd);
}

// Bind read-only, recursively (mount_setattr covers submounts, which a plain
// MS_REMOUNT would leave writable). nosuid: no set-id gain; nodev unless a device.
void bind_readonly(const Bind& b, unsigned long long extra_attrs, int sock) {
  make_mountpoint(b, sock);
  if (::mount(b.via, b.target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0)
    fail_in_child(sock, "mount(MS_BIND)", b.source.c_str(), errno);
  if (mount_setattr_raw(b.target.c_str(), MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | extra_attrs) != 0)
    fail_in_child(sock, "mount_setattr(MOUNT_ATTR_RDONLY)", b.target.c_str(), errno);
}

void mount_tmpfs(const std::string& target, const std::string& opts, unsigned long flags, int sock) {
  if (::mount("tmpfs", target.c_str(), "tmpfs", flags, opts.c_str()) != 0)
    fail_in_child(sock, "mount(tmpfs)", target.c_str(), errno);
}

// A C string: a std::string parameter would build a temporary from "." (an
// allocation path, and destructors on unwinding).
void remount_readonly(const char* target, unsigned long flags, int sock) {
  if (::mount(nullptr, target, nullptr, MS_REMOUNT | MS_RDONLY | flags, nullptr) != 0)
    fail_in_child(sock, "mount(MS_REMOUNT|MS_RDONLY)", target, errno);
}

void make_symlink(const Link& l, int sock) {
  if (::symlink(l.target.c_str(), l.path.c_str()) != 0) fail_in_child(sock, "symlink", l.path.c_str(), errno);
}

// "/proc/self/fd/<fd>" into b.via, without allocation.
void open_source_in_child(const Bind& b, int sock) {
  int fd = ::open(b.source.c_str(), O_PATH | O_CLOEXEC | b.open_flags);
  if (fd < 0) fail_in_child(sock, "open(O_PATH)", b.source.c_str(), errno);
  static constexpr char kPrefix[] = "/proc/self/fd/";
  char digits[16];
  int n = 0;
  for (int v = fd; n == 0 || v > 0; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
  size_t len = 0;
  for (const char* c = kPrefix; *c; ++c) b.via[len++] = *c;
  while (n > 0) b.via[len++] = digits[--n];
  b.via[len] = '\0';
  b.fd = fd;
}

// Inputs are read, not bound: opened for reading with the host identity.
void open_input_in_child(const Bind& b, int sock) {
  b.fd = ::open(b.source.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (b.fd < 0) fail_in_child(sock, "open", b.source.c_str(), errno);
}

void copy_input_in_child(const Bind& b, int sock) {
  int out = ::open(b.target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0444);
  if (out < 0) fail_in_child(sock, "open", b.target.c_str(), errno);
  for (;;) {
    ssize_t n = ::sendfile(out, b.fd, nullptr, 1 << 30);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_in_child(sock, "sendfile", b.target.c_str(), errno);
    if (n == 0) break;
  }
  ::close(out);
  ::close(b.fd);
  b.fd = -1;
}

}  // namespace

void mount_root_in_child(const Plan& p, int sock) {
  // Stop mount events propagating back to the host (and the host's into us).
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    fail_in_child(sock, "mount(MS_PRIVATE)", "/", errno);
  for (const auto* group : {&p.readonly_binds, &p.device_binds})
    for (const Bind& b : *group) open_source_in_child(b, sock);
  for (const auto* group : {&p.input_copies, &p.cache_copies, &p.root_copies})
    for (const Bind& b : *group) open_input_in_child(b, sock);
  // The new root is a tmpfs owned by this mount namespace: it vanishes with it.
  mount_tmpfs(p.root, p.root_opts, MS_NOSUID | MS_NODEV, sock);
  if (::chdir(p.root.c_str()) != 0) fail_in_child(sock, "chdir", p.root.c_str(), errno);
}

void build_root_in_child(const Plan& p, const LaunchSpec& spec, int sock) {
  for (const std::string& d : p.dirs)
    if (::mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) fail_in_child(sock, "mkdir", d.c_str(), errno);
  for (const Link& l : p.links) make_symlink(l, sock);
  for (const File& f : p.files) {
    int fd = ::open(f.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, f.mode);
    if (fd < 0) fail_in_child(sock, "open", f.path.c_str(), errno);
    if (::write(fd, f.content.data(), f.content.size()) != static_cast<ssize_t>(f.content.size()))
      fail_in_child(sock, "write", f.path.c_str(), errno);
    ::close(fd);
  }
  for (const Bind& b : p.root_copies) copy_input_in_child(b, sock);

  // The runtime (/usr and friends): read-only, no set-id, no device nodes.
  for (const Bind& b : p.readonly_binds) bind_readonly(b, MOUNT_ATTR_NODEV, sock);

  // /dev: only the harmless character devices; noexec; the tmpfs itself read-only.
  mount_tmpfs(p.dev, p.dev_opts, MS_NOSUID | MS_NOEXEC, sock);
  for (const Bind& b : p.device_binds) bind_readonly(b, MOUNT_ATTR_NOEXEC, sock);
  for (const Link& l : p.device_links) make_symlink(l, sock);
  remount_readonly(p.dev.c_str(), MS_NOSUID | MS_NOEXEC, sock);

  // A fresh procfs for the new pid namespace: host processes are not in it.
  // subset=pid hides /proc/kcore, /proc/sys, /proc/sysrq-trigger and friends.
  if (::mount("proc", p.proc.c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "subset=pid") != 0)
    fail_in_child(sock, "mount(proc)", p.proc.c_str(), errno);

  // No host descriptor stays open in pid 1 once its mount exists.
  for (const auto* group : {&p.readonly_binds, &p.device_binds})
    for (const Bind& b : *group) {
      ::close(b.fd);
      b.fd = -1;
    }

  // /inputs: filled by fill_inputs_in_child (cold) or the runner (warm).
  mount_tmpfs(p.inputs, p.inputs_opts, MS_NOSUID | MS_NODEV | MS_NOEXEC, sock);

  // Scratch and outputs: size- and inode-capped tmpfs, no exec of dropped binaries.
  mount_tmpfs(p.work, p.work_opts, MS_NOSUID | MS_NODEV | MS_NOEXEC, sock);
  mount_tmpfs(p.tmp, p.tmp_opts, MS_NOSUID | MS_NODEV | MS_NOEXEC, sock);
  mount_tmpfs(p.outputs, p.outputs_opts, MS_NOSUID | MS_NODEV | MS_NOEXEC, sock);
  // The runtime's cache: this sandbox's own read-only copy, and its links in
  // this sandbox's own /tmp (the sandbox user owns the directory and links).
  if (!p.cache.empty()) {
    mount_tmpfs(p.cache, p.cache_opts, MS_NOSUID | MS_NODEV | MS_NOEXEC, sock);
    for (const Bind& b : p.cache_copies) copy_input_in_child(b, sock);
    remount_readonly(p.cache.c_str(), MS_NOSUID | MS_NODEV | MS_NOEXEC, sock);
  }
  for (const std::string& d : p.tmp_dirs)
    if (::mkdir(d.c_str(), 0755) != 0) fail_in_child(sock, "mkdir", d.c_str(), errno);
  for (const Link& l : p.tmp_links) make_symlink(l, sock);

  // Warm: the code arrives with the claim (the runner writes it).
  if (spec.warm == Warm::cold) {
    int fd = ::open(p.code_file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) fail_in_child(sock, "open", p.code_file.c_str(), errno);
    if (::write(fd, spec.code.data(), spec.code.size()) != static_cast<ssize_t>(spec.code.size()))
      fail_in_child(sock, "write", p.code_file.c_str(), errno);
    if (::fchown(fd, kSandboxUid, kSandboxGid) != 0) fail_in_child(sock, "fchown", p.code_file.c_str(), errno);
    ::close(fd);
  }

  // Freeze the skeleton: nothing outside /work, /tmp and /outputs is writable.
  remount_readonly(".", MS_NOSUID | MS_NODEV, sock);
}

void fill_inputs_in_child(const Plan& p, const LaunchSpec& spec, int sock) {
  // Each stored input copied in (0444), then the tmpfs made read-only. Warm:
  // the runner copies the claim's inputs in later; pid 1 then freezes it.
  if (spec.warm != Warm::cold) return;
  for (const std::string& d : p.input_dirs)
    if (::mkdir(d.c_str(), 0755) != 0) fail_in_child(sock, "mkdir", d.c_str(), errno);
  for (const Bind& b : p.input_copies) copy_input_in_child(b, sock);
  remount_readonly(p.inputs.c_str(), MS_NOSUID | MS_NODEV | MS_NOEXEC, sock);
}

void size_work_for_workspace_in_child(const Plan& p, uint64_t code_room_bytes, int sock) {
  // A warm spec without workspace_max_bytes takes no workspace (the runner refuses such a claim first).
  if (p.workspace_work_bytes == 0) fail_in_child(sock, "workspace claim", "/work", EINVAL);
  // "size=<bytes>", without allocation.
  static constexpr char kPrefix[] = "size=";
  char opts[sizeof kPrefix + 20];
  char digits[20];
  int n = 0;
  for (uint64_t v = p.workspace_work_bytes + code_room_bytes; n == 0 || v > 0; v /= 10)
    digits[n++] = static_cast<char>('0' + v % 10);
  size_t len = 0;
  for (const char* c = kPrefix; *c; ++c) opts[len++] = *c;
  while (n > 0) opts[len++] = digits[--n];
  opts[len] = '\0';
  // The flags /work was mounted with: a remount without them would clear them.
  if (::mount(nullptr, "/work", nullptr, MS_REMOUNT | MS_NOSUID | MS_NODEV | MS_NOEXEC, opts) != 0)
    fail_in_child(sock, "mount(MS_REMOUNT)", "/work", errno);
}

void pivot_into_root_in_child(const Plan& p, int sock) {
  // pivot_root(".", ".") stacks the old root under the new one; detaching it
  // leaves no path back to the host filesystem (pivot_root(2), NOTES).
  (void)p;
  if (::syscall(SYS_pivot_root, ".", ".") != 0) fail_in_child(sock, "pivot_root", p.root.c_str(), errno);
  if (::umount2(".", MNT_DETACH) != 0) fail_in_child(sock, "umount2(MNT_DETACH)", "old root", errno);
  if (::chdir("/") != 0) fail_in_child(sock, "chdir", "/", errno);
}

}  // namespace sandbox::mounts
