// Filesystem helpers for the trusted side.
#include "server/util/fs.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include "server/util/random.h"
#include "server/util/fd.h"
#include "server/util/text.h"

namespace util {

Result<std::string> read_file(const std::string& path, size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd.valid()) return make_error(util::ErrorCode::kIo, call_error("open", path, errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return make_error(util::ErrorCode::kIo, call_error("fstat", path, errno));
  if (!S_ISREG(st.st_mode)) return make_error(util::ErrorCode::kIo, path + ": not a regular file");
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
    long n = read_some(fd.get(), data.data() + got, data.size() - got);
    if (n < 0) return make_error(util::ErrorCode::kIo, call_error("read", path, errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > max_bytes)
    return make_error(util::ErrorCode::kTooLarge, path + ": larger than " + std::to_string(max_bytes) + " bytes");
  data.resize(got);
  return data;
}

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
