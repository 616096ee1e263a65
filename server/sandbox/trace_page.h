// The shared page of trace marks (trace.h): trace.cpp maps and dumps it,
// trace_child.cpp writes it, in any process, the sandbox's children included.
#pragma once
#include <atomic>
#include <cstdint>

namespace sandbox::trace {

constexpr int kMaxMarks = 96;

struct Mark {
  const char* step;
  int pid;
  int64_t ns;
};

struct Page {
  std::atomic<int> count;
  int64_t start_ns;
  Mark marks[kMaxMarks];
};
static_assert(sizeof(Page) <= 4096);

extern Page* page;  // null when tracing is off
int64_t now_ns();

}  // namespace sandbox::trace
