// Copies a claim's code and inputs into a warm sandbox. See deliver.h.
#include "server/sandbox/deliver.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <set>
#include <string>

#include "server/sandbox/fs_identity.h"
#include "server/sandbox/workspace.h"
#include "server/util/fd.h"
#include "server/util/text.h"

namespace sandbox::deliver {
namespace {

int create_beneath(int dirfd, const std::string& rel, mode_t mode) {
  struct open_how how {};
  how.flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW;
  how.mode = mode;
  // Not RESOLVE_NO_XDEV: /inputs and /work are mounts of their own under the root.
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  for (;;) {
    long fd = ::syscall(SYS_openat2, dirfd, rel.c_str(), &how, sizeof how);
    if (fd < 0 && errno == EINTR) continue;
    return static_cast<int>(fd);
  }
}

// rel's directory made beneath dirfd (no link followed), unless it is one already.
util::Status mkdir_beneath(int dirfd, const std::string& rel) {
  const size_t slash = rel.rfind('/');
  struct open_how how {};
  how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const std::string parent = rel.substr(0, slash);
  long fd;
  do fd = ::syscall(SYS_openat2, dirfd, parent.c_str(), &how, sizeof how);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) return util::make_error(util::ErrorCode::kSandbox, util::call_error("openat2", "/" + parent, errno));
  util::UniqueFd dir(static_cast<int>(fd));
  const std::string name = rel.substr(slash + 1);
  if (::mkdirat(dir.get(), name.c_str(), 0755) == 0) return util::ok_status();
  const int err = errno;
  struct stat st {};
  if (err == EEXIST && ::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
    return util::ok_status();
  return util::make_error(util::ErrorCode::kSandbox, util::call_error("mkdirat", "/" + rel, err));
}

util::Status copy_input(int root, const LaunchSpec& spec, const InputBind& in, uint64_t& total) {
  if (const char* why = util::input_path_problem(in.name))
    return util::make_error(util::ErrorCode::kSandbox, "input name \"" + util::to_valid_utf8(in.name) + "\": " + why);
  util::UniqueFd src(::open(in.host_path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (!src.valid()) return util::make_error(util::ErrorCode::kSandbox, util::call_error("open", in.host_path, errno));
  struct stat st {};
  if (::fstat(src.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return util::make_error(util::ErrorCode::kSandbox, in.host_path + ": an input must be a regular file");
  total += static_cast<uint64_t>(st.st_size);
  if (total > spec.inputs_max_bytes)
    return util::make_error(util::ErrorCode::kSandbox,
                            "inputs exceed the warm sandbox's " + std::to_string(spec.inputs_max_bytes) + " bytes");
  AsSandboxUser as(spec.host_uid, spec.host_gid);
  // A check's view of a job names files in directories: made first, parents first.
  for (size_t slash = in.name.find('/'); slash != std::string::npos; slash = in.name.find('/', slash + 1))
    if (auto s = mkdir_beneath(root, "inputs/" + in.name.substr(0, slash)); !s) return s;
  util::UniqueFd dst(create_beneath(root, "inputs/" + in.name, 0444));
  if (!dst.valid())
    return util::make_error(util::ErrorCode::kSandbox, util::call_error("openat2", "/inputs/" + in.name, errno));
  for (off_t left = st.st_size; left > 0;) {
    ssize_t n = ::sendfile(dst.get(), src.get(), nullptr, static_cast<size_t>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return util::make_error(util::ErrorCode::kSandbox,
                              util::call_error("sendfile", "/inputs/" + in.name, n < 0 ? errno : EIO));
    left -= n;
  }
  return util::ok_status();
}

}  // namespace

util::Status claim_files(pid_t init_pid, const LaunchSpec& spec, const Claim& claim) {
  std::string root_path = "/proc/" + std::to_string(init_pid) + "/root";
  util::UniqueFd root(::open(root_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) return util::make_error(util::ErrorCode::kSandbox, util::call_error("open", root_path, errno));
  if (claim.inputs.size() > spec.inputs_max_files)
    return util::make_error(util::ErrorCode::kSandbox,
                            "more inputs than the warm sandbox takes (" + std::to_string(spec.inputs_max_files) + ")");
  std::set<std::string> names;
  uint64_t total = 0;
  for (const InputBind& in : claim.inputs) {
    if (!names.insert(in.name).second)
      return util::make_error(util::ErrorCode::kSandbox, "two inputs are both named \"" + in.name + "\"");
    if (auto s = copy_input(root.get(), spec, in, total); !s) return s;
  }
  // The workspace before the code: an entry of the code file's name is not
  // copied, so the code's O_EXCL create below finds the name free.
  if (!claim.workspace_in.empty()) {
    if (auto s = workspace::copy_in(init_pid, spec, claim.workspace_in); !s) return s;
  }
  if (spec.code_path.rfind("/work/", 0) != 0)
    return util::make_error(util::ErrorCode::kSandbox, "code_path must be under /work");
  AsSandboxUser as(spec.host_uid, spec.host_gid);
  util::UniqueFd code(create_beneath(root.get(), spec.code_path.substr(1), 0644));
  if (!code.valid())
    return util::make_error(util::ErrorCode::kSandbox, util::call_error("openat2", spec.code_path, errno));
  if (!util::write_all(code.get(), claim.code.data(), claim.code.size()))
    return util::make_error(util::ErrorCode::kSandbox, util::call_error("write", spec.code_path, errno));
  return util::ok_status();
}

bool parent_alive(pid_t parent) {
  // The parent-death signal is armed again; a parent that died while it was
  // cleared has already reparented us.
  return ::getppid() == parent;
}

}  // namespace sandbox::deliver
