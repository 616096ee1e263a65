// Namespaces, the zygote's half: the id maps of pid 1's user namespace.
// Parent side; pid 1's half is namespaces_child.cpp.
#include "server/sandbox/namespaces.h"

#include <fcntl.h>
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
