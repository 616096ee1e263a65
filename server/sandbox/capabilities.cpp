// Capability drop, in the program child after no_new_privs and before seccomp.
// The child holds every capability of its user namespace until here (it built
// the mounts); after this nothing is left, and nothing can be regained.
#include "server/sandbox/capabilities.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace sandbox::capabilities {

int read_last_cap_in_parent() {
  int fd = ::open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return CAP_LAST_CAP;
  char buf[16] = {};
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  return n > 0 ? std::atoi(buf) : CAP_LAST_CAP;
}

int drop_all_in_child(int last_cap, const char** step) {
  // Lock root semantics off for good: uid 0 (unmapped here anyway) gains
  // nothing at execve, and no later setuid restores capabilities.
  *step = "prctl(PR_SET_SECUREBITS)";
  unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED |
                       SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
  if (::prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0) return errno;
  // Bounding set: no file capability can ever add anything back.
  *step = "prctl(PR_CAPBSET_DROP)";
  for (int cap = 0; cap <= last_cap; ++cap)
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) return errno;
  *step = "prctl(PR_CAP_AMBIENT_CLEAR_ALL)";
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) return errno;
  // Effective, permitted, inheritable: all empty (capset(2), version 3).
  *step = "capset";
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capset, &header, data) != 0) return errno;
  return 0;
}

}  // namespace sandbox::capabilities
