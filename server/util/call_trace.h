// Step timings of a call in the server, the half of the whole-call trace the
// runner's (server/sandbox/trace.h) does not see: from the read of the
// request to the write of the reply. On with THROWBOX_RUNNER_TRACE (read
// once), as the runner's; each mark is a log line with the monotonic clock,
// which the runner's marks also carry, so bench/speed.py can merge them.
#pragma once

#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "server/util/clock.h"

namespace util {

inline bool call_trace_on() {
  static const bool on = std::getenv("THROWBOX_RUNNER_TRACE") != nullptr;
  return on;
}

// step: a string literal; what: the request id or job id it belongs to.
inline void call_mark(const char* step, std::string_view what) {
  if (!call_trace_on()) return;
  spdlog::info("call trace: {:<22} {:<24} at {:.3f} ms", step, what, static_cast<double>(now_us()) / 1000.0);
}

// A request id: serialised only when tracing is on (the calls are on every request's path).
inline void call_mark_id(const char* step, const nlohmann::json& id) {
  if (call_trace_on()) call_mark(step, std::string_view(id.dump()));
}

}  // namespace util
