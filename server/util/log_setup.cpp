// The stderr logger with its escaping flag (log_setup.h).
#include "server/util/log_setup.h"

#include <memory>
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

}  // namespace

void install_stderr_logger() {
  auto logger = spdlog::stderr_logger_mt("throwbox");
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<EscapedMessage>('*').set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %*");
  logger->set_formatter(std::move(formatter));
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace util::log_setup
