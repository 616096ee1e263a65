// Resource limits from one table, applied in the program child. They hold
// whether or not cgroups are available.
#pragma once
#include <sys/resource.h>

#include <cstdint>

namespace sandbox::rlimits {

struct Entry {
  int resource;
  rlim_t value;      // soft and hard
  const char* name;  // for the error message
};

// build_in_parent's list has exactly this many entries (a static_assert
// there): a shorter brace list would zero-fill into {RLIMIT_CPU, 0}.
constexpr int kCount = 9;
struct Table {
  Entry entries[kCount];
};

struct Inputs {
  uint64_t pids_max;
  uint64_t nofile_max;
  uint64_t file_max_bytes;
  uint64_t memory_max_bytes;
  uint64_t timeout_ms;
  uint64_t sigpending_max;      // 0: left as inherited
  uint64_t msgqueue_max_bytes;  // 0: left as inherited
};

Table build_in_parent(const Inputs& in);
// Returns 0 or errno, *failed naming the limit. Async-signal-safe.
int apply_in_child(const Table& table, const char** failed);

}  // namespace sandbox::rlimits
