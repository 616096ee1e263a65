// Step timings of one runner, parent and sandbox children alike, for finding
// where a cold start spends its time. Off unless THROWBOX_RUNNER_TRACE is set
// (a runner started by hand: the broker gives runners an empty environment).
// mark() is async-signal-safe and allocation-free: it may run between clone
// and execve. The marks live in one MAP_SHARED page made before the clone.
#pragma once

namespace sandbox::trace {

// Maps the page if tracing is on; call once, in the runner, before any clone.
void init();
// Records a step (a string literal) with the monotonic clock; no-op when off.
void mark(const char* step);
// Writes every mark to fd, in time order, relative to init().
void dump(int fd);

}  // namespace sandbox::trace
