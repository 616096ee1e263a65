// Namespaces and id maps. The *_in_parent functions run in the runner (single
// threaded); *_in_child run between clone and execve: syscalls only.
#include "server/sandbox/namespaces.h"

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "server/sandbox/child_report.h"
#include "server/sandbox/spec.h"
#include "server/util/fd.h"
#include "server/util/text.h"

namespace sandbox::namespaces {

namespace {
util::Status write_proc_file(pid_t pid, const char* file, const std::string& content) {
  std::string path = "/proc/" + std::to_string(pid) + "/" + file;
  util::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return util::make_error("sandbox", util::call_error("open", path, errno));
  if (::write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size()))
    return util::make_error("sandbox", util::call_error("write", path, errno));
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

void unshare_network_in_child(int report_sock) {
  // Owned by the sandbox's user namespace, which holds CAP_SYS_ADMIN over it;
  // nothing but this init code has run yet, and no program runs before it.
  if (::unshare(CLONE_NEWNET) != 0) fail_in_child(report_sock, "unshare", "CLONE_NEWNET", errno);
}

void set_hostname_in_child(int report_sock) {
  static constexpr char kHostname[] = "throwbox";
  if (::sethostname(kHostname, sizeof kHostname - 1) != 0)
    fail_in_child(report_sock, "sethostname", kHostname, errno);
  if (::setdomainname(kHostname, sizeof kHostname - 1) != 0)
    fail_in_child(report_sock, "setdomainname", kHostname, errno);
}

void bring_up_loopback_in_child(int report_sock) {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) fail_in_child(report_sock, "socket", "AF_INET", errno);
  struct ifreq ifr;
  ::memset(&ifr, 0, sizeof ifr);
  ::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (::ioctl(s, SIOCGIFFLAGS, &ifr) != 0) fail_in_child(report_sock, "ioctl(SIOCGIFFLAGS)", "lo", errno);
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
  if (::ioctl(s, SIOCSIFFLAGS, &ifr) != 0) fail_in_child(report_sock, "ioctl(SIOCSIFFLAGS)", "lo", errno);
  ::close(s);
}

}  // namespace sandbox::namespaces
