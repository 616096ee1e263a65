// Sandbox mounts. plan_in_parent runs in the runner's zygote; everything else runs
// in the child between clone and execve (syscalls only, failures reported via
// fail_in_child). The order matters and is the order of build_root_in_child.
#include "server/sandbox/mounts.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <sys/mount.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <set>

#include "server/sandbox/child_report.h"
#include "server/util/text.h"

namespace sandbox::mounts {
namespace {

constexpr uint64_t kRootTmpfsBytes = 1 << 20;    // the skeleton: directories, /etc files
constexpr uint64_t kDevTmpfsBytes = 64 << 10;
constexpr const char* kDevices[] = {"null", "zero", "full", "random", "urandom"};

std::string tmpfs_opts(uint64_t size, uint64_t inodes, const char* mode, bool owned) {
  std::string s = "size=" + std::to_string(size) + ",nr_inodes=" + std::to_string(inodes) +
                  ",mode=" + mode;
  // uid/gid are read in the mounter's user namespace: the sandbox user owns it.
  if (owned) s += ",uid=" + std::to_string(kSandboxUid) + ",gid=" + std::to_string(kSandboxGid);
  return s;
}

void add_parent_dirs(const std::string& inner, std::set<std::string>& seen,
                     std::vector<std::string>& dirs) {
  for (size_t pos = inner.find('/', 1); pos != std::string::npos; pos = inner.find('/', pos + 1)) {
    std::string d = inner.substr(1, pos - 1);
    if (seen.insert(d).second) dirs.push_back(d);
  }
}

int mount_setattr_raw(const char* path, unsigned long long set) {
  struct mount_attr attr {};
  attr.attr_set = set;
  return static_cast<int>(::syscall(SYS_mount_setattr, AT_FDCWD, path,
                                    AT_RECURSIVE | AT_SYMLINK_NOFOLLOW, &attr, sizeof attr));
}

void make_mountpoint(const Bind& b, int sock) {
  if (b.is_dir) {
    if (::mkdir(b.target.c_str(), 0755) != 0 && errno != EEXIST)
      fail_in_child(sock, "mkdir", b.target.c_str(), errno);
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

void remount_readonly(const std::string& target, unsigned long flags, int sock) {
  if (::mount(nullptr, target.c_str(), nullptr, MS_REMOUNT | MS_RDONLY | flags, nullptr) != 0)
    fail_in_child(sock, "mount(MS_REMOUNT|MS_RDONLY)", target.c_str(), errno);
}

void make_symlink(const Link& l, int sock) {
  if (::symlink(l.target.c_str(), l.path.c_str()) != 0) fail_in_child(sock, "symlink", l.path.c_str(), errno);
}

// Checks a bind source's type in the parent; the child opens it for real.
util::Status check_source(const std::string& path, int extra_flags, bool& is_dir) {
  struct stat st {};
  int r = (extra_flags & O_NOFOLLOW) ? ::lstat(path.c_str(), &st) : ::stat(path.c_str(), &st);
  if (r != 0) return util::make_error("sandbox", util::call_error("stat", path, errno));
  if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode))
    return util::make_error("sandbox", path + ": not a directory, regular file or character device");
  is_dir = S_ISDIR(st.st_mode);
  return util::ok_status();
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

std::string root_path(const LaunchSpec& spec) { return spec.scratch_dir + "/root"; }

util::Result<Plan> plan_in_parent(const LaunchSpec& spec) {
  Plan p;
  p.root = root_path(spec);
  // Owned by the sandbox user so it can populate it after dropping host ids;
  // frozen read-only before the program runs.
  p.root_opts = tmpfs_opts(kRootTmpfsBytes, 4096, "0755", true);
  p.dev_opts = tmpfs_opts(kDevTmpfsBytes, 64, "0755", false);
  uint64_t input_bytes = 0;
  for (const InputBind& in : spec.inputs) {
    struct stat st {};
    if (::lstat(in.host_path.c_str(), &st) == 0) input_bytes += static_cast<uint64_t>(st.st_size) + 4096;
  }
  // A warm sandbox gets its inputs later: its /inputs is capped by the policy's limits.
  p.inputs_opts = spec.warm.empty()
                      ? tmpfs_opts(input_bytes + (64 << 10), spec.inputs.size() + 16, "0755", false)
                      : tmpfs_opts(spec.inputs_max_bytes + (64 << 10), spec.inputs_max_files + 16, "0755", false);
  p.work_opts = tmpfs_opts(spec.work_max_bytes, 16384, "0755", true);
  p.tmp_opts = tmpfs_opts(spec.tmp_max_bytes, 16384, "1777", true);
  p.outputs_opts = tmpfs_opts(spec.outputs_max_bytes, spec.outputs_max_files + 1024, "0755", true);
  // Every path below is relative to the new root, which is the child's cwd
  // while it builds: no host directory is walked after the identity switch.
  p.dev = "dev";
  p.proc = "proc";
  p.inputs = "inputs";
  p.work = "work";
  p.tmp = "tmp";
  p.outputs = "outputs";

  std::set<std::string> seen;
  for (const std::string* d : {&p.dev, &p.proc, &p.inputs, &p.work, &p.tmp, &p.outputs})
    if (seen.insert(*d).second) p.dirs.push_back(*d);
  std::string etc = "etc";
  seen.insert(etc);
  p.dirs.push_back(etc);

  // usrmerge: /bin, /lib, ... are symlinks into /usr on the host; mirror them.
  for (const char* top : {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    char target[256];
    ssize_t n = ::readlink(top, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    p.links.push_back({target, top + 1});
  }

  for (const std::string& path : spec.readonly_paths) {
    if (::access(path.c_str(), F_OK) != 0) continue;  // optional runtime piece absent on this host
    bool is_dir = false;
    if (auto st = check_source(path, 0, is_dir); !st) return st.error();
    add_parent_dirs(path, seen, p.dirs);
    p.readonly_binds.push_back({path, 0, {}, -1, path.substr(1), is_dir});
  }

  // A synthesized /etc: the sandbox user and localhost, nothing of the host's.
  p.files.push_back({etc + "/passwd",
                     "root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"
                     "sandbox:x:" + std::to_string(kSandboxUid) + ":" + std::to_string(kSandboxGid) +
                         ":sandbox:/work:/bin/bash\n"
                     "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
                     0444});
  p.files.push_back({etc + "/group",
                     "root:x:0:\nsandbox:x:" + std::to_string(kSandboxGid) + ":\nnogroup:x:65534:\n", 0444});
  p.files.push_back({etc + "/hosts", "127.0.0.1 localhost\n::1 localhost ip6-localhost\n", 0444});
  p.files.push_back({etc + "/hostname", "throwbox\n", 0444});
  p.files.push_back({etc + "/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files\n", 0444});

  for (const char* dev : kDevices) {
    bool is_dir = false;
    std::string path = std::string("/dev/") + dev;
    if (auto st = check_source(path, O_NOFOLLOW, is_dir); !st) return st.error();
    p.device_binds.push_back({path, O_NOFOLLOW, {}, -1, p.dev + "/" + dev, false});
  }
  p.device_links = {{"/proc/self/fd", p.dev + "/fd"},
                    {"/proc/self/fd/0", p.dev + "/stdin"},
                    {"/proc/self/fd/1", p.dev + "/stdout"},
                    {"/proc/self/fd/2", p.dev + "/stderr"}};

  for (const InputBind& in : spec.inputs) {
    if (in.name.empty() || in.name.find('/') != std::string::npos || in.name == "." || in.name == "..")
      return util::make_error("sandbox", "input name \"" + in.name + "\" is not a plain file name");
    bool is_dir = false;
    if (auto st = check_source(in.host_path, O_NOFOLLOW, is_dir); !st) return st.error();
    if (is_dir) return util::make_error("sandbox", in.host_path + ": an input must be a regular file");
    p.input_copies.push_back({in.host_path, O_NOFOLLOW, {}, -1, p.inputs + "/" + in.name, false});
  }

  if (spec.code_path.rfind("/work/", 0) != 0)
    return util::make_error("sandbox", "code_path must be under /work");
  p.code_file = spec.code_path.substr(1);
  return p;
}

void mount_root_in_child(const Plan& p, int sock) {
  // Stop mount events propagating back to the host (and the host's into us).
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    fail_in_child(sock, "mount(MS_PRIVATE)", "/", errno);
  for (const auto* group : {&p.readonly_binds, &p.device_binds})
    for (const Bind& b : *group) open_source_in_child(b, sock);
  for (const Bind& b : p.input_copies) open_input_in_child(b, sock);
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

  // The runtime (/usr and friends): read-only, no set-id, no device nodes.
  for (const Bind& b : p.readonly_binds) bind_readonly(b, MOUNT_ATTR_NODEV, sock);

  // /dev: only the harmless character devices; noexec; the tmpfs itself read-only.
  mount_tmpfs(p.dev, p.dev_opts, MS_NOSUID | MS_NOEXEC, sock);
  for (const Bind& b : p.device_binds) bind_readonly(b, MOUNT_ATTR_NOEXEC, sock);
  for (const Link& l : p.device_links) make_symlink(l, sock);
  remount_readonly(p.dev, MS_NOSUID | MS_NOEXEC, sock);

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

  // Warm: the code arrives with the claim (the runner writes it).
  if (spec.warm.empty()) {
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
  if (!spec.warm.empty()) return;
  for (const Bind& b : p.input_copies) copy_input_in_child(b, sock);
  remount_readonly(p.inputs, MS_NOSUID | MS_NODEV | MS_NOEXEC, sock);
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
