// trace::mark and the page it writes: async-signal-safe and allocation free,
// it runs between clone and execve too (unit.child_side_symbols).
#include <time.h>
#include <unistd.h>

#include "server/sandbox/trace.h"
#include "server/sandbox/trace_page.h"

namespace sandbox::trace {

Page* page = nullptr;

int64_t now_ns() {
  struct timespec ts {};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void mark(const char* step) {
  if (!page) return;
  int i = page->count.fetch_add(1, std::memory_order_relaxed);
  if (i < kMaxMarks) page->marks[i] = {step, static_cast<int>(::getpid()), now_ns()};
}

}  // namespace sandbox::trace
