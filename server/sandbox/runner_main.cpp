// Runner process entry. Started by the broker via Boost.Process with an empty
// environment; owns nothing but its three pipes. Never logs to stdout: stdout
// carries JSON lines, progress lines ({"progress": ...}) then the outcome.
#include "server/sandbox/runner_main.h"

#include <grp.h>
#include <link.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "server/sandbox/launcher.h"
#include "server/sandbox/spec.h"
#include "server/sandbox/trace.h"
#include "server/util/fd.h"
#include "server/util/text.h"

namespace sandbox {
namespace {
constexpr size_t kSpecMaxBytes = 512 * 1024 * 1024;

int fail(const std::string& message) {
  Outcome o;
  o.status = "sandbox_error";
  o.error = message;
  std::string text = to_json(o).dump();
  util::write_all(1, text.data(), text.size());
  return 0;
}
// A runner usually waits, already started, for its job (the broker keeps a
// spare). Mapping its code and read-only data now, while it waits, saves the
// job the page faults of a first run through the spec parser and the launcher
// (several hundred on a cold image; tens of microseconds each under a VM).
void prefault_image() {
  ::dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void*) -> int {
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || (ph.p_flags & PF_W)) continue;
          const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
          uintptr_t start = (info->dlpi_addr + ph.p_vaddr) & ~(page - 1);
          uintptr_t end = (info->dlpi_addr + ph.p_vaddr + ph.p_memsz + page - 1) & ~(page - 1);
          (void)::madvise(reinterpret_cast<void*>(start), end - start, MADV_POPULATE_READ);  // best effort
        }
        return 1;  // the executable only
      },
      nullptr);
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
  if (::geteuid() == 0 && ::setgroups(0, nullptr) != 0)
    return fail(util::call_error("setgroups", "0", errno));

  prefault_image();
  // The spec is the first line (or all) of stdin. A warm spec's claim comes
  // later on the same stdin, and only after the runner said it is ready.
  std::string input;
  char buf[65536];
  size_t nl = std::string::npos;
  while (nl == std::string::npos) {
    long n = util::read_some(0, buf, sizeof buf);
    if (n < 0) return fail(util::call_error("read", "stdin", errno));
    if (n == 0) break;
    input.append(buf, static_cast<size_t>(n));
    if (input.size() > kSpecMaxBytes) return fail("launch spec too large");
    nl = input.find('\n');
  }
  trace::mark("spec read");
  std::string rest;
  if (nl != std::string::npos) {
    rest = input.substr(nl + 1);
    input.resize(nl);
  }
  auto doc = nlohmann::json::parse(input, nullptr, false);
  if (doc.is_discarded()) return fail("launch spec is not JSON");
  auto spec = spec_from_json(doc);
  if (!spec) return fail(spec.error().message);
  trace::mark("spec parsed");
  if (!spec->warm.empty() && !rest.empty()) return fail("a claim arrived before the warm sandbox was ready");
  // Cold: nothing may follow the spec but EOF, the broker's release (launch's start gate).
  if (spec->warm.empty() && !rest.empty()) return fail("unexpected input after the launch spec");

  // SIGTERM from the broker means "cancel this job": read through a signalfd
  // in the supervision loop (blocked here; the program gets an empty mask).
  sigset_t term;
  ::sigemptyset(&term);
  ::sigaddset(&term, SIGTERM);
  ::sigprocmask(SIG_BLOCK, &term, nullptr);
  util::UniqueFd cancel_fd(::signalfd(-1, &term, SFD_CLOEXEC | SFD_NONBLOCK));
  launcher::Teardown teardown;
  Outcome outcome = launcher::launch(*spec, teardown, cancel_fd.get(), 1, 0);
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
