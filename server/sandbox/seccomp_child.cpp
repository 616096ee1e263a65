// Seccomp, the program child's half: installing the filter compiled by the
// zygote, the last step before execve. One syscall; never allocates
// (unit.child_side_symbols).
#include "server/sandbox/seccomp.h"

#include <linux/seccomp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace sandbox::seccomp {

int install_in_child(const Program& program) {
  return install_in_child(program.instructions.data(), program.instructions.size());
}

int install_in_child(const sock_filter* instructions, size_t count) {
  if (count == 0 || count > kMaxInstructions) return EINVAL;
  sock_fprog fprog{static_cast<unsigned short>(count), const_cast<sock_filter*>(instructions)};
  if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog) != 0) return errno;
  return 0;
}

}  // namespace sandbox::seccomp
