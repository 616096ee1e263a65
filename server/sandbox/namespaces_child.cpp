// Namespaces, pid 1's half: its network namespace, hostname and loopback.
// Runs between clone and execve: syscalls only, failures through
// fail_in_child. Never allocates (unit.child_side_symbols).
#include "server/sandbox/namespaces.h"

#include <net/if.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "server/sandbox/child_report.h"

namespace sandbox::namespaces {

void unshare_network_in_child(int report_sock) {
  // Owned by the sandbox's user namespace, which holds CAP_SYS_ADMIN over it;
  // nothing but this init code has run yet, and no program runs before it.
  if (::unshare(CLONE_NEWNET) != 0) fail_in_child(report_sock, "unshare", "CLONE_NEWNET", errno);
}

void unshare_cgroup_in_child(int report_sock) {
  if (::unshare(CLONE_NEWCGROUP) != 0) fail_in_child(report_sock, "unshare", "CLONE_NEWCGROUP", errno);
}

void set_hostname_in_child(int report_sock) {
  static constexpr char kHostname[] = "throwbox";
  if (::sethostname(kHostname, sizeof kHostname - 1) != 0) fail_in_child(report_sock, "sethostname", kHostname, errno);
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
