// UniqueFd: the one owner of a file descriptor; closes it once. Runs everywhere
// (server threads, runner, sandbox init), so close() is async-signal-safe.
#pragma once
#include <utility>

namespace util {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.fd_, -1));
    return *this;
  }
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// A pipe with both ends close-on-exec.
struct Pipe {
  UniqueFd read;
  UniqueFd write;
};
bool make_pipe(Pipe& out);

// write()/read() loops that retry on EINTR and short transfers.
bool write_all(int fd, const void* data, unsigned long size);
long read_some(int fd, void* data, unsigned long size);

}  // namespace util
