// Cancellation: an eventfd a job's reader polls beside the runner's stdout.
#include "server/broker/job.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <stdexcept>

namespace broker {

Cancellation::Cancellation() : efd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!efd_.valid()) throw std::runtime_error("eventfd failed");
}

void Cancellation::cancel() {
  if (requested_.exchange(true)) return;
  uint64_t one = 1;
  // An eventfd write of 1 cannot fail short of a bad fd; nothing to do then.
  if (::write(efd_.get(), &one, sizeof one) < 0) return;
}

}  // namespace broker
