// Seccomp filter. compile_in_parent runs in the runner before clone (libseccomp
// allocates); install_in_child (seccomp_child.cpp) is one syscall in the program
// child, after every other step, so the filter never gets in the way of the set-up itself.
// Default allow, with each kernel surface a sandbox never needs refused.
#include "server/sandbox/seccomp.h"

#include <fcntl.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "server/util/fd.h"
#include "server/util/text.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

namespace sandbox::seccomp {
namespace {

using Ctx = std::unique_ptr<void, void (*)(scmp_filter_ctx)>;

struct Builder {
  scmp_filter_ctx ctx;
  std::string error;

  // Refuse `name` with errno `err` (when it exists on this architecture).
  void deny(const char* name, int err = EPERM) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) return;  // not a syscall on this architecture
    add(nr, err, 0, nullptr, name);
  }
  void deny_if(const char* name, int err, scmp_arg_cmp cmp) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) return;
    add(nr, err, 1, &cmp, name);
  }
  void deny_if_both(const char* name, int err, scmp_arg_cmp a, scmp_arg_cmp b) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) return;
    const scmp_arg_cmp both[2] = {a, b};
    add(nr, err, 2, both, name);
  }
  void add(int nr, int err, unsigned n, const scmp_arg_cmp* cmp, const char* name) {
    int r = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(static_cast<uint32_t>(err)), nr, n, cmp);
    if (r != 0 && error.empty()) error = std::string("seccomp_rule_add(") + name + "): " + util::errno_name(-r);
  }
};

void add_rules(Builder& b, bool memory_cgroup, Role role) {
  // Debuggers and memory peeking: reading or steering another process.
  b.deny("ptrace");
  b.deny("process_vm_readv");
  b.deny("process_vm_writev");
  // The filesystem view is fixed by the launcher: no (re)mounting or re-rooting.
  for (const char* s : {"mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
                        "fsmount", "fspick", "mount_setattr"})
    b.deny(s);
  // New namespaces reopen kernel attack surface that unprivileged users reach only through them.
  b.deny("unshare");
  // A template's forks join the namespaces of their job's pid 1; the job's
  // own filter, installed by each fork on top of this one, refuses it.
  if (role == Role::job) b.deny("setns");
  for (unsigned long flag : {CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID,
                             CLONE_NEWNET, CLONE_NEWTIME})
    b.deny_if("clone", EPERM, SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag));
  // clone3 passes its flags in memory the filter cannot read: ENOSYS makes libc fall back to clone.
  b.deny("clone3", ENOSYS);
  // Kernel keyrings: shared per-user state and a history of bugs.
  b.deny("keyctl");
  b.deny("add_key");
  b.deny("request_key");
  // eBPF and perf: kernel code paths and side channels.
  b.deny("bpf");
  b.deny("perf_event_open");
  // userfaultfd makes kernel races easy to win.
  b.deny("userfaultfd");
  // io_uring bypasses this filter for the operations it submits.
  b.deny("io_uring_setup");
  b.deny("io_uring_enter");
  b.deny("io_uring_register");
  // Replacing or extending the kernel.
  for (const char* s : {"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module"}) b.deny(s);
  // File handles bypass path permissions (the "shocker" escape).
  b.deny("open_by_handle_at");
  b.deny("name_to_handle_at");
  // Raw I/O ports.
  b.deny("iopl");
  b.deny("ioperm");
  // Host-wide administration.
  for (const char* s :
       {"swapon", "swapoff", "reboot", "acct", "quotactl", "quotactl_fd", "syslog", "vhangup", "settimeofday",
        "clock_settime", "adjtimex", "clock_adjtime", "lookup_dcookie", "uselib", "nfsservctl", "fanotify_init"})
    b.deny(s);
  // personality: only PER_LINUX (0) and the query 0xffffffff. Other values turn off
  // ASLR (ADDR_NO_RANDOMIZE), make data executable (READ_IMPLIES_EXEC) or map page 0.
  // One comparison per rule: refuse "bit i set while bit 31 clear" and "bit 31 set
  // while bit j clear", which together are every 32-bit value but 0 and 0xffffffff.
  for (int i = 0; i < 31; ++i) {
    b.deny_if("personality", EPERM, SCMP_A0(SCMP_CMP_MASKED_EQ, (1UL << i) | (1UL << 31), 1UL << i));
    b.deny_if("personality", EPERM, SCMP_A0(SCMP_CMP_MASKED_EQ, (1UL << i) | (1UL << 31), 1UL << 31));
  }
  // memfd: an anonymous file that can be executed (bypassing noexec scratch)
  // and grows outside every tmpfs size cap.
  b.deny("memfd_create");
  // SysV shared memory outlives its processes and escapes per-process limits.
  b.deny("shmget");
  if (!memory_cgroup) {
    // No memory cgroup: MAP_SHARED|MAP_ANONYMOUS is shmem that RLIMIT_DATA
    // does not count, so a job could take host memory without bound.
    b.deny_if(
        "mmap", EPERM,
        SCMP_A3(SCMP_CMP_MASKED_EQ, MAP_SHARED | MAP_SHARED_VALIDATE | MAP_ANONYMOUS, MAP_SHARED | MAP_ANONYMOUS));
    b.deny_if("mmap", EPERM,
              SCMP_A3(SCMP_CMP_MASKED_EQ, MAP_SHARED | MAP_SHARED_VALIDATE | MAP_ANONYMOUS,
                      MAP_SHARED_VALIDATE | MAP_ANONYMOUS));
  }
  // Pipe buffers are budgeted per host user (fs.pipe-user-pages-soft, 64 MiB
  // by default): a job growing its pipes to 1 MiB takes that budget from
  // every process of its uid (a normal user's server shares one uid with its
  // sandboxes), whose new pipes are then cut to 8 KiB. Pipes stay at the
  // default 64 KiB, so RLIMIT_NOFILE bounds a job's pipe buffers.
  b.deny_if_both("fcntl", EPERM, SCMP_A1(SCMP_CMP_EQ, F_SETPIPE_SZ), SCMP_A2(SCMP_CMP_GT, 65536));
  // Terminal injection: pushing input into a terminal's queue, console control.
  b.deny_if("ioctl", EPERM, SCMP_A1(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFUL, TIOCSTI));
  b.deny_if("ioctl", EPERM, SCMP_A1(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFUL, TIOCLINUX));
  // Socket families: AF_UNIX, AF_INET and AF_INET6 only. AF_VSOCK reaches the
  // hypervisor host from a VM; AF_NETLINK, AF_PACKET and the rest are kernel surface.
  for (const char* call : {"socket", "socketpair"}) {
    b.deny_if(call, EAFNOSUPPORT, SCMP_A0(SCMP_CMP_EQ, 0));
    for (unsigned long family = 3; family <= 9; ++family) b.deny_if(call, EAFNOSUPPORT, SCMP_A0(SCMP_CMP_EQ, family));
    b.deny_if(call, EAFNOSUPPORT, SCMP_A0(SCMP_CMP_GE, static_cast<unsigned long>(AF_INET6) + 1));
  }
}

}  // namespace

util::Result<Program> compile_in_parent(bool memory_cgroup, Role role) {
  Ctx ctx(seccomp_init(SCMP_ACT_ALLOW), seccomp_release);
  // libseccomp returns no reason (no errno) for a context it cannot make.
  if (!ctx) return util::make_error(util::ErrorCode::kSandbox, "seccomp_init(SCMP_ACT_ALLOW) made no filter context");
  // Any syscall made through a non-native ABI (i386 int 0x80, x32) kills the
  // process: the rules below are written for the native table only.
  if (int r = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS); r != 0)
    return util::make_error(util::ErrorCode::kSandbox, "seccomp_attr_set(ACT_BADARCH): " + util::errno_name(-r));
  // no_new_privs is set by the launcher itself, as its own fail-closed step.
  if (int r = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 0); r != 0)
    return util::make_error(util::ErrorCode::kSandbox, "seccomp_attr_set(CTL_NNP): " + util::errno_name(-r));
  // A binary tree over syscall numbers instead of a linear chain: every
  // syscall of the program pays for the filter.
  if (int r = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_OPTIMIZE, 2); r != 0)
    return util::make_error(util::ErrorCode::kSandbox, "seccomp_attr_set(CTL_OPTIMIZE): " + util::errno_name(-r));
  Builder b{ctx.get(), ""};
  add_rules(b, memory_cgroup, role);
  if (!b.error.empty()) return util::make_error(util::ErrorCode::kSandbox, b.error);

  util::UniqueFd mem(::memfd_create("throwbox-seccomp", MFD_CLOEXEC));
  if (!mem.valid())
    return util::make_error(util::ErrorCode::kSandbox, util::call_error("memfd_create", "seccomp", errno));
  if (int r = seccomp_export_bpf(ctx.get(), mem.get()); r != 0)
    return util::make_error(util::ErrorCode::kSandbox, "seccomp_export_bpf: " + util::errno_name(-r));
  off_t size = ::lseek(mem.get(), 0, SEEK_END);
  if (size <= 0 || size % static_cast<off_t>(sizeof(sock_filter)) != 0)
    return util::make_error(util::ErrorCode::kSandbox, "seccomp_export_bpf produced no program");
  Program p;
  p.instructions.resize(static_cast<size_t>(size) / sizeof(sock_filter));
  if (::pread(mem.get(), p.instructions.data(), static_cast<size_t>(size), 0) != size)
    return util::make_error(util::ErrorCode::kSandbox, util::call_error("pread", "seccomp", errno));
  return p;
}

util::Result<Program> from_bytes(const std::string& raw) {
  if (raw.empty() || raw.size() % sizeof(sock_filter) != 0 || raw.size() / sizeof(sock_filter) > kMaxInstructions)
    return util::make_error(util::ErrorCode::kSandbox, "seccomp program in the launch spec is malformed");
  Program p;
  p.instructions.resize(raw.size() / sizeof(sock_filter));
  std::memcpy(p.instructions.data(), raw.data(), raw.size());
  return p;
}

}  // namespace sandbox::seccomp
