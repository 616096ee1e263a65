// The zygote: forked by the runner at its start, builds the sandbox's pid 1
// once the spec arrives (see zygote.h). The build steps are launcher.cpp's.
#include "server/sandbox/zygote.h"

#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <utility>

#include <nlohmann/json.hpp>

#include "server/sandbox/launcher.h"
#include "server/sandbox/spec.h"
#include "server/sandbox/trace.h"
#include "server/util/base64.h"
#include "server/util/text.h"

namespace sandbox::zygote {
namespace {

constexpr size_t kSpecMaxBytes = 512 * 1024 * 1024;
constexpr unsigned kBuildTimeoutS = 10;  // from the spec to the report; far above the measured 2 ms
constexpr size_t kStackBytes = 1 << 20;               // pid 1's stack, below it a guard page
constexpr size_t kMessageMax = 2048;
constexpr size_t kWarmStackBytes = 256 * 1024;  // below serve_in_zygote's frame: parse, plan, clone
constexpr size_t kWarmHeapBytes = 512 * 1024;   // the parsed spec, the plan, the filter

// The report on the wire: this header, then the spec and the rest.
struct Wire {
  int32_t pid;
  int32_t landlock_abi;
  uint64_t spec_bytes;
  uint64_t rest_bytes;
  char error[kMessageMax];
};

char* stack_top = nullptr;

bool read_exactly(int fd, void* data, size_t size) {
  size_t got = 0;
  while (got < size) {
    long n = util::read_some(fd, static_cast<char*>(data) + got, size - got);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

int warm_up_entry(void*) { return 0; }

// Maps pid 1's stack and runs one CLONE_VM child on it, so that the job's
// clone finds the stack pages and the clone path already mapped.
void prepare_stack_in_zygote() {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  void* p = ::mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1,
                   0);
  if (p == MAP_FAILED) return;  // clone_pid1_in_zygote reports it
  (void)::mprotect(p, page, PROT_NONE);  // an overflow faults instead of writing below
  stack_top = static_cast<char*>(p) + page + kStackBytes;
  pid_t c = ::clone(warm_up_entry, stack_top, CLONE_VM | SIGCHLD, nullptr);
  if (c > 0) {
    int st;
    while (::waitpid(c, &st, 0) < 0 && errno == EINTR) {
    }
  }
}

}  // namespace

__attribute__((noinline)) void write_stack_and_heap() {
  volatile char stack[kWarmStackBytes];
  for (size_t i = 0; i < sizeof stack; i += 4096) stack[i] = 0;
  // Kept after the free: the runner raised the trim threshold before the fork.
  void* heap = ::malloc(kWarmHeapBytes);
  if (heap) {
    std::memset(heap, 0, kWarmHeapBytes);
    asm volatile("" : : "r"(heap) : "memory");
    ::free(heap);
  }
}

namespace {

[[noreturn]] void serve_in_zygote(pid_t runner, int report_fd, Channels& channels) {
  // The runner's death takes the zygote with it (and pid 1 is the runner's child).
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || ::getppid() != runner) ::_exit(1);
  (void)::prctl(PR_SET_NAME, "throwbox-zygote", 0, 0, 0);
  // The runner's stdout is the broker's: it must reach EOF when the runner closes it.
  int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0 || ::dup2(null_fd, 1) < 0) ::_exit(1);
  prefault_image();
  prepare_stack_in_zygote();
  write_stack_and_heap();
  rehearse_parse();
  // The spec is the first line (or all) of the runner's stdin, which only the
  // zygote reads until it reports. A cold job's release (EOF) and a warm
  // one's claim come later and are the runner's.
  Report report;
  report.spec_text.assign(64 * 1024, '\0');  // written now, reused for the spec
  report.spec_text.clear();
  char buf[65536];
  std::memset(buf, 0, sizeof buf);
  size_t nl = std::string::npos;
  while (nl == std::string::npos) {
    long n = util::read_some(0, buf, sizeof buf);
    if (n < 0) {
      report.error = util::call_error("read", "stdin", errno);
      report_and_exit_in_zygote(report_fd, report);
    }
    if (n == 0) break;
    const size_t scanned = report.spec_text.size();
    report.spec_text.append(buf, static_cast<size_t>(n));
    if (report.spec_text.size() > kSpecMaxBytes) {
      report.spec_text.clear();
      report.error = "launch spec too large";
      report_and_exit_in_zygote(report_fd, report);
    }
    nl = report.spec_text.find('\n', scanned);
  }
  trace::mark("spec read");
  if (nl != std::string::npos) {
    report.rest = report.spec_text.substr(nl + 1);
    report.spec_text.resize(nl);
  }
  if (::dup2(null_fd, 0) < 0) ::_exit(1);
  if (null_fd > 2) ::close(null_fd);
  // From here the build is bounded; a zygote stuck in the kernel is ended.
  ::alarm(kBuildTimeoutS);
  auto doc = nlohmann::json::parse(report.spec_text, nullptr, false);
  if (doc.is_discarded()) {
    report.error = "launch spec is not JSON";
    report_and_exit_in_zygote(report_fd, report);
  }
  auto spec = spec_from_json(doc);
  if (!spec) {
    report.error = spec.error().message;
    report_and_exit_in_zygote(report_fd, report);
  }
  trace::mark("zygote: spec parsed");
  // A cold spec must not be followed by anything but EOF, a warm one by a
  // claim only once it is ready: the runner refuses the job then.
  if (!report.rest.empty()) report_and_exit_in_zygote(report_fd, report);
  launcher::build_in_zygote(*spec, channels, report_fd, std::move(report));
}

}  // namespace

void rehearse_parse() {
  LaunchSpec s;
  s.job_id = std::string(32, '0');
  s.scratch_dir = s.harvest_dir = std::string(64, '/');
  s.argv = {"/usr/bin/python3", "-I", "/work/main.py"};
  s.env = {"PATH=/usr/bin:/bin", "HOME=/work", "LANG=C.UTF-8"};
  s.readonly_paths = {"/usr", "/lib", "/lib64", "/bin"};
  s.seccomp_bpf_base64 = std::string(3440, 'A');
  auto doc = nlohmann::json::parse(to_json(s).dump(), nullptr, false);
  if (!doc.is_discarded()) (void)spec_from_json(doc);
  (void)util::base64_decode(s.seccomp_bpf_base64);
}

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

pid_t clone_pid1_in_zygote(int (*entry)(void*), void* arg, unsigned long flags) {
  if (!stack_top) {
    errno = ENOMEM;
    return -1;
  }
  return ::clone(entry, stack_top, static_cast<int>(flags | CLONE_VM | CLONE_PARENT), arg);
}

util::Result<Zygote> Zygote::start_in_parent() {
  util::Pipe report, out, err;
  if (!util::make_pipe(report) || !util::make_pipe(out) || !util::make_pipe(err))
    return util::make_error("sandbox", util::call_error("pipe2", "zygote", errno));
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return util::make_error("sandbox", util::call_error("socketpair", "control", errno));
  Zygote z;
  z.channels_.sock.reset(sv[0]);
  z.channels_.child_sock.reset(sv[1]);
  z.channels_.out_read = std::move(out.read);
  z.channels_.out_write = std::move(out.write);
  z.channels_.err_read = std::move(err.read);
  z.channels_.err_write = std::move(err.write);
  const pid_t runner = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return util::make_error("sandbox", util::call_error("fork", "zygote", errno));
  if (pid == 0) {
    report.read.reset();
    serve_in_zygote(runner, report.write.get(), z.channels_);
  }
  z.pid_ = pid;
  z.report_read_ = std::move(report.read);
  // pid 1's ends: only the zygote and pid 1 hold them, so the runner sees EOF
  // on the pipes once the program and pid 1 are done.
  z.channels_.child_sock.reset();
  z.channels_.out_write.reset();
  z.channels_.err_write.reset();
  write_stack_and_heap();
  rehearse_parse();
  return z;
}

Zygote::Zygote(Zygote&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)),
      report_read_(std::move(o.report_read_)),
      channels_(std::move(o.channels_)) {}

Zygote::~Zygote() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int st;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }
}

util::Result<Report> Zygote::await_report_in_parent() {
  // No deadline here: a spare waits for its job as long as it takes; once
  // the spec is in, the zygote's alarm bounds the build.
  Wire w{};
  Report r;
  bool whole = read_exactly(report_read_.get(), &w, sizeof w);
  if (whole) {
    r.spec_text.resize(w.spec_bytes);
    r.rest.resize(w.rest_bytes);
    whole = read_exactly(report_read_.get(), r.spec_text.data(), r.spec_text.size()) &&
            read_exactly(report_read_.get(), r.rest.data(), r.rest.size());
  }
  int st = 0;
  while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  report_read_.reset();
  if (!whole) {
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
      return util::make_error("sandbox", "the sandbox zygote did not finish building in " +
                                             std::to_string(kBuildTimeoutS) + " s");
    return util::make_error("sandbox", "the sandbox zygote exited before its report");
  }
  w.error[sizeof w.error - 1] = '\0';
  r.pid = w.pid;
  r.landlock_abi = w.landlock_abi;
  r.error = w.error;
  return r;
}

void report_and_exit_in_zygote(int report_fd, const Report& report) {
  Wire w{};
  w.pid = report.pid;
  w.landlock_abi = report.landlock_abi;
  w.spec_bytes = report.spec_text.size();
  w.rest_bytes = report.rest.size();
  std::strncpy(w.error, report.error.c_str(), sizeof w.error - 1);
  trace::mark("zygote: reported");
  // The runner reads it all: a failed write only loses a report it cannot use anyway.
  (void)(util::write_all(report_fd, &w, sizeof w) &&
         util::write_all(report_fd, report.spec_text.data(), report.spec_text.size()) &&
         util::write_all(report_fd, report.rest.data(), report.rest.size()));
  ::_exit(0);
}

}  // namespace sandbox::zygote
