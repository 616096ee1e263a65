// UniqueFd and EINTR-safe read/write loops. Async-signal-safe: no allocation.
#include "server/util/fd.h"

#include <cerrno>
#include <fcntl.h>
#include <unistd.h>

namespace util {

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

bool make_pipe(Pipe& out) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  out.read.reset(fds[0]);
  out.write.reset(fds[1]);
  return true;
}

bool write_all(int fd, const void* data, unsigned long size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    size -= static_cast<unsigned long>(n);
  }
  return true;
}

long read_some(int fd, void* data, unsigned long size) {
  for (;;) {
    ssize_t n = ::read(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    return n;
  }
}

}  // namespace util
