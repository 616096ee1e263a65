// Namespaces, the zygote's half: the id maps of pid 1's user namespace.
// Parent side; pid 1's half is namespaces_child.cpp.
#include "server/sandbox/namespaces.h"

#include <fcntl.h>
#include <linux/nsfs.h>
#include <linux/securebits.h>
#include <sched.h>
#include <sys/fsuid.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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
  if (::prctl(PR_SET_SECUREBITS, SECBIT_NO_SETUID_FIXUP, 0, 0, 0) != 0)
    return failed("prctl(PR_SET_SECUREBITS)", errno);
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

namespace {

constexpr int kJoinTries = 2000;  // with kJoinPauseNs: 2 s at most
constexpr long kJoinPauseNs = 1000 * 1000;

// Runs one id mapper (newuidmap/newgidmap) from the helper: stdin and stdout
// /dev/null, stderr to err_fd, nothing else inherited. Its exit status.
int run_mapper(const std::vector<std::string>& args, int err_fd) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  char* envp[] = {nullptr};
  pid_t child = ::fork();
  if (child < 0) return 127;
  if (child == 0) {
    int null_fd = ::open("/dev/null", O_RDWR);
    if (null_fd < 0 || ::dup2(null_fd, 0) < 0 || ::dup2(null_fd, 1) < 0 || ::dup2(err_fd, 2) < 0) ::_exit(127);
    ::close_range(3, ~0U, 0);
    ::execve(argv[0], argv.data(), envp);
    ::_exit(127);
  }
  int st = 0;
  while (::waitpid(child, &st, 0) < 0 && errno == EINTR) {}
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

}  // namespace

util::Status enter_subordinate_ns_in_parent(uint32_t sub_uid, uint32_t sub_gid) {
  const std::string self = std::to_string(::getpid());
  const std::vector<std::string> uid_args = {
      kNewuidmap, self, "0", std::to_string(::getuid()), "1", "1", std::to_string(sub_uid), "1"};
  const std::vector<std::string> gid_args = {
      kNewgidmap, self, "0", std::to_string(::getgid()), "1", "1", std::to_string(sub_gid), "1"};
  util::Pipe go, report;
  if (!util::make_pipe(go) || !util::make_pipe(report))
    return util::make_error(util::ErrorCode::kSandbox, util::call_error("pipe2", "id mapper", errno));
  // Forked before the unshare: the mappers must run in the parent namespace.
  pid_t helper = ::fork();
  if (helper < 0) return util::make_error(util::ErrorCode::kSandbox, util::call_error("fork", "id mapper", errno));
  if (helper == 0) {
    go.write.reset();
    report.read.reset();
    char b = 0;
    if (util::read_some(go.read.get(), &b, 1) != 1) ::_exit(1);
    int r = run_mapper(uid_args, report.write.get());
    if (r == 0) r = run_mapper(gid_args, report.write.get());
    ::_exit(r == 0 ? 0 : 1);
  }
  go.read.reset();
  report.write.reset();
  int unshared = ::unshare(CLONE_NEWUSER) == 0 ? 0 : errno;
  // The new capabilities cleared dumpable, which makes /proc/<zygote> root's:
  // the mappers (running as this user) could not open its uid_map.
  if (unshared == 0 && ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) unshared = errno;
  if (unshared == 0) (void)util::write_all(go.write.get(), "1", 1);
  go.write.reset();  // EOF: a helper not told to go exits
  std::string said;
  char buf[512];
  for (long n; (n = util::read_some(report.read.get(), buf, sizeof buf)) > 0 && said.size() < 2048;)
    said.append(buf, static_cast<size_t>(n));
  int st = 0;
  while (::waitpid(helper, &st, 0) < 0 && errno == EINTR) {}
  if (unshared != 0)
    return util::make_error(util::ErrorCode::kSandbox,
                            util::call_error("unshare", "CLONE_NEWUSER (subordinate ids)", unshared));
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
    return util::make_error(util::ErrorCode::kSandbox,
                            "newuidmap/newgidmap " + self + " 0 <server's id> 1 1 " + std::to_string(sub_uid) + "/" +
                                std::to_string(sub_gid) + " 1 failed" +
                                (said.empty() ? "" : ": " + util::to_valid_utf8(said)) +
                                " (the ids must be in this user's /etc/subuid and /etc/subgid ranges)");
  }
  if (::geteuid() != 0)
    return util::make_error(util::ErrorCode::kSandbox,
                            "the subordinate user namespace did not map the server's uid to 0");
  return util::ok_status();
}

util::Status join_subordinate_ns_in_parent(pid_t pid1) {
  const std::string path = "/proc/" + std::to_string(pid1) + "/ns/user";
  // pid 1 changes its ids meanwhile (pid1_become_sandbox_user): from its
  // setresgid to its PR_SET_DUMPABLE its memory is not dumpable and this
  // process, not host root, is refused its /proc files (EACCES). The window
  // is three syscalls long: try again, for a bounded time.
  util::UniqueFd ns;
  for (int tries = 0; tries < kJoinTries; ++tries) {
    ns.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (ns.valid() || errno != EACCES) break;
    struct timespec pause {
      0, kJoinPauseNs
    };
    ::nanosleep(&pause, nullptr);
  }
  if (!ns.valid()) return util::make_error(util::ErrorCode::kSandbox, util::call_error("open", path, errno));
  util::UniqueFd parent(::ioctl(ns.get(), NS_GET_PARENT));
  if (!parent.valid())
    return util::make_error(util::ErrorCode::kSandbox, util::call_error("ioctl(NS_GET_PARENT)", path, errno));
  if (::setns(parent.get(), CLONE_NEWUSER) != 0)
    return util::make_error(util::ErrorCode::kSandbox,
                            util::call_error("setns", "the subordinate user namespace", errno));
  // The id change cleared dumpable: the server reads this process's /proc.
  if (::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0)
    return util::make_error(util::ErrorCode::kSandbox, util::call_error("prctl", "PR_SET_DUMPABLE", errno));
  return util::ok_status();
}

util::Status write_id_maps_in_parent(pid_t child, uint32_t host_uid, uint32_t host_gid) {
  // setgroups must be denied before gid_map (user_namespaces(7)); it also stops
  // the sandbox from dropping a group to bypass a group-deny permission.
  if (auto s = write_proc_file(child, "setgroups", "deny"); !s) return s;
  if (auto s = write_proc_file(child, "uid_map", std::to_string(kSandboxUid) + " " + std::to_string(host_uid) + " 1\n");
      !s)
    return s;
  return write_proc_file(child, "gid_map", std::to_string(kSandboxGid) + " " + std::to_string(host_gid) + " 1\n");
}

}  // namespace sandbox::namespaces

namespace sandbox::namespaces {

namespace {
// "inside outside count" lines: the sandbox user's, then the ids first..
// first+count-1 to themselves, the sandbox user's own host id left out
// (the kernel refuses overlapping ranges).
std::string template_map(uint32_t sandbox_id, uint32_t host_id, uint32_t first, uint32_t count) {
  std::string map = std::to_string(sandbox_id) + " " + std::to_string(host_id) + " 1\n";
  auto identity = [&map](uint64_t from, uint64_t to) {  // [from, to)
    if (from < to) map += std::to_string(from) + " " + std::to_string(from) + " " + std::to_string(to - from) + "\n";
  };
  const uint64_t end = uint64_t{first} + count;
  if (count == 0) return map;
  if (host_id >= first && host_id < end) {
    identity(first, host_id);
    identity(uint64_t{host_id} + 1, end);
  } else {
    identity(first, end);
  }
  return map;
}
}  // namespace

util::Status write_template_id_maps_in_parent(pid_t child, uint32_t host_uid, uint32_t host_gid, uint32_t first,
                                              uint32_t count) {
  if (auto s = write_proc_file(child, "setgroups", "deny"); !s) return s;
  if (auto s = write_proc_file(child, "uid_map", template_map(kSandboxUid, host_uid, first, count)); !s) return s;
  return write_proc_file(child, "gid_map", template_map(kSandboxGid, host_gid, first, count));
}

util::Result<uint32_t> map_id_in_parent(pid_t pid, const char* map_file, uint32_t id, bool from_host) {
  const std::string path = "/proc/" + std::to_string(pid) + "/" + map_file;
  std::ifstream in(path);
  if (!in) return util::make_error(util::ErrorCode::kSandbox, util::call_error("open", path, errno));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    uint64_t inside = 0, outside = 0, count = 0;
    if (!(fields >> inside >> outside >> count)) continue;
    const uint64_t from = from_host ? outside : inside, to = from_host ? inside : outside;
    if (id >= from && id - from < count) return static_cast<uint32_t>(to + (id - from));
  }
  return util::make_error(util::ErrorCode::kSandbox, std::string(from_host ? "host id " : "id ") + std::to_string(id) +
                                                         " is not mapped in the user namespace of " + path);
}

util::Status enter_template_in_parent(int pidfd, uint32_t owner_uid, uint32_t owner_gid) {
  auto failed = [](const char* call, int e) {
    return util::make_error(util::ErrorCode::kSandbox, util::call_error(call, "the template's namespaces", e));
  };
  // As root: the template's user is pid 1's user namespace's owner, the
  // file-system ids stay root's (pid 1 opens its sources as the server).
  if (::geteuid() == 0 && owner_uid != 0) {
    if (auto s = become_owner_in_parent(owner_uid, owner_gid); !s) return s;
  }
  if (::setns(pidfd, CLONE_NEWUSER | CLONE_NEWPID) != 0) return failed("setns", errno);
  // The id change cleared dumpable on the memory pid 1 will share: the
  // runner opens pid 1's /proc entries.
  if (::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) return failed("prctl(PR_SET_DUMPABLE)", errno);
  return util::ok_status();
}

util::Status own_files_as_template_user_in_parent() {
  (void)::setfsuid(kSandboxUid);
  (void)::setfsgid(kSandboxGid);
  if (::setfsuid(static_cast<uid_t>(-1)) != kSandboxUid || ::setfsgid(static_cast<gid_t>(-1)) != kSandboxGid)
    return util::make_error(util::ErrorCode::kSandbox,
                            util::call_error("setfsuid", "the template's sandbox user", EPERM));
  // The change cleared dumpable again: pid 1's /proc is owned by it only if set.
  if (::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0)
    return util::make_error(util::ErrorCode::kSandbox, util::call_error("prctl", "PR_SET_DUMPABLE", errno));
  return util::ok_status();
}

}  // namespace sandbox::namespaces
