// The rlimit table. Runs: build in the runner parent, apply in the program child.
#include "server/sandbox/rlimits.h"

#include <algorithm>
#include <array>
#include <cerrno>

namespace sandbox::rlimits {

Table build_in_parent(const Inputs& in) {
  // CPU seconds: the wall deadline normally ends the job first; this is the
  // backstop if the runner's kill were ever late (SIGXCPU, then SIGKILL).
  rlim_t cpu_s = static_cast<rlim_t>((in.timeout_ms + 999) / 1000 + 1);
  const auto entries = std::to_array<Entry>({
      // Fork bombs: processes per (user namespace, uid), so other host users don't count.
      {RLIMIT_NPROC, static_cast<rlim_t>(in.pids_max), "RLIMIT_NPROC"},
      // Descriptor exhaustion.
      {RLIMIT_NOFILE, static_cast<rlim_t>(in.nofile_max), "RLIMIT_NOFILE"},
      // One file larger than any writable area: SIGXFSZ instead of filling a tmpfs silently.
      {RLIMIT_FSIZE, static_cast<rlim_t>(in.file_max_bytes), "RLIMIT_FSIZE"},
      // No core dumps (they could carry memory contents out; they take disk).
      {RLIMIT_CORE, 0, "RLIMIT_CORE"},
      {RLIMIT_CPU, cpu_s, "RLIMIT_CPU"},
      // Heap and private writable mappings: a memory bomb fails with ENOMEM even
      // without a memory cgroup. (RLIMIT_AS would break V8's large reservations.)
      {RLIMIT_DATA, static_cast<rlim_t>(in.memory_max_bytes), "RLIMIT_DATA"},
      // No memory locked away from reclaim.
      {RLIMIT_MEMLOCK, 0, "RLIMIT_MEMLOCK"},
      // Queued signals (sigqueue, timer_create, RT signals): counted per user
      // up to the user namespace's owner, so a job holding them all would make
      // the owner's other processes fail with EAGAIN. The job's share.
      {RLIMIT_SIGPENDING, in.sigpending_max ? static_cast<rlim_t>(in.sigpending_max) : RLIM_INFINITY,
       "RLIMIT_SIGPENDING"},
      // POSIX message queue bytes, counted the same way (mq_open fails with EMFILE).
      {RLIMIT_MSGQUEUE, in.msgqueue_max_bytes ? static_cast<rlim_t>(in.msgqueue_max_bytes) : RLIM_INFINITY,
       "RLIMIT_MSGQUEUE"},
  });
  static_assert(std::tuple_size_v<decltype(entries)> == kCount, "rlimits::kCount must match the list");
  Table t{};
  std::copy(entries.begin(), entries.end(), t.entries);
  return t;
}

int apply_in_child(const Table& table, const char** failed) {
  for (const Entry& e : table.entries) {
    // Only ever lower: raising a hard limit needs CAP_SYS_RESOURCE in the host namespace.
    struct rlimit cur {};
    if (::getrlimit(e.resource, &cur) != 0) {
      *failed = e.name;
      return errno;
    }
    rlim_t v = e.value < cur.rlim_max ? e.value : cur.rlim_max;  // RLIM_INFINITY: as inherited
    struct rlimit rl = {v, v};
    if (::setrlimit(e.resource, &rl) != 0) {
      *failed = e.name;
      return errno;
    }
  }
  return 0;
}

}  // namespace sandbox::rlimits
