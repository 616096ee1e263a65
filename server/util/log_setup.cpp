// The stderr logger with its escaping and journal-priority flags (log_setup.h).
#include "server/util/log_setup.h"

#include <sys/stat.h>

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "server/util/text.h"

namespace util::log_setup {
namespace {

// %* : the message, escaped (in place of spdlog's raw %v).
class EscapedMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const std::string text = util::escape_for_log(std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<EscapedMessage>(); }
};

// %J : "<N>", the message's sd-daemon(3) priority.
class JournalPriority final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const char text[] = {'<', static_cast<char>('0' + journal_priority(msg.level)), '>'};
    dest.append(text, text + sizeof text);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JournalPriority>(); }
};

}  // namespace

int journal_priority(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
    case spdlog::level::debug:
      return 7;  // LOG_DEBUG
    case spdlog::level::warn:
      return 4;  // LOG_WARNING
    case spdlog::level::err:
      return 3;  // LOG_ERR
    case spdlog::level::critical:
      return 2;  // LOG_CRIT
    default:
      return 6;  // LOG_INFO
  }
}

std::unique_ptr<spdlog::formatter> make_formatter(bool journal_priority) {
  auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
  formatter->add_flag<EscapedMessage>('*').add_flag<JournalPriority>('J');
  formatter->set_pattern(std::string(journal_priority ? "%J" : "") + "%Y-%m-%dT%H:%M:%S.%eZ %^%l%$ %*");
  return formatter;
}

bool is_journal_stream(int fd, const char* journal_stream) {
  if (!journal_stream) return false;
  const char* end = journal_stream + std::strlen(journal_stream);
  unsigned long long dev = 0, ino = 0;
  auto [colon, e1] = std::from_chars(journal_stream, end, dev);
  if (e1 != std::errc() || colon == end || *colon != ':') return false;
  auto [rest, e2] = std::from_chars(colon + 1, end, ino);
  if (e2 != std::errc() || rest != end) return false;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return false;
  return static_cast<unsigned long long>(st.st_dev) == dev && static_cast<unsigned long long>(st.st_ino) == ino;
}

bool stderr_is_journal() { return is_journal_stream(2, std::getenv("JOURNAL_STREAM")); }

void install_stderr_logger() {
  auto logger = spdlog::stderr_logger_mt("throwbox");
  logger->set_formatter(make_formatter(stderr_is_journal()));
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace util::log_setup
