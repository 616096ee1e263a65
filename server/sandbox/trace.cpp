// Trace marks, the runner's half: maps the page before any clone, dumps it at
// the end (stdio; runner only). mark() is trace_child.cpp.
#include "server/sandbox/trace.h"
#include "server/sandbox/trace_page.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

namespace sandbox::trace {

void init() {
  if (page || ::getenv("THROWBOX_RUNNER_TRACE") == nullptr) return;
  void* p = ::mmap(nullptr, sizeof(Page), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  page = new (p) Page{};
  page->start_ns = now_ns();
}

void dump(int fd) {
  if (!page) return;
  int n = std::min(page->count.load(), kMaxMarks);
  Mark sorted[kMaxMarks];
  std::copy(page->marks, page->marks + n, sorted);
  std::sort(sorted, sorted + n, [](const Mark& a, const Mark& b) { return a.ns < b.ns; });
  int64_t prev = page->start_ns;
  for (int i = 0; i < n; ++i) {
    ::dprintf(fd, "runner trace: %-34s pid %-6d %8.3f ms  (+%.3f) at %.3f ms\n", sorted[i].step, sorted[i].pid,
              static_cast<double>(sorted[i].ns - page->start_ns) / 1e6, static_cast<double>(sorted[i].ns - prev) / 1e6,
              static_cast<double>(sorted[i].ns) / 1e6);
    prev = sorted[i].ns;
  }
}

}  // namespace sandbox::trace
