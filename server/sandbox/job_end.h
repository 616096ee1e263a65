// How a job's pid 1 tells its proxy the program has ended, before it kills
// what the program left: the proxy cuts every tunnel whose job side is still
// held (its record says "the job ended"), answers, and accepts no more; then
// pid 1 kills. Only pid 1 can send it: it connects from a privileged port,
// which the job's processes (no capabilities) cannot bind.
#pragma once

#include <cstdint>

namespace sandbox {

inline constexpr char kJobEndNotice[] = "THROWBOX-JOB-ENDED\r\n\r\n";
constexpr uint16_t kJobEndSourcePort = 1023;
// pid 1's wait to connect, and then for the answer; past either it kills anyway.
constexpr int kJobEndWaitMs = 1000;

}  // namespace sandbox
