// Bytes with at most one descriptor over a unix socket (SCM_RIGHTS), for the
// server, the parser helper, the runner and sandbox pid 1 alike. Inline and
// allocation-free: pid 1 calls them after fork, where nothing may allocate,
// lock or log (tests/child_side_symbols.py reads the calls they make).
#pragma once
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace util {

// The most descriptors one message carries here.
constexpr int kFdsPerMessageMax = 8;

// sendmsg of `size` bytes, carrying fds[0..count) (none when count is 0;
// at most kFdsPerMessageMax); retried on EINTR. Returns what sendmsg
// returned (bytes sent, or -1 with errno; EINVAL for too many descriptors).
inline ssize_t send_with_fds(int sock, const void* data, size_t size, const int* fds, int count) {
  if (count < 0 || count > kFdsPerMessageMax) {
    errno = EINVAL;
    return -1;
  }
  struct iovec iov {
    const_cast<void*>(data), size
  };
  alignas(struct cmsghdr) char control[CMSG_SPACE(kFdsPerMessageMax * sizeof(int))] = {};
  struct msghdr msg {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (count > 0) {
    const size_t bytes = static_cast<size_t>(count) * sizeof(int);
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(bytes);
    struct cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(bytes);
    __builtin_memcpy(CMSG_DATA(cm), fds, bytes);
  }
  ssize_t n;
  do n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  return n;
}

// send_with_fds of one descriptor, or none when `fd` is negative.
inline ssize_t send_with_fd(int sock, const void* data, size_t size, int fd) {
  return send_with_fds(sock, data, size, &fd, fd >= 0 ? 1 : 0);
}

// recvmsg of up to `size` bytes (flags: MSG_DONTWAIT and the like;
// MSG_CMSG_CLOEXEC is always added), each descriptor that came with them
// handed to each_fd (room for kFdsPerMessageMax; the kernel closes any
// beyond and sets MSG_CTRUNC). Returns
// what recvmsg returned, once: EINTR is the caller's to retry.
template <class EachFd>
ssize_t receive_with_fds(int sock, void* data, size_t size, int flags, EachFd&& each_fd) {
  struct iovec iov {
    data, size
  };
  alignas(struct cmsghdr) char control[CMSG_SPACE(kFdsPerMessageMax * sizeof(int))] = {};
  struct msghdr msg {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(sock, &msg, flags | MSG_CMSG_CLOEXEC);
  if (n < 0) return n;
  for (struct cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int passed;
      __builtin_memcpy(&passed, CMSG_DATA(cm) + i * sizeof(int), sizeof passed);
      each_fd(passed);
    }
  }
  return n;
}

// receive_with_fds for one descriptor: *fd is the first that came, or -1;
// any more are closed, not leaked.
inline ssize_t receive_with_fd(int sock, void* data, size_t size, int flags, int* fd) {
  *fd = -1;
  return receive_with_fds(sock, data, size, flags, [fd](int passed) {
    if (*fd < 0)
      *fd = passed;
    else
      ::close(passed);
  });
}

}  // namespace util
