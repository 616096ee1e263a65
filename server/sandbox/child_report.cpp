// fail_in_child: async-signal-safe error report (fixed buffer, write(2), _exit).
#include "server/sandbox/child_report.h"

#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

namespace sandbox {
namespace {
void append(char* buf, size_t cap, size_t& len, const char* s) {
  while (*s && len + 1 < cap) buf[len++] = *s++;
  buf[len] = '\0';
}
}  // namespace

void fail_in_child(int sock, const char* call, const char* arg, int err) {
  char buf[1024];
  size_t len = 0;
  buf[0] = '\0';
  append(buf, sizeof buf, len, "E");
  append(buf, sizeof buf, len, call);
  append(buf, sizeof buf, len, "(\"");
  append(buf, sizeof buf, len, arg ? arg : "");
  append(buf, sizeof buf, len, "\"): ");
  const char* name = err ? strerrorname_np(err) : "failed";
  append(buf, sizeof buf, len, name ? name : "unknown errno");
  ::send(sock, buf, len, MSG_NOSIGNAL);
  ::_exit(1);
}

}  // namespace sandbox
