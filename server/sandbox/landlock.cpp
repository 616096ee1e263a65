// Landlock ruleset (landlock(7)). Only write-type rights are handled, so reads
// and execution are governed by the mount layout alone; every write-type
// right is denied except beneath the three scratch areas.
#include "server/sandbox/landlock.h"
#include "server/sandbox/landlock_abi.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace sandbox::landlock {
namespace {

// landlock_ruleset_attr as of ABI 6; older kernels get a shorter size.
struct RulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};

uint64_t write_rights(int abi) {
  uint64_t r = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE |
               LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
               LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK |
               LANDLOCK_ACCESS_FS_MAKE_SYM;
  if (abi >= 2) r |= LANDLOCK_ACCESS_FS_REFER;  // cross-directory rename/link
  if (abi >= 3) r |= LANDLOCK_ACCESS_FS_TRUNCATE;
  if (abi >= 5) r |= LANDLOCK_ACCESS_FS_IOCTL_DEV;  // device ioctls
  return r;
}

int add_path_rule(int ruleset, const char* path, uint64_t rights) {
  int fd = ::open(path, O_PATH | O_CLOEXEC | O_DIRECTORY);
  if (fd < 0) return errno;
  struct landlock_path_beneath_attr attr = {rights, fd};
  long r = ::syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &attr, 0);
  int err = r != 0 ? errno : 0;
  ::close(fd);
  return err;
}

}  // namespace

int abi_version() {
  long v = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return v < 0 ? 0 : static_cast<int>(v);
}

int build_ruleset_in_child(int abi, const char** step) {
  RulesetAttr attr{};
  attr.handled_access_fs = write_rights(abi);
  size_t size = sizeof(uint64_t);  // ABI 1-3: handled_access_fs only
  if (abi >= 4) size = 2 * sizeof(uint64_t);
  if (abi >= 6) {
    // Abstract unix sockets and signals stay inside the sandbox's domain
    // (pid 1, outside it, cannot be signalled or connected to).
    attr.scoped = LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | LANDLOCK_SCOPE_SIGNAL;
    size = sizeof attr;
  }
  *step = "landlock_create_ruleset";
  long ruleset = ::syscall(SYS_landlock_create_ruleset, &attr, size, 0);
  if (ruleset < 0) return -errno;
  const uint64_t all = write_rights(abi);
  // The device nodes: writing /dev/null, ioctls on them; nothing can be created there.
  const uint64_t dev = LANDLOCK_ACCESS_FS_WRITE_FILE | (abi >= 3 ? LANDLOCK_ACCESS_FS_TRUNCATE : 0) |
                       (abi >= 5 ? LANDLOCK_ACCESS_FS_IOCTL_DEV : 0);
  const struct {
    const char* path;
    uint64_t rights;
  } rules[] = {{"/work", all}, {"/tmp", all}, {"/outputs", all}, {"/dev", dev}};
  for (auto& rule : rules) {
    *step = rule.path;
    if (int err = add_path_rule(static_cast<int>(ruleset), rule.path, rule.rights); err != 0) {
      ::close(static_cast<int>(ruleset));
      return -err;
    }
  }
  return static_cast<int>(ruleset);
}

int restrict_self_in_child(int ruleset_fd) {
  if (::syscall(SYS_landlock_restrict_self, ruleset_fd, 0) != 0) return errno;
  return 0;
}

}  // namespace sandbox::landlock
