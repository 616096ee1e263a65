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
  sock_fprog fprog{static_cast<unsigned short>(program.instructions.size()),
                   const_cast<sock_filter*>(program.instructions.data())};
  if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog) != 0) return errno;
  return 0;
}

}  // namespace sandbox::seccomp
