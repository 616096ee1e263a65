// Runner process entry. Started by the broker via Boost.Process with an empty
// environment; owns nothing but its three pipes. Never logs to stdout: stdout
// carries JSON lines, progress lines ({"progress": ...}) then the outcome.
#include "server/sandbox/runner_main.h"

#include <grp.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <malloc.h>
#include <string>

#include "server/sandbox/launcher.h"
#include "server/sandbox/namespaces.h"
#include "server/sandbox/spec.h"
#include "server/sandbox/trace.h"
#include "server/sandbox/zygote.h"
#include "server/util/fd.h"
#include "server/util/text.h"

namespace sandbox {
namespace {

int report(const Outcome& o) {
  std::string text = to_json(o).dump();
  util::write_all(1, text.data(), text.size());
  return 0;
}

int fail(const std::string& message) {
  Outcome o;
  o.status = Status::sandbox_error;
  o.error = message;
  return report(o);
}
}  // namespace

int runner_main() {
  trace::init();
  trace::mark("runner main");
  // The server's death takes the runner with it, and the runner's the sandbox.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
    return fail(util::call_error("prctl", "PR_SET_PDEATHSIG", errno));
  // Nothing inherited beyond stdin/stdout/stderr reaches the sandbox.
  if (::close_range(3, ~0U, 0) != 0) return fail(util::call_error("close_range", "3..", errno));
  ::umask(077);
  // Dispositions survive execve: the server ignores SIGPIPE, the program must not inherit that.
  for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
  // As root: no supplementary groups for the sandbox to inherit (setgroups is
  // denied inside, so they could never be dropped there).
  if (::geteuid() == 0 && ::setgroups(0, nullptr) != 0) return fail(util::call_error("setgroups", "0", errno));

  zygote::prefault_image();
  // Freed memory stays in the heap: what the runner and the zygote write
  // while they wait is not faulted in again for the job (zygote.h).
  ::mallopt(M_TRIM_THRESHOLD, 16 << 20);
  ::mallopt(M_MMAP_THRESHOLD, 4 << 20);
  // SIGTERM from the broker means "cancel this job", whenever it comes (the
  // sandbox may still be building): blocked from here, read through a
  // signalfd made once the zygote reported (the program gets an empty mask).
  sigset_t term;
  ::sigemptyset(&term);
  ::sigaddset(&term, SIGTERM);
  ::sigprocmask(SIG_BLOCK, &term, nullptr);
  // The zygote forks now, while the runner waits for its job: it makes pid 1.
  auto zygote = zygote::Zygote::start_in_parent();
  if (!zygote) return fail(zygote.error().message);
  // The zygote reads the spec from stdin (the first line, or all of it),
  // parses it and builds pid 1 (zygote.cpp, zygote_main); this process waits
  // for its report, parses the same spec while pid 1 builds its root, and has
  // reaped the zygote before anything of the program may start.
  auto built = zygote->await_report_in_parent();
  if (!built) return fail(built.error().message);  // any pid 1 dies with this process (PR_SET_PDEATHSIG)
  auto doc = nlohmann::json::parse(built->spec_text, nullptr, false);
  auto spec =
      doc.is_discarded() ? util::make_error(util::ErrorCode::kSandbox, "launch spec is not JSON") : spec_from_json(doc);
  if (!spec)
    return report(launcher::abandon(*built, nullptr, built->error.empty() ? spec.error().message : built->error));
  trace::mark("spec parsed");
  // Subordinate ids: deliver and harvest as root of the zygote's namespace.
  if (spec->subordinate_uid != 0 && built->pid > 0) {
    if (auto s = namespaces::join_subordinate_ns_in_parent(built->pid); !s)
      return report(launcher::abandon(*built, &*spec, s.error().message));
  }
  // Cold: nothing may follow the spec but EOF, the broker's release (launch's
  // start gate). Warm: the claim comes once the runner said it is ready.
  if (!built->rest.empty())
    return report(launcher::abandon(*built, &*spec,
                                    spec->warm == Warm::cold ? "unexpected input after the launch spec"
                                                             : "a claim arrived before the warm sandbox was ready"));

  util::UniqueFd cancel_fd(::signalfd(-1, &term, SFD_CLOEXEC | SFD_NONBLOCK));
  launcher::Teardown teardown;
  Outcome outcome = launcher::launch(*spec, zygote->channels(), *built, teardown, cancel_fd.get(), 1, 0);
  trace::mark("outcome built");
  std::string text = to_json(outcome).dump() + "\n";
  bool written = util::write_all(1, text.data(), text.size());
  // EOF tells the broker the outcome is complete; the namespaces go down after.
  ::close(1);
  trace::mark("outcome written");
  teardown.finish();
  trace::mark("torn down");
  trace::dump(2);
  return written ? 0 : 1;
}

}  // namespace sandbox
