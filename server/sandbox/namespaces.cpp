// Namespaces, the zygote's half: the id maps of pid 1's user namespace.
// Parent side; pid 1's half is namespaces_child.cpp.
#include "server/sandbox/namespaces.h"

#include <fcntl.h>
#include <linux/securebits.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "server/sandbox/spec.h"
#include "server/util/fd.h"
#include "server/util/text.h"

namespace sandbox::namespaces {

namespace {
util::Status write_proc_file(pid_t pid, const char* file, const std::string& content) {
  std::string path = "/proc/" + std::to_string(pid) + "/" + file;
  util::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return util::make_error(util::ErrorCode::kSandbox, util::call_error("open", path, errno));
  if (::write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size()))
    return util::make_error(util::ErrorCode::kSandbox, util::call_error("write", path, errno));
  return util::ok_status();
}
}  // namespace

util::Status become_owner_in_parent(uint32_t host_uid, uint32_t host_gid) {
  auto failed = [](const char* call, int e) {
    return util::make_error(util::ErrorCode::kSandbox, util::call_error(call, "sandbox owner", e));
  };
  if (::prctl(PR_SET_SECUREBITS, SECBIT_NO_SETUID_FIXUP, 0, 0, 0) != 0) return failed("prctl(PR_SET_SECUREBITS)", errno);
  if (::setresgid(static_cast<gid_t>(-1), host_gid, static_cast<gid_t>(-1)) != 0) return failed("setresgid", errno);
  if (::setresuid(static_cast<uid_t>(-1), host_uid, static_cast<uid_t>(-1)) != 0) return failed("setresuid", errno);
  // setfsuid reports the previous id, never an error: check the result.
  (void)::setfsuid(0);
  (void)::setfsgid(0);
  if (::setfsuid(static_cast<uid_t>(-1)) != 0 || ::setfsgid(static_cast<gid_t>(-1)) != 0)
    return failed("setfsuid", EPERM);
  if (::geteuid() != host_uid || ::getegid() != host_gid) return failed("geteuid", EPERM);
  return util::ok_status();
}

util::Status restore_root_in_parent() {
  auto failed = [](const char* call, int e) {
    return util::make_error(util::ErrorCode::kSandbox, util::call_error(call, "root", e));
  };
  if (::setresuid(static_cast<uid_t>(-1), 0, static_cast<uid_t>(-1)) != 0) return failed("setresuid", errno);
  if (::setresgid(static_cast<gid_t>(-1), 0, static_cast<gid_t>(-1)) != 0) return failed("setresgid", errno);
  if (::prctl(PR_SET_SECUREBITS, 0, 0, 0, 0) != 0) return failed("prctl(PR_SET_SECUREBITS)", errno);
  return util::ok_status();
}

util::Status write_id_maps_in_parent(pid_t child, uint32_t host_uid, uint32_t host_gid) {
  // setgroups must be denied before gid_map (user_namespaces(7)); it also stops
  // the sandbox from dropping a group to bypass a group-deny permission.
  if (auto s = write_proc_file(child, "setgroups", "deny"); !s) return s;
  if (auto s = write_proc_file(child, "uid_map",
                               std::to_string(kSandboxUid) + " " + std::to_string(host_uid) + " 1\n");
      !s)
    return s;
  return write_proc_file(child, "gid_map",
                         std::to_string(kSandboxGid) + " " + std::to_string(host_gid) + " 1\n");
}

}  // namespace sandbox::namespaces
