// Filesystem helpers for the trusted side.
#include "server/util/fs.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "server/util/random.h"
#include "server/util/fd.h"
#include "server/util/text.h"

namespace util {

namespace {

// The rest of read_file, on an open regular file.
Result<std::string> read_open_file(int fd_, const std::string& path, const struct stat& st, size_t max_bytes);

}  // namespace

Result<std::string> read_private_file(const std::string& path, size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd.valid())
    return make_error(errno == ENOENT ? util::ErrorCode::kNotFound : util::ErrorCode::kIo,
                      call_error("open", path, errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return make_error(util::ErrorCode::kIo, call_error("fstat", path, errno));
  if (!S_ISREG(st.st_mode)) return make_error(util::ErrorCode::kInvalidArgument, path + ": not a regular file");
  if (st.st_uid != ::geteuid())
    return make_error(util::ErrorCode::kInvalidArgument, path + ": owned by uid " + std::to_string(st.st_uid) +
                                                             ", not this server's user (uid " +
                                                             std::to_string(::geteuid()) + ")");
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return make_error(util::ErrorCode::kInvalidArgument,
                      path + ": others may read or write it (mode " + mode + "): chmod 600 it");
  }
  return read_open_file(fd.get(), path, st, max_bytes);
}

Status create_private_file(const std::string& path, std::string_view data) {
  const std::string tmp = path + ".new-" + random_id();
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) return make_error(util::ErrorCode::kIo, call_error("open", tmp, errno));
  size_t put = 0;
  while (put < data.size()) {
    ssize_t n = ::write(fd.get(), data.data() + put, data.size() - put);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::unlink(tmp.c_str());
      return make_error(util::ErrorCode::kIo, call_error("write", tmp, e));
    }
    put += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return make_error(util::ErrorCode::kIo, call_error("fsync", tmp, e));
  }
  const int linked = ::link(tmp.c_str(), path.c_str());
  const int link_errno = errno;
  ::unlink(tmp.c_str());
  if (linked != 0 && link_errno != EEXIST)
    return make_error(util::ErrorCode::kIo, call_error("link", path, link_errno));
  return ok_status();
}

Result<std::string> read_file(const std::string& path, size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd.valid()) return make_error(util::ErrorCode::kIo, call_error("open", path, errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return make_error(util::ErrorCode::kIo, call_error("fstat", path, errno));
  if (!S_ISREG(st.st_mode)) return make_error(util::ErrorCode::kIo, path + ": not a regular file");
  return read_open_file(fd.get(), path, st, max_bytes);
}

namespace {

Result<std::string> read_open_file(int fd_, const std::string& path, const struct stat& st, size_t max_bytes) {
  if (static_cast<size_t>(st.st_size) > max_bytes)
    return make_error(util::ErrorCode::kTooLarge, path + ": larger than " + std::to_string(max_bytes) + " bytes");
  // Read to EOF rather than st_size: cgroup and proc files report size 0 or 4096.
  std::string data;
  data.resize(st.st_size > 0 ? static_cast<size_t>(st.st_size) : 4096);
  size_t got = 0;
  for (;;) {
    if (got == data.size()) {
      if (data.size() > max_bytes)
        return make_error(util::ErrorCode::kTooLarge, path + ": larger than " + std::to_string(max_bytes) + " bytes");
      data.resize(std::min(data.size() * 2, max_bytes + 1));
    }
    long n = read_some(fd_, data.data() + got, data.size() - got);
    if (n < 0) return make_error(util::ErrorCode::kIo, call_error("read", path, errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > max_bytes)
    return make_error(util::ErrorCode::kTooLarge, path + ": larger than " + std::to_string(max_bytes) + " bytes");
  data.resize(got);
  return data;
}

}  // namespace

Status write_file_atomic(const std::string& path, std::string_view data, unsigned mode, bool sync) {
  std::string tmp = path + ".tmp-" + random_id();
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode));
  if (!fd.valid()) return make_error(util::ErrorCode::kIo, call_error("open", tmp, errno));
  if (!write_all(fd.get(), data.data(), data.size()) || (sync && ::fsync(fd.get()) != 0)) {
    int err = errno;
    ::unlink(tmp.c_str());
    return make_error(util::ErrorCode::kIo, call_error("write", tmp, err));
  }
  // open() applies the umask; the caller's mode is the contract.
  ::fchmod(fd.get(), mode);
  fd.reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return make_error(util::ErrorCode::kIo, call_error("rename", path, err));
  }
  return ok_status();
}

Status make_dirs(const std::string& path, unsigned mode) {
  // Usually only the last component is new (a job's scratch dir): one call.
  if (::mkdir(path.c_str(), mode) == 0 || errno == EEXIST) return ok_status();
  if (errno != ENOENT) return make_error(util::ErrorCode::kIo, call_error("mkdir", path, errno));
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), mode) != 0 && errno != EEXIST)
      return make_error(util::ErrorCode::kIo, call_error("mkdir", partial, errno));
  }
  return ok_status();
}

Status remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);  // does not follow symlinks
  if (ec && ec != std::errc::no_such_file_or_directory)
    return make_error(util::ErrorCode::kIo, "remove_all(\"" + path + "\"): " + ec.message());
  return ok_status();
}

std::string self_exe_dir() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string self(buf, static_cast<size_t>(n));
  const size_t slash = self.rfind('/');
  return slash == 0 ? "/" : self.substr(0, slash);
}

}  // namespace util
