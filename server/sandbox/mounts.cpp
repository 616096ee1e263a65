// Sandbox mounts, the zygote's half: the plan, every path and option string
// pid 1 will need (mounts_child.cpp applies it).
#include "server/sandbox/mounts.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>

#include "server/util/fd.h"
#include "server/util/text.h"

namespace sandbox::mounts {
namespace {

constexpr uint64_t kRootTmpfsBytes = 1 << 20;  // the skeleton: directories, /etc files
constexpr uint64_t kDevTmpfsBytes = 64 << 10;
constexpr uint64_t kRootInodes = 4096;      // the skeleton's directories, files and mount points
constexpr uint64_t kDevInodes = 64;         // five device nodes and their links
constexpr uint64_t kScratchInodes = 16384;  // /work and /tmp: files a job may create
// /inputs holds the inputs and nothing else: their bytes and count plus room
// for the directory's own metadata.
constexpr uint64_t kInputsSlackBytes = 64 << 10;
constexpr uint64_t kInputsSlackInodes = 16;
// /outputs: the policy's file cap plus room for directories the program makes
// (the harvest counts files, not directories).
constexpr uint64_t kOutputsSlackInodes = 1024;
constexpr const char* kDevices[] = {"null", "zero", "full", "random", "urandom"};

std::string tmpfs_opts(uint64_t size, uint64_t inodes, const char* mode, bool owned) {
  std::string s = "size=" + std::to_string(size) + ",nr_inodes=" + std::to_string(inodes) + ",mode=" + mode;
  // uid/gid are read in the mounter's user namespace: the sandbox user owns it.
  if (owned) s += ",uid=" + std::to_string(kSandboxUid) + ",gid=" + std::to_string(kSandboxGid);
  return s;
}

void add_parent_dirs(const std::string& inner, std::set<std::string>& seen, std::vector<std::string>& dirs) {
  for (size_t pos = inner.find('/', 1); pos != std::string::npos; pos = inner.find('/', pos + 1)) {
    std::string d = inner.substr(1, pos - 1);
    if (seen.insert(d).second) dirs.push_back(d);
  }
}

// Checks a bind source's type in the parent; the child opens it for real.
util::Status check_source(const std::string& path, int extra_flags, bool& is_dir) {
  struct stat st {};
  int r = (extra_flags & O_NOFOLLOW) ? ::lstat(path.c_str(), &st) : ::stat(path.c_str(), &st);
  if (r != 0) return util::make_error(util::ErrorCode::kSandbox, util::call_error("stat", path, errno));
  if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode))
    return util::make_error(util::ErrorCode::kSandbox, path + ": not a directory, regular file or character device");
  is_dir = S_ISDIR(st.st_mode);
  return util::ok_status();
}

// Whether path (absolute) is in the tree at root without passing through a
// symbolic link: false when it is not there; an error when it is reached
// only through a link (or is one).
util::Result<bool> beneath(const std::string& root, const std::string& path) {
  util::UniqueFd dir(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return util::make_error(util::ErrorCode::kSandbox, util::call_error("open", root, errno));
  struct open_how how {};
  how.flags = O_PATH | O_CLOEXEC | O_NOFOLLOW;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const size_t start = path.find_first_not_of('/');
  if (start == std::string::npos)
    return util::make_error(util::ErrorCode::kSandbox, "runtime image: / cannot be bound");
  const std::string rel = path.substr(start);
  const int fd = static_cast<int>(::syscall(SYS_openat2, dir.get(), rel.c_str(), &how, sizeof how));
  if (fd >= 0) {
    ::close(fd);
    struct stat st {};
    if (::lstat((root + path).c_str(), &st) == 0 && S_ISLNK(st.st_mode))
      return util::make_error(util::ErrorCode::kSandbox, "runtime image: " + path + " is a symbolic link");
    return true;
  }
  if (errno == ENOENT) return false;
  if (errno == ELOOP || errno == EXDEV)
    return util::make_error(util::ErrorCode::kSandbox,
                            "runtime image: " + path + " is reached through a symbolic link in the image");
  return util::make_error(util::ErrorCode::kSandbox, util::call_error("openat2", root + path, errno));
}

}  // namespace

std::string root_path(const LaunchSpec& spec) { return spec.scratch_dir + "/root"; }

util::Result<Plan> plan_in_parent(const LaunchSpec& spec) {
  Plan p;
  p.root = root_path(spec);
  // Owned by the sandbox user so it can populate it after dropping host ids;
  // frozen read-only before the program runs.
  p.root_opts = tmpfs_opts(kRootTmpfsBytes, kRootInodes, "0755", true);
  p.dev_opts = tmpfs_opts(kDevTmpfsBytes, kDevInodes, "0755", false);
  uint64_t input_bytes = 0;
  uint64_t input_inodes = spec.inputs.size();
  for (const InputBind& in : spec.inputs) {
    struct stat st {};
    if (::lstat(in.host_path.c_str(), &st) == 0) input_bytes += static_cast<uint64_t>(st.st_size) + 4096;
    // At most one directory per "/" of its name (a check's view of a job).
    const auto slashes = static_cast<uint64_t>(std::count(in.name.begin(), in.name.end(), '/'));
    input_inodes += slashes;
    input_bytes += slashes * 4096;
  }
  // A warm sandbox gets its inputs later: its /inputs is capped by the policy's limits.
  p.inputs_opts = spec.warm == Warm::cold
                      ? tmpfs_opts(input_bytes + kInputsSlackBytes, input_inodes + kInputsSlackInodes, "0755", false)
                      : tmpfs_opts(spec.inputs_max_bytes + kInputsSlackBytes,
                                   spec.inputs_max_files + kInputsSlackInodes, "0755", false);
  p.work_opts = tmpfs_opts(spec.work_max_bytes, kScratchInodes, "0755", true);
  // The size is the one thing a claim with a workspace changes (a tmpfs
  // remount keeps what its options leave out).
  if (spec.warm != Warm::cold && spec.workspace_max_bytes > 0) p.workspace_work_bytes = spec.workspace_max_bytes;
  p.tmp_opts = tmpfs_opts(spec.tmp_max_bytes, kScratchInodes, "1777", true);
  p.outputs_opts = tmpfs_opts(spec.outputs_max_bytes, spec.outputs_max_files + kOutputsSlackInodes, "0755", true);
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
  // /job: the same directory as /inputs, under the name an acceptance check
  // reads its job from (/job/result.json, /job/inputs, /job/artifacts).
  p.links.push_back({"/" + p.inputs, "job"});

  // usrmerge: /bin, /lib, ... are symlinks into /usr on the host (or in the
  // runtime image); mirror them.
  const std::string& root = spec.runtime_root;
  for (const char* top : {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    char target[256];
    ssize_t n = ::readlink((root + top).c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    p.links.push_back({target, top + 1});
  }

  for (const std::string& path : spec.readonly_paths) {
    // From the image's tree, where the runtime has one: a path there that
    // passes through a symbolic link could lead out of it, and is refused.
    const std::string source = root + path;
    if (!root.empty()) {
      if (auto in = beneath(root, path); !in)
        return in.error();
      else if (!*in)
        continue;  // not in this image
    } else if (::access(source.c_str(), F_OK) != 0) {
      continue;  // optional runtime piece absent on this host
    }
    bool is_dir = false;
    if (auto st = check_source(source, root.empty() ? 0 : O_NOFOLLOW, is_dir); !st) return st.error();
    add_parent_dirs(path, seen, p.dirs);
    p.readonly_binds.push_back({source, root.empty() ? 0 : O_NOFOLLOW, {}, -1, path.substr(1), is_dir});
  }

  // A template's shared object, at a fixed path: its host path may lie where
  // the sandbox has a directory of its own (a build tree under /tmp).
  if (!spec.template_library.empty()) {
    bool is_dir = false;
    if (auto st = check_source(spec.template_library, 0, is_dir); !st) return st.error();
    if (is_dir) return util::make_error(util::ErrorCode::kSandbox, spec.template_library + ": not a regular file");
    add_parent_dirs(kTemplateLibraryPath, seen, p.dirs);
    p.readonly_binds.push_back({spec.template_library, 0, {}, -1, std::string(kTemplateLibraryPath).substr(1), false});
  }

  // The egress CA bundle: a file of the state directory, copied into the
  // root (a bind would name the state directory in /proc/self/mountinfo).
  if (!spec.ca_bundle_path.empty()) {
    bool is_dir = false;
    if (auto st = check_source(spec.ca_bundle_path, O_NOFOLLOW, is_dir); !st) return st.error();
    if (is_dir) return util::make_error(util::ErrorCode::kSandbox, spec.ca_bundle_path + ": not a regular file");
    struct stat st {};
    if (::lstat(spec.ca_bundle_path.c_str(), &st) != 0)
      return util::make_error(util::ErrorCode::kSandbox, util::call_error("lstat", spec.ca_bundle_path, errno));
    p.root_opts = tmpfs_opts(kRootTmpfsBytes + static_cast<uint64_t>(st.st_size) + 4096, kRootInodes, "0755", true);
    p.root_copies.push_back({spec.ca_bundle_path, O_NOFOLLOW, {}, -1, std::string(kCaBundlePath).substr(1), false});
  }

  // A synthesized /etc: the sandbox user and localhost, nothing of the host's.
  p.files.push_back({etc + "/passwd",
                     "root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"
                     "sandbox:x:" +
                         std::to_string(kSandboxUid) + ":" + std::to_string(kSandboxGid) +
                         ":sandbox:/work:/bin/bash\n"
                         "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
                     0444});
  p.files.push_back(
      {etc + "/group", "root:x:0:\nsandbox:x:" + std::to_string(kSandboxGid) + ":\nnogroup:x:65534:\n", 0444});
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

  std::set<std::string> input_dirs;
  for (const InputBind& in : spec.inputs) {
    if (const char* why = util::input_path_problem(in.name))
      return util::make_error(util::ErrorCode::kSandbox, "input name \"" + util::to_valid_utf8(in.name) + "\": " + why);
    for (size_t slash = in.name.find('/'); slash != std::string::npos; slash = in.name.find('/', slash + 1))
      if (input_dirs.insert(in.name.substr(0, slash)).second)
        p.input_dirs.push_back(p.inputs + "/" + in.name.substr(0, slash));
    bool is_dir = false;
    if (auto st = check_source(in.host_path, O_NOFOLLOW, is_dir); !st) return st.error();
    if (is_dir) return util::make_error(util::ErrorCode::kSandbox, in.host_path + ": an input must be a regular file");
    p.input_copies.push_back({in.host_path, O_NOFOLLOW, {}, -1, p.inputs + "/" + in.name, false});
  }

  if (!spec.cache_dir.empty()) {
    const std::string mount = kCacheMountPath;
    p.cache = mount.substr(1);
    add_parent_dirs(mount, seen, p.dirs);
    if (seen.insert(p.cache).second) p.dirs.push_back(p.cache);
    uint64_t bytes = 0;
    for (const std::string& f : spec.cache_files) {
      const std::string host = spec.cache_dir + "/" + f;
      bool is_dir = false;
      if (auto st = check_source(host, O_NOFOLLOW, is_dir); !st) return st.error();
      if (is_dir) return util::make_error(util::ErrorCode::kSandbox, host + ": a cache file must be a regular file");
      struct stat st {};
      if (::lstat(host.c_str(), &st) == 0) bytes += static_cast<uint64_t>(st.st_size) + 4096;
      p.cache_copies.push_back({host, O_NOFOLLOW, {}, -1, p.cache + "/" + f, false});
    }
    p.cache_opts = tmpfs_opts(bytes + kInputsSlackBytes, spec.cache_files.size() + kInputsSlackInodes, "0755", false);
    const std::string dir = spec.cache_link_dir.substr(1);  // "tmp/<name>" (spec.cpp checked it)
    p.tmp_dirs.push_back(dir);
    for (const std::string& f : spec.cache_files) p.tmp_links.push_back({mount + "/" + f, dir + "/" + f});
  }

  if (spec.code_path.rfind("/work/", 0) != 0)
    return util::make_error(util::ErrorCode::kSandbox, "code_path must be under /work");
  p.code_file = spec.code_path.substr(1);
  return p;
}

}  // namespace sandbox::mounts
