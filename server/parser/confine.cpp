// The parser helper's confinement steps (confine.h). Runs in the helper
// process itself, single-threaded, before it reads a request.
#include "server/parser/confine.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "server/sandbox/capabilities.h"
#include "server/util/fd.h"
#include "server/util/text.h"
#include "server/sandbox/landlock_abi.h"

namespace parser::confine {
namespace {

util::Error fail(const char* call, const std::string& arg, int err) {
  return util::make_error(util::ErrorCode::kSandbox, util::call_error(call, arg, err));
}

util::Status write_file(const std::string& path, const std::string& text) {
  util::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return fail("open", path, errno);
  if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    return fail("write", path, errno);
  return util::ok_status();
}

// Where the empty root is mounted before pivot_root: a directory every host has.
constexpr const char* kMountPoints[] = {"/tmp", "/var/tmp", "/run", "/mnt", "/srv", "/opt"};
constexpr const char* kRootOptions = "size=64k,nr_inodes=16,mode=0755";

using Filter = std::unique_ptr<void, void (*)(scmp_filter_ctx)>;

// Only these system calls; any other fails with EPERM (the helper goes on,
// and its parse fails, rejecting the file). Families left out on purpose:
// files (open*, stat of a path, exec*), sockets (socket, connect, bind),
// other processes (kill, tgkill of others, ptrace, process_vm_*), namespaces
// and mounts, keyrings, BPF, io_uring, perf.
util::Status install(bool zygote) {
  Filter ctx(seccomp_init(SCMP_ACT_ERRNO(EPERM)), seccomp_release);
  if (!ctx) return util::make_error(util::ErrorCode::kSandbox, "seccomp_init made no filter context");
  if (int r = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS); r != 0)
    return fail("seccomp_attr_set", "SCMP_FLTATR_ACT_BADARCH", -r);
  // Memory, time, the descriptors it was given, signals of its own, exit.
  const char* serving[] = {"read",
                           "write",
                           "readv",
                           "writev",
                           "sendto",
                           "recvfrom",
                           "close",
                           "lseek",
                           "fstat",
                           "newfstatat",
                           "brk",
                           "mmap",
                           "munmap",
                           "mremap",
                           "mprotect",
                           "madvise",
                           "futex",
                           "rt_sigaction",
                           "rt_sigprocmask",
                           "rt_sigreturn",
                           "getpid",
                           "getppid",
                           "gettid",
                           "clock_gettime",
                           "clock_getres",
                           "gettimeofday",
                           "getrandom",
                           "sched_yield",
                           "set_robust_list",
                           "rseq",
                           "exit",
                           "exit_group",
                           "poll",
                           "ppoll"};
  // The zygote's own: receive a socket, fork a child, set it up, send its pidfd.
  const char* forking[] = {"recvmsg", "sendmsg",   "clone",     "clone3",  "pidfd_open",
                           "prctl",   "prlimit64", "setrlimit", "seccomp", "wait4"};
  for (const char* name : serving) {
    const int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    if (int r = seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, nr, 0); r != 0) return fail("seccomp_rule_add", name, -r);
  }
  if (zygote)
    for (const char* name : forking) {
      const int nr = seccomp_syscall_resolve_name(name);
      if (nr == __NR_SCMP_ERROR) continue;
      if (int r = seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, nr, 0); r != 0) return fail("seccomp_rule_add", name, -r);
    }
  if (int r = seccomp_load(ctx.get()); r != 0) return fail("seccomp_load", zygote ? "zygote" : "child", -r);
  return util::ok_status();
}

}  // namespace

util::Status unshare_namespaces(const Identity& id) {
  const uid_t uid = ::getuid();
  const gid_t gid = ::getgid();
  int flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS;
  if (!id.as_root) flags |= CLONE_NEWUSER;
  if (::unshare(flags) != 0) return fail("unshare", id.as_root ? "mnt|net|ipc|uts" : "user|mnt|net|ipc|uts", errno);
  if (id.as_root) return util::ok_status();
  // The user's own ids, mapped to themselves: nothing else exists inside.
  if (auto s = write_file("/proc/self/setgroups", "deny"); !s) return s;
  if (auto s = write_file("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1"); !s) return s;
  if (auto s = write_file("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1"); !s) return s;
  return util::ok_status();
}

util::Status pivot_to_empty_root() {
  // Nothing of this namespace's mounts goes back to the host's.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return fail("mount(MS_PRIVATE)", "/", errno);
  const char* at = nullptr;
  for (const char* dir : kMountPoints) {
    struct stat st {};
    if (::stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) {
      at = dir;
      break;
    }
  }
  if (!at)
    return util::make_error(util::ErrorCode::kSandbox, "no directory to mount the helper's root on (/tmp, /run, ...)");
  if (::mount("tmpfs", at, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, kRootOptions) != 0)
    return fail("mount(tmpfs)", at, errno);
  if (::chdir(at) != 0) return fail("chdir", at, errno);
  // pivot_root(".", "."): the old root stacked under the new, then detached (pivot_root(2), NOTES).
  if (::syscall(SYS_pivot_root, ".", ".") != 0) return fail("pivot_root", at, errno);
  if (::umount2(".", MNT_DETACH) != 0) return fail("umount2(MNT_DETACH)", "old root", errno);
  if (::chdir("/") != 0) return fail("chdir", "/", errno);
  if (::mount(nullptr, "/", nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, kRootOptions) != 0)
    return fail("mount(MS_REMOUNT|MS_RDONLY)", "/", errno);
  return util::ok_status();
}

util::Status become(const Identity& id) {
  if (!id.as_root) return util::ok_status();
  if (::setgroups(0, nullptr) != 0) return fail("setgroups", "0", errno);
  if (::setresgid(id.gid, id.gid, id.gid) != 0) return fail("setresgid", std::to_string(id.gid), errno);
  if (::setresuid(id.uid, id.uid, id.uid) != 0) return fail("setresuid", std::to_string(id.uid), errno);
  if (::getuid() != id.uid || ::geteuid() != id.uid)
    return util::make_error(util::ErrorCode::kSandbox, "setresuid: still root");
  return util::ok_status();
}

util::Status drop_capabilities(const Identity& id) {
  if (id.as_root) {
    // setresuid from 0 cleared them (no SECBIT_KEEP_CAPS): make sure.
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2] = {};
    if (::syscall(SYS_capget, &header, data) != 0) return fail("capget", "helper", errno);
    for (auto& d : data)
      if (d.effective || d.permitted || d.inheritable)
        return util::make_error(util::ErrorCode::kSandbox, "the helper kept capabilities after setresuid");
    return util::ok_status();
  }
  const char* step = "";
  if (int err = sandbox::capabilities::drop_all_in_child(sandbox::capabilities::read_last_cap_in_parent(), &step))
    return fail(step, "helper", err);
  return util::ok_status();
}

util::Status harden_process() {
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return fail("prctl", "PR_SET_DUMPABLE", errno);
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return fail("prctl", "PR_SET_NO_NEW_PRIVS", errno);
  const struct rlimit none { 0, 0 };
  if (::setrlimit(RLIMIT_CORE, &none) != 0) return fail("setrlimit", "RLIMIT_CORE", errno);
  return util::ok_status();
}

util::Result<int> deny_all_files() {
  const long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi <= 0) return 0;  // the empty root alone stands
  struct {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
  } attr{};
  attr.handled_access_fs = LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_READ_FILE |
                           LANDLOCK_ACCESS_FS_READ_DIR | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                           LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR |
                           LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
                           LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
  if (abi >= 2) attr.handled_access_fs |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3) attr.handled_access_fs |= LANDLOCK_ACCESS_FS_TRUNCATE;
  if (abi >= 5) attr.handled_access_fs |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
  size_t size = sizeof(uint64_t);
  if (abi >= 4) size = 2 * sizeof(uint64_t);
  if (abi >= 6) {
    attr.scoped = LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | LANDLOCK_SCOPE_SIGNAL;
    size = sizeof attr;
  }
  util::UniqueFd ruleset(static_cast<int>(::syscall(SYS_landlock_create_ruleset, &attr, size, 0)));
  if (!ruleset.valid()) return fail("landlock_create_ruleset", "helper", errno);
  if (::syscall(SYS_landlock_restrict_self, ruleset.get(), 0) != 0)
    return fail("landlock_restrict_self", "helper", errno);
  return static_cast<int>(abi);
}

util::Status install_zygote_filter() { return install(true); }
util::Status install_child_filter() { return install(false); }

util::Status limit_child(uint64_t address_space_bytes, uint64_t cpu_seconds) {
  const struct rlimit as { address_space_bytes, address_space_bytes };
  const struct rlimit cpu { cpu_seconds, cpu_seconds };
  const struct rlimit files { 16, 16 };
  const struct rlimit fsize { 0, 0 };
  if (::setrlimit(RLIMIT_AS, &as) != 0) return fail("setrlimit", "RLIMIT_AS", errno);
  if (::setrlimit(RLIMIT_CPU, &cpu) != 0) return fail("setrlimit", "RLIMIT_CPU", errno);
  if (::setrlimit(RLIMIT_NOFILE, &files) != 0) return fail("setrlimit", "RLIMIT_NOFILE", errno);
  if (::setrlimit(RLIMIT_FSIZE, &fsize) != 0) return fail("setrlimit", "RLIMIT_FSIZE", errno);
  return util::ok_status();
}

}  // namespace parser::confine
