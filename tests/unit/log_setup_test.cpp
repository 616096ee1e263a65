// The server's log lines: UTC timestamps with 'Z', the escaped message, and
// the journal priority first when stderr is the systemd journal.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <string>

#include "server/util/log_setup.h"

namespace {

using util::log_setup::make_formatter;

// One message formatted at 2023-11-14T22:13:20.123 UTC.
std::string line(bool journal, spdlog::level::level_enum level, const char* text) {
  const auto at = spdlog::log_clock::time_point(std::chrono::milliseconds(1700000000123LL));
  spdlog::details::log_msg msg(at, spdlog::source_loc{}, "throwbox", level, text);
  spdlog::memory_buf_t out;
  make_formatter(journal)->format(msg, out);
  return std::string(out.data(), out.size());
}

}  // namespace

TEST_CASE("log lines carry UTC with a Z, whatever the local zone") {
  // A zone five hours off UTC: a local timestamp would read 17:13.
  const char* was = std::getenv("TZ");
  const std::string saved = was ? was : "";
  ::setenv("TZ", "EST5", 1);
  ::tzset();
  CHECK(line(false, spdlog::level::info, "serving") == "2023-11-14T22:13:20.123Z info serving\n");
  CHECK(line(false, spdlog::level::warn, "a\nb") == "2023-11-14T22:13:20.123Z warning a\\nb\n");
  if (was)
    ::setenv("TZ", saved.c_str(), 1);
  else
    ::unsetenv("TZ");
  ::tzset();
}

TEST_CASE("for the journal each line starts with its sd-daemon priority") {
  CHECK(line(true, spdlog::level::info, "m") == "<6>2023-11-14T22:13:20.123Z info m\n");
  CHECK(line(true, spdlog::level::trace, "m").rfind("<7>", 0) == 0);
  CHECK(line(true, spdlog::level::debug, "m").rfind("<7>", 0) == 0);
  CHECK(line(true, spdlog::level::warn, "m").rfind("<4>", 0) == 0);
  CHECK(line(true, spdlog::level::err, "m") == "<3>2023-11-14T22:13:20.123Z error m\n");
  CHECK(line(true, spdlog::level::critical, "m").rfind("<2>", 0) == 0);
  // A message cannot start a line, or a priority, of its own.
  CHECK(line(true, spdlog::level::info, "x\n<0>forged") == "<6>2023-11-14T22:13:20.123Z info x\\n<0>forged\n");
}

TEST_CASE("JOURNAL_STREAM counts only when it names the descriptor's device and inode") {
  char path[] = "/tmp/throwbox-log-test-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  struct stat st {};
  REQUIRE(::fstat(fd, &st) == 0);
  const std::string dev = std::to_string(st.st_dev), ino = std::to_string(st.st_ino);
  using util::log_setup::is_journal_stream;
  CHECK(is_journal_stream(fd, (dev + ":" + ino).c_str()));
  CHECK_FALSE(is_journal_stream(fd, (dev + ":" + std::to_string(st.st_ino + 1)).c_str()));
  CHECK_FALSE(is_journal_stream(fd, (std::to_string(st.st_dev + 1) + ":" + ino).c_str()));
  CHECK_FALSE(is_journal_stream(fd, nullptr));
  CHECK_FALSE(is_journal_stream(fd, ""));
  CHECK_FALSE(is_journal_stream(fd, (dev + ":" + ino + "x").c_str()));
  CHECK_FALSE(is_journal_stream(fd, (dev + ino).c_str()));
  CHECK_FALSE(is_journal_stream(-1, (dev + ":" + ino).c_str()));
  ::close(fd);
  ::unlink(path);
}
