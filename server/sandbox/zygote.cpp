// The zygote: forked by the runner at its start, builds the sandbox's pid 1
// once the spec arrives (see zygote.h); its steps are zygote_main's list.
// Also the runner's side of it (Zygote). Parent side: allocates freely, but
// pid 1 shares its memory from the clone on, so nothing it made is freed.
#include "server/sandbox/zygote.h"

#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <nlohmann/json.hpp>

#include "server/sandbox/capabilities.h"
#include "server/sandbox/cgroups.h"
#include "server/sandbox/child_report.h"
#include "server/sandbox/landlock.h"
#include "server/sandbox/mounts.h"
#include "server/sandbox/namespaces.h"
#include "server/sandbox/pid1.h"
#include "server/sandbox/placement.h"
#include "server/sandbox/rlimits.h"
#include "server/sandbox/seccomp.h"
#include "server/sandbox/spec.h"
#include "server/sandbox/trace.h"
#include "server/util/base64.h"
#include "server/util/fd.h"
#include "server/util/text.h"

namespace sandbox::zygote {
namespace {

constexpr size_t kSpecMaxBytes = 512 * 1024 * 1024;
constexpr unsigned kBuildTimeoutS = 10;  // from the spec to the report; far above the measured 2 ms
constexpr size_t kStackBytes = 1 << 20;  // pid 1's stack, below it a guard page
constexpr size_t kMessageMax = 2048;
constexpr size_t kWarmStackBytes = 256 * 1024;  // below zygote_main's frame: parse, plan, clone
constexpr size_t kWarmHeapBytes = 512 * 1024;   // the parsed spec, the plan, the filter
constexpr int kTemplateBacklog = 64;            // fork requests waiting for a template's accept

// The report on the wire: this header, then the spec and the rest.
struct Wire {
  int32_t pid;
  int32_t helper_pid;
  int32_t landlock_abi;
  uint32_t layers;  // Layers the zygote's steps made
  uint64_t spec_bytes;
  uint64_t rest_bytes;
  char error[kMessageMax];
};

char* stack_top = nullptr;

// The start of a small /proc file, NUL-terminated in buf; false when unreadable.
template <size_t N>
bool read_proc(const char* path, char (&buf)[N]) {
  util::UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return false;
  const long n = util::read_some(fd.get(), buf, N - 1);
  if (n <= 0) return false;
  buf[n] = '\0';
  return true;
}

// The pid a pidfd names, as this process's /proc sees it (fdinfo's "Pid:"); 0 when unknown.
pid_t host_pid_of(int pidfd) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fdinfo/%d", pidfd);
  char buf[512];
  if (!read_proc(path, buf)) return 0;
  const char* p = std::strstr(buf, "\nPid:");
  return p ? static_cast<pid_t>(std::strtol(p + 5, nullptr, 10)) : 0;
}

// The stack of the helper that clones a forked sandbox's pid 1 (zygote_clone_pid1).
alignas(64) char helper_stack[64 * 1024];

bool read_exactly(int fd, void* data, size_t size) {
  size_t got = 0;
  while (got < size) {
    long n = util::read_some(fd, static_cast<char*>(data) + got, size - got);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

// Maps pid 1's stack and runs one CLONE_VM child on it, so that the job's
// clone finds the stack pages and the clone path already mapped.
void prepare_stack_in_zygote() {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  void* p = ::mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (p == MAP_FAILED) return;           // zygote_clone_pid1 reports it
  (void)::mprotect(p, page, PROT_NONE);  // an overflow faults instead of writing below
  stack_top = static_cast<char*>(p) + page + kStackBytes;
  pid_t c = ::clone(pid1::rehearsal_entry, stack_top, CLONE_VM | SIGCHLD, nullptr);
  if (c > 0) {
    int st;
    while (::waitpid(c, &st, 0) < 0 && errno == EINTR) {}
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

struct Build;
[[noreturn]] void zygote_report_and_exit(const Build& b);

std::vector<char*> to_cstrings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// The environment and kProxyEnv (and kCaBundleEnv); the strings are static.
std::vector<char*> with_proxy_env(const std::vector<std::string>& env, bool ca) {
  std::vector<char*> out = to_cstrings(env);
  out.pop_back();
  for (const char* var : kProxyEnv) out.push_back(const_cast<char*>(var));
  if (ca)
    for (const char* var : kCaBundleEnv) out.push_back(const_cast<char*>(var));
  out.push_back(nullptr);
  return out;
}

// The zygote's state between its steps. Nothing in it is freed: pid 1 reads
// the spec, the plan and its context until the zygote exits, and after.
struct Build {
  Build(pid_t runner_pid, int report_write, Channels& channels)
      : runner(runner_pid), report_fd(report_write), ch(channels) {}
  const pid_t runner;
  const int report_fd;
  Channels& ch;
  Report report;
  int null_fd = -1;
  LaunchSpec spec;
  mounts::Plan plan;
  seccomp::Program filter;
  cgroups::Host host;
  rlimits::Table limits{};
  placement::Cpus cpus{};
  pid1::UserLimit user_limits[pid1::kUserLimits]{};
  pid1::Context ctx{};
  pid_t pid = -1;
  // A spare's sandbox id and cgroup host from its prepare line, the cgroup it
  // made and joined then, and why that failed ("" when it did not).
  std::string prepared_id;
  cgroups::Host prepared_host;
  cgroups::Job prepared_cgroup;
  std::string prepared_error;
  // Forked from a template: the job's cgroup was joined and the harvest
  // directory made before the zygote entered the template's namespaces.
  bool born_in_cgroup = false;
  uint32_t map_uid = 0, map_gid = 0;  // pid 1's sandbox user, as the id maps name it

  [[noreturn]] void fail(std::string message) {
    report.error = std::move(message);
    zygote_report_and_exit(*this);
  }
};

// The runner's death takes the zygote with it (and pid 1 is the runner's
// child). The runner's stdout is the broker's: it must reach EOF when the
// runner closes it.
void zygote_detach_from_runner(Build& b) {
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || ::getppid() != b.runner) ::_exit(1);
  (void)::prctl(PR_SET_NAME, "throwbox-zygote", 0, 0, 0);
  b.null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (b.null_fd < 0 || ::dup2(b.null_fd, 1) < 0) ::_exit(1);
}

// While the job has not come: the pages the build will touch (zygote.h).
void zygote_warm_up(Build& b) {
  prefault_image();
  prepare_stack_in_zygote();
  write_stack_and_heap();
  rehearse_parse();
  b.report.spec_text.assign(64 * 1024, '\0');  // written now, reused for the spec
  b.report.spec_text.clear();
}

// Reads the runner's stdin into report.spec_text until it holds a newline at
// or after `from` (its position), or EOF (npos). Only the zygote reads there
// until it reports.
size_t zygote_read_line(Build& b, size_t from) {
  Report& report = b.report;
  size_t nl = report.spec_text.find('\n', from);
  char buf[65536];
  std::memset(buf, 0, sizeof buf);
  while (nl == std::string::npos) {
    long n = util::read_some(0, buf, sizeof buf);
    if (n < 0) b.fail(util::call_error("read", "stdin", errno));
    if (n == 0) break;
    const size_t scanned = report.spec_text.size();
    report.spec_text.append(buf, static_cast<size_t>(n));
    if (report.spec_text.size() > kSpecMaxBytes) {
      report.spec_text.clear();
      b.fail("launch spec too large");
    }
    nl = report.spec_text.find('\n', scanned);
  }
  return nl;
}

// A spare runner's first line may be {"prepare":{"sandbox_id":..,
// "cgroup_host":..}} (RunnerFleet): the zygote then makes that sandbox's
// cgroup and joins it while it waits, and pid 1 is born in it. A v1 attach
// (and a v2 one) waits out an RCU grace period when none ended recently: 5-6
// ms on an idle machine here, off the job's path this way. The limits are
// written once the spec came, before pid 1 exists; nothing but this process
// runs in the cgroup until then. A failure is kept and fails the job.
void zygote_prepare(Build& b) {
  static constexpr std::string_view kPrefix = "{\"prepare\":";
  const size_t nl = zygote_read_line(b, 0);
  std::string& text = b.report.spec_text;
  if (text.compare(0, kPrefix.size(), kPrefix) != 0) return;  // the spec itself (a runner started without one)
  if (nl == std::string::npos) b.fail("the prepare line has no end");
  auto doc = nlohmann::json::parse(text.substr(0, nl), nullptr, false);
  text.erase(0, nl + 1);
  nlohmann::json* p = doc.is_object() ? &doc["prepare"] : nullptr;  // doc is not const: a missing key is null
  if (!p || !p->is_object() || !(*p)["sandbox_id"].is_string() || !(*p)["cgroup_host"].is_object())
    b.fail("the prepare line is not {\"prepare\":{\"sandbox_id\":..,\"cgroup_host\":{..}}}");
  b.prepared_id = (*p)["sandbox_id"].get<std::string>();
  if (b.prepared_id.empty() || b.prepared_id.find_first_not_of("0123456789abcdef") != std::string::npos)
    b.fail("the prepare line's sandbox_id is not lowercase hex");
  b.prepared_host = cgroups::host_from_json((*p)["cgroup_host"]);
  auto made = cgroups::Job::make_in_parent(b.prepared_host, b.prepared_id);
  if (!made) {
    b.prepared_error = made.error().message;
    return;
  }
  b.prepared_cgroup = std::move(*made);
  if (auto a = b.prepared_cgroup.attach_in_parent(::getpid()); !a) b.prepared_error = a.error().message;
  trace::mark("zygote: prepared cgroup joined");
}

// The spec is the next line (or all) of the runner's stdin. A cold job's
// release (EOF) and a warm one's claim come later and are the runner's.
void zygote_read_spec(Build& b) {
  Report& report = b.report;
  const size_t nl = zygote_read_line(b, 0);
  trace::mark("spec read");
  if (nl != std::string::npos) {
    report.rest = report.spec_text.substr(nl + 1);
    report.spec_text.resize(nl);
  }
  if (::dup2(b.null_fd, 0) < 0) ::_exit(1);
  if (b.null_fd > 2) ::close(b.null_fd);
}

// From here the build is bounded; a zygote stuck in the kernel is ended.
// A cold spec must not be followed by anything but EOF, a warm one by a
// claim only once it is ready: the runner refuses the job then.
void zygote_parse_spec(Build& b) {
  ::alarm(kBuildTimeoutS);
  auto doc = nlohmann::json::parse(b.report.spec_text, nullptr, false);
  if (doc.is_discarded()) b.fail("launch spec is not JSON");
  auto spec = spec_from_json(doc);
  if (!spec) b.fail(spec.error().message);
  b.spec = std::move(*spec);
  trace::mark("zygote: spec parsed");
  if (!b.prepared_id.empty()) {
    if (b.spec.job_id != b.prepared_id)
      b.fail("the launch spec is for sandbox " + b.spec.job_id + ", this runner was prepared for " + b.prepared_id);
    if (cgroups::to_json(cgroups::host_from_json(b.spec.cgroup_host)) != cgroups::to_json(b.prepared_host))
      b.fail("the launch spec's cgroup host is not the one this runner was prepared with");
    if (!b.prepared_error.empty()) b.fail(b.prepared_error);
  }
  if (!b.report.rest.empty()) zygote_report_and_exit(b);
}

// The values pid 1 writes to its user namespace's /proc/sys/user (pid1.h).
// One cgroup namespace: pid 1's own, made after start.
// A template's are left as they are: its forks' sandboxes are made in its
// user namespace (its own filter refuses it any namespace).
void zygote_plan_user_limits(Build& b) {
  const LaunchSpec& spec = b.spec;
  if (!spec.template_socket.empty()) return;
  const std::pair<const char*, uint64_t> limits[pid1::kUserLimits] = {
      {"max_user_namespaces", 0},
      {"max_pid_namespaces", 0},
      {"max_net_namespaces", 0},
      {"max_mnt_namespaces", 0},
      {"max_ipc_namespaces", 0},
      {"max_uts_namespaces", 0},
      {"max_time_namespaces", 0},
      {"max_cgroup_namespaces", 1},
      {"max_inotify_instances", spec.inotify_instances_max},
      {"max_inotify_watches", spec.inotify_watches_max}};
  for (int i = 0; i < pid1::kUserLimits; ++i) {
    auto [file, value] = limits[i];
    const bool share = std::strncmp(file, "max_inotify", 11) == 0;
    if (share && value == 0) continue;  // a spec without shares (a runner started by hand)
    b.user_limits[i].file = file;
    std::snprintf(b.user_limits[i].value, sizeof b.user_limits[i].value, "%llu",
                  static_cast<unsigned long long>(value));
  }
}

// pid 1 shares this memory (CLONE_VM), so /proc/1/cmdline in the sandbox
// shows what is here: the runner's command line (the binary's host path)
// is replaced by a name. /proc/self/stat fields 48 and 49 give its bounds.
void zygote_hide_command_line(Build& b) {
  char stat[2048];
  util::UniqueFd fd(::open("/proc/self/stat", O_RDONLY | O_CLOEXEC));
  const long n = fd.valid() ? util::read_some(fd.get(), stat, sizeof stat - 1) : -1;
  if (n <= 0) b.fail(util::call_error("read", "/proc/self/stat", errno));
  stat[n] = '\0';
  const char* p = std::strrchr(stat, ')');
  unsigned long long start = 0, end = 0;
  // After ") ": field 3 (state) on; arg_start is field 48, arg_end 49.
  for (int field = 2; p && *p && field < 49;) {
    p = std::strchr(p + 1, ' ');
    if (!p) break;
    ++field;
    if (field == 48) start = std::strtoull(p + 1, nullptr, 10);
    if (field == 49) end = std::strtoull(p + 1, nullptr, 10);
  }
  if (start == 0 || end <= start) b.fail("/proc/self/stat: no command line bounds");
  static constexpr char kName[] = "throwbox-init";
  char* args = reinterpret_cast<char*>(static_cast<uintptr_t>(start));
  const size_t size = static_cast<size_t>(end - start);
  std::memset(args, 0, size);
  std::memcpy(args, kName, std::min(size - 1, sizeof kName - 1));
}

// A normal user's subordinate ids: from here the zygote is root of a user
// namespace of its own (namespaces.h), as a root server's zygote is of the host.
void zygote_enter_subordinate_ns(Build& b) {
  if (b.spec.subordinate_uid == 0) return;
  if (auto s = namespaces::enter_subordinate_ns_in_parent(b.spec.subordinate_uid, b.spec.subordinate_gid); !s)
    b.fail(s.error().message);
  b.report.layers.add(Layer::subordinate_uid);
  trace::mark("subordinate user namespace");
}

// Every path and string pid 1 will need, built before the clone.
void zygote_plan_mounts(Build& b) {
  auto plan = mounts::plan_in_parent(b.spec);
  if (!plan) b.fail(plan.error().message);
  b.plan = std::move(*plan);
  trace::mark("plan");
}

// The other layers, prepared here so the children only make syscalls.
void zygote_prepare_layers(Build& b) {
  const LaunchSpec& spec = b.spec;
  b.host = cgroups::host_from_json(spec.cgroup_host);
  auto filter = filter_for(spec, b.host);
  if (!filter) b.fail(filter.error().message);
  b.filter = std::move(*filter);
  const int landlock_abi = landlock::abi_version();
  b.report.landlock_abi = landlock_abi;
  if (landlock_abi == 0 && spec.require_landlock)
    b.fail(
        "the policy requires Landlock (sandbox.require.landlock) but this kernel has none "
        "(needs Linux 5.13+ with landlock in the lsm= boot list)");
  if (b.host.mode == cgroups::Mode::none && spec.require_cgroups)
    b.fail("the policy requires cgroups (sandbox.require.cgroups) but none are usable: " + b.host.why_not);
  b.limits = limits_for(spec, b.host);
  zygote_plan_user_limits(b);
  b.cpus = placement::allowed_in_parent();
  b.ctx = pid1::Context{&b.spec,
                        &b.plan,
                        b.ch.child_sock.get(),
                        b.ch.out_write.get(),
                        b.ch.err_write.get(),
                        to_cstrings(spec.argv),
                        to_cstrings(spec.env),
                        with_proxy_env(spec.env, false),
                        with_proxy_env(spec.env, true),
                        &b.filter,
                        &b.limits,
                        capabilities::read_last_cap_in_parent(),
                        // A template's fork would carry its domain into the job: none.
                        spec.template_socket.empty() ? landlock_abi : 0,
                        &b.cpus,
                        b.user_limits,
                        -1,
                        {b.ch.sock.get(), b.ch.out_read.get(), b.ch.err_read.get(), b.report_fd}};
  trace::mark("layers prepared");
}

// The job's scratch directory (a cold job's is made here, the broker only
// made its parent) and in it the mount point of the new root.
void zygote_make_scratch(Build& b) {
  const std::string& dir = b.spec.scratch_dir;
  if (::mkdir(dir.c_str(), 0700) != 0) {
    const int e = errno;
    struct stat st {};
    if (e != EEXIST) b.fail(util::call_error("mkdir", dir, e));
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0)
      b.fail("scratch directory " + dir + " exists and is not this runner's own 0700 directory");
  }
  if (::mkdir(b.plan.root.c_str(), 0700) != 0) b.fail(util::call_error("mkdir", b.plan.root, errno));
}

void zygote_make_harvest_dir(Build& b);

// The job's cgroup with its limits, `pid` in it.
void zygote_make_cgroup_for(Build& b, pid_t pid) {
  const LaunchSpec& spec = b.spec;
  auto made =
      cgroups::Job::create_in_parent(b.host, spec.job_id, {spec.memory_max_bytes, spec.pids_max, spec.cpu_max_cores});
  if (!made) b.fail(made.error().message);
  if (auto a = made->attach_in_parent(pid); !a) b.fail(a.error().message);
  if (made->mode() != cgroups::Mode::none) b.report.layers.add(Layer::cgroups);
}

// A template: the listening socket its forks are asked for on, bound where
// the spec says (0600: only the runners, as the server's user, connect),
// kept by pid 1 and given to the program as kTemplateListenFd. The runner
// removes the path when the template ends.
void zygote_open_template_socket(Build& b) {
  const std::string& path = b.spec.template_socket;
  if (path.empty()) return;
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) b.fail(util::call_error("socket", "AF_UNIX template listener", errno));
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);  // under 108 bytes (spec_from_json)
  const mode_t old = ::umask(0177);
  const int bound = ::bind(fd, reinterpret_cast<const struct sockaddr*>(&addr), sizeof addr);
  const int bind_errno = errno;
  ::umask(old);
  if (bound != 0) b.fail(util::call_error("bind", path, bind_errno));
  if (::listen(fd, kTemplateBacklog) != 0) b.fail(util::call_error("listen", path, errno));
  b.ctx.template_listen_fd = fd;
  trace::mark("template socket");
}

// Forked from a template: pid 1's namespaces are made inside the template's
// user and pid namespaces, so that the template's fork may join them. What
// the zygote does as the host's (root, or the server's user) comes first:
// the harvest directory, and the job's cgroup made and joined (pid 1 is born
// in it). The template is the process the spec names, started when it says
// (a pid since reused is refused); the job's host ids are translated into its
// user namespace for pid 1's id maps.
void zygote_enter_template(Build& b) {
  const LaunchSpec& spec = b.spec;
  b.map_uid = spec.host_uid;
  b.map_gid = spec.host_gid;
  if (spec.from_template_pid == 0) return;
  zygote_make_harvest_dir(b);
  if (b.prepared_id.empty()) zygote_make_cgroup_for(b, ::getpid());
  b.born_in_cgroup = true;
  const pid_t pid = spec.from_template_pid;
  util::UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd.valid())
    b.fail(util::call_error("pidfd_open", "the template's pid 1 (" + std::to_string(pid) + ")", errno));
  const uint64_t started = process_start_time(pid);
  if (started != spec.from_template_start_time)
    b.fail("pid " + std::to_string(pid) + " is not the template's pid 1 any more (started at " +
           std::to_string(started) + ", the template at " + std::to_string(spec.from_template_start_time) + ")");
  auto uid = namespaces::map_id_in_parent(pid, "uid_map", spec.host_uid, true);
  auto gid = namespaces::map_id_in_parent(pid, "gid_map", spec.host_gid, true);
  auto owner_uid = namespaces::map_id_in_parent(pid, "uid_map", kSandboxUid, false);
  auto owner_gid = namespaces::map_id_in_parent(pid, "gid_map", kSandboxGid, false);
  for (auto* r : {&uid, &gid, &owner_uid, &owner_gid})
    if (!*r) b.fail(r->error().message);
  b.map_uid = *uid;
  b.map_gid = *gid;
  if (auto e = namespaces::enter_template_in_parent(pidfd.get(), *owner_uid, *owner_gid); !e) b.fail(e.error().message);
  trace::mark("template's namespaces joined");
}

// pid 1 in fresh namespaces, on the zygote's memory (CLONE_VM: no page
// tables copied) and, without CLONE_SETTLS, its thread data: pid 1 never
// allocates (unit.child_side_symbols), and the one thing either could
// overwrite for the other is errno, between a failed call and its report
// (a wrong errno in a message at worst). CLONE_PARENT: the runner's child.
// pid 1 makes its network namespace first thing, meanwhile.
void zygote_clone_pid1(Build& b) {
  // Forked from a template: the namespace's owner is the template's user.
  const bool become_owner = b.spec.own_user_ns && b.spec.from_template_pid == 0;
  if (become_owner) {
    if (auto s = namespaces::become_owner_in_parent(b.spec.host_uid, b.spec.host_gid); !s) b.fail(s.error().message);
  }
  constexpr int kFlags = static_cast<int>(namespaces::kSandboxCloneFlags | CLONE_VM | CLONE_PARENT);
  if (!stack_top) {
    b.pid = -1;
    errno = ENOMEM;
  } else if (b.spec.from_template_pid == 0) {
    b.pid = ::clone(pid1::clone_entry, stack_top, kFlags, &b.ctx);
  } else {
    // A new pid namespace is made only from one's own (clone(2): EINVAL
    // otherwise): the zygote joined the template's for its children, so a
    // helper, active there, clones pid 1. Both are the runner's children
    // (CLONE_PARENT); the helper exits at once and the runner reaps it.
    // The helper (sharing the zygote's descriptors) gets pid 1's pid in the template's namespace;
    // its pidfd (CLONE_PIDFD) names the host's in /proc/self/fdinfo.
    struct Helper {
      Build* b;
      int flags;
      pid_t pid;
      int err;
      int pidfd;
    } h{&b, kFlags | CLONE_PIDFD, -1, 0, -1};
    const pid_t helper = ::clone(
        [](void* arg) -> int {
          auto* self = static_cast<Helper*>(arg);
          self->pid = ::clone(pid1::clone_entry, stack_top, self->flags, &self->b->ctx, &self->pidfd);
          self->err = errno;
          return 0;
        },
        helper_stack + sizeof helper_stack, CLONE_VM | CLONE_VFORK | CLONE_PARENT | CLONE_FILES | SIGCHLD, &h);
    if (helper < 0) b.fail(util::call_error("clone", "CLONE_VM|CLONE_VFORK|CLONE_PARENT (pid 1's helper)", errno));
    b.report.helper_pid = helper;
    b.pid = h.pid < 0 ? -1 : host_pid_of(h.pidfd);
    errno = h.err;
    if (h.pidfd >= 0) ::close(h.pidfd);
    if (h.pid >= 0 && b.pid <= 0) b.fail("pid 1's pid on the host is not in /proc/self/fdinfo of its pidfd");
  }
  const int clone_errno = errno;
  if (become_owner) {
    if (auto s = namespaces::restore_root_in_parent(); !s) b.fail(s.error().message);  // pid 1 dies with us
    // The id changes cleared dumpable on the memory pid 1 shares: a runner
    // that is not host root (subordinate ids) opens /proc/<pid 1> next.
    (void)::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    b.report.layers.add(Layer::own_uid);
  }
  if (b.spec.from_template_pid != 0) {
    b.report.layers.add(Layer::template_fork);
    if (b.spec.own_user_ns) b.report.layers.add(Layer::own_uid);
  }
  if (b.pid < 0) {
    int e = clone_errno;
    b.fail(util::call_error("clone",
                            "CLONE_NEWUSER|CLONE_NEWPID|CLONE_NEWNS|CLONE_NEWIPC|CLONE_NEWUTS|"
                            "CLONE_NEWCGROUP|CLONE_VM|CLONE_PARENT",
                            e) +
           (e == EPERM || e == ENOSPC ? "; user namespaces may be disabled (sysctl user.max_user_namespaces, "
                                        "kernel.apparmor_restrict_unprivileged_userns)"
                                      : ""));
  }
  b.report.pid = b.pid;
  static constexpr struct {
    unsigned long flag;
    Layer layer;
  } kMade[] = {{CLONE_NEWUSER, Layer::user_ns},
               {CLONE_NEWPID, Layer::pid_ns},
               {CLONE_NEWNS, Layer::mount_ns},
               {CLONE_NEWIPC, Layer::ipc_ns},
               {CLONE_NEWUTS, Layer::uts_ns}};
  for (auto& m : kMade)
    if (namespaces::kSandboxCloneFlags & m.flag) b.report.layers.add(m.layer);
  placement::keep_child_here_in_parent(b.pid, b.cpus);
  trace::mark("cloned");
}

// Identity first: pid 1 builds its root once the id maps exist.
void zygote_write_id_maps(Build& b) {
  const LaunchSpec& spec = b.spec;
  if (spec.from_template_pid != 0 && spec.own_user_ns) {
    if (auto f = namespaces::own_files_as_template_user_in_parent(); !f) b.fail(f.error().message);
  }
  auto m = spec.template_socket.empty()
               ? namespaces::write_id_maps_in_parent(b.pid, b.map_uid, b.map_gid)
               : namespaces::write_template_id_maps_in_parent(b.pid, spec.host_uid, spec.host_gid,
                                                              spec.template_ids_first, spec.template_ids_count);
  if (!m) b.fail(m.error().message);
}

void zygote_send_go(Build& b) {
  char go = kMsgGo;
  if (::send(b.ch.sock.get(), &go, 1, MSG_NOSIGNAL) != 1) b.fail(util::call_error("send", "go", errno));
  placement::move_self_away_in_parent(b.cpus);
  trace::mark("id maps, go");
}

// The host side of the harvest, beside pid 1's work.
void zygote_make_harvest_dir(Build& b) {
  if (b.born_in_cgroup) return;  // made before the template's namespaces were joined
  if (::mkdir(b.spec.harvest_dir.c_str(), 0700) != 0 && errno != EEXIST)
    b.fail(util::call_error("mkdir", b.spec.harvest_dir, errno));
}

// The job's cgroup with its limits, pid 1 in it, while pid 1 builds its
// root; a prepared spare's zygote joined it before the spec, and its limits
// are written before the clone (zygote_limit_prepared_cgroup).
void zygote_attach_cgroup(Build& b) {
  if (!b.prepared_id.empty()) {
    if (b.prepared_cgroup.mode() != cgroups::Mode::none) b.report.layers.add(Layer::cgroups);
    return;
  }
  if (b.born_in_cgroup) return;
  zygote_make_cgroup_for(b, b.pid);
  trace::mark("cgroup attached");
}

// A prepared spare: the limits on the cgroup this process is in, so pid 1
// is born under them. The zygote itself counts towards pids.max until it
// exits, before the program starts.
void zygote_limit_prepared_cgroup(Build& b) {
  if (b.prepared_id.empty()) return;
  const LaunchSpec& spec = b.spec;
  if (auto s = b.prepared_cgroup.limit_in_parent({spec.memory_max_bytes, spec.pids_max, spec.cpu_max_cores}); !s)
    b.fail(s.error().message);
  trace::mark("prepared cgroup limited");
}

// One write of the report (the runner reads it all: a failed write only
// loses a report it cannot use anyway), then the zygote exits.
void zygote_report_and_exit(const Build& b) {
  const Report& report = b.report;
  Wire w{};
  w.pid = report.pid;
  w.helper_pid = report.helper_pid;
  w.landlock_abi = report.landlock_abi;
  w.layers = report.layers.bits();
  w.spec_bytes = report.spec_text.size();
  w.rest_bytes = report.rest.size();
  std::strncpy(w.error, report.error.c_str(), sizeof w.error - 1);
  trace::mark("zygote: reported");
  (void)(util::write_all(b.report_fd, &w, sizeof w) &&
         util::write_all(b.report_fd, report.spec_text.data(), report.spec_text.size()) &&
         util::write_all(b.report_fd, report.rest.data(), report.rest.size()));
  ::_exit(0);
}

// The zygote's steps, in order; a failed step reports its error and exits:
// 1 detach from the runner  2 warm up (while the job has not come)
// 3 a spare's prepare line: its cgroup made and joined  4 read the spec
// 5 parse it (and check it against the prepare line)  6 subordinate ids: a
// user namespace of its own  7 plan the mounts  8 prepare seccomp,
// Landlock, rlimits, the user namespace's limits, capabilities, CPUs
// 9 scratch directory and root mount point  10 hide the command line
// 11 a prepared cgroup's limits  12 a template: its listening socket
// 13 forked from a template: harvest directory, the job's cgroup joined,
// into the template's user and pid namespaces  14 clone pid 1 into its
// namespaces (as root: owned by the sandbox's own uid; forked: by the
// template's user)  15 id maps  16 go  17 harvest directory  18 the job's
// cgroup, pid 1 in it (unless born there)  19 report, exit.
// The runner sends pid 1 "start" only after it reaped the zygote.
[[noreturn]] void zygote_main(Build& b) {
  zygote_detach_from_runner(b);
  zygote_warm_up(b);
  zygote_prepare(b);
  zygote_read_spec(b);
  zygote_parse_spec(b);
  zygote_enter_subordinate_ns(b);
  zygote_plan_mounts(b);
  zygote_prepare_layers(b);
  zygote_make_scratch(b);
  zygote_hide_command_line(b);
  zygote_limit_prepared_cgroup(b);
  zygote_open_template_socket(b);
  zygote_enter_template(b);
  zygote_clone_pid1(b);
  zygote_write_id_maps(b);
  zygote_send_go(b);
  zygote_make_harvest_dir(b);
  zygote_attach_cgroup(b);
  zygote_report_and_exit(b);
}

}  // namespace

// Fields are counted from the command name's last ')' (it may hold spaces
// and parentheses).
uint64_t process_start_time(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  char buf[1024];
  if (!read_proc(path, buf)) return 0;
  const char* p = std::strrchr(buf, ')');
  for (int field = 2; p && field < 22; ++field) p = std::strchr(p + 1, ' ');
  return p ? std::strtoull(p + 1, nullptr, 10) : 0;
}

util::Result<seccomp::Program> filter_for(const LaunchSpec& spec, const cgroups::Host& host) {
  // Normally compiled once by the server; a runner started by hand compiles its own.
  if (spec.seccomp_bpf_base64.empty())
    return seccomp::compile_in_parent(host.mode != cgroups::Mode::none, spec.template_socket.empty()
                                                                            ? seccomp::Role::job
                                                                            : seccomp::Role::template_process);
  auto raw = util::base64_decode(spec.seccomp_bpf_base64);
  if (!raw) return util::make_error(util::ErrorCode::kSandbox, "seccomp program in the launch spec is not base64");
  return seccomp::from_bytes(*raw);
}

rlimits::Table limits_for(const LaunchSpec& spec, const cgroups::Host& host) {
  // With a memory cgroup the cgroup is the limit (an OOM kill is reported as
  // memory_exceeded) and RLIMIT_DATA only a backstop at twice it; without one,
  // RLIMIT_DATA is the limit.
  const uint64_t data_max = host.mode == cgroups::Mode::none ? spec.memory_max_bytes : 2 * spec.memory_max_bytes;
  return rlimits::build_in_parent(
      {spec.pids_max, spec.nofile_max,
       std::max({spec.work_max_bytes, spec.tmp_max_bytes, spec.outputs_max_bytes, spec.workspace_max_bytes}), data_max,
       spec.timeout_ms, spec.sigpending_max, spec.msgqueue_max_bytes});
}

// About the size of the compiled filter in base64 (some 320 BPF instructions),
// so the rehearsal touches as much of the parser and decoder as a real spec.
constexpr size_t kRehearsalSeccompBase64 = 3440;

LaunchSpec rehearsal_spec() {
  LaunchSpec s;
  s.job_id = std::string(32, '0');
  s.scratch_dir = s.harvest_dir = std::string(64, '/');
  s.argv = {"/usr/bin/python3", "-I", "/work/main.py"};
  s.env = {"PATH=/usr/bin:/bin", "HOME=/work", "LANG=C.UTF-8"};
  s.readonly_paths = {"/usr", "/lib", "/lib64", "/bin"};
  s.seccomp_bpf_base64 = std::string(kRehearsalSeccompBase64, 'A');
  s.timeout_ms = 1;
  return s;
}

bool rehearse_parse() {
  const LaunchSpec s = rehearsal_spec();
  auto doc = nlohmann::json::parse(to_json(s).dump(), nullptr, false);
  const bool parsed = !doc.is_discarded() && spec_from_json(doc).ok();
  (void)util::base64_decode(s.seccomp_bpf_base64);
  return parsed;
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

util::Result<Zygote> Zygote::start_in_parent() {
  util::Pipe report, out, err;
  if (!util::make_pipe(report) || !util::make_pipe(out) || !util::make_pipe(err))
    return util::make_error(util::ErrorCode::kSandbox, util::call_error("pipe2", "zygote", errno));
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return util::make_error(util::ErrorCode::kSandbox, util::call_error("socketpair", "control", errno));
  Zygote z;
  z.channels_.sock.reset(sv[0]);
  z.channels_.child_sock.reset(sv[1]);
  z.channels_.out_read = std::move(out.read);
  z.channels_.out_write = std::move(out.write);
  z.channels_.err_read = std::move(err.read);
  z.channels_.err_write = std::move(err.write);
  const pid_t runner = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return util::make_error(util::ErrorCode::kSandbox, util::call_error("fork", "zygote", errno));
  if (pid == 0) {
    report.read.reset();
    Build b(runner, report.write.get(), z.channels_);
    zygote_main(b);
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
    : pid_(std::exchange(o.pid_, -1)), report_read_(std::move(o.report_read_)), channels_(std::move(o.channels_)) {}

Zygote::~Zygote() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int st;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {}
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
  while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {}
  pid_ = -1;
  report_read_.reset();
  if (whole && w.helper_pid > 0) {
    int helper_st;
    while (::waitpid(w.helper_pid, &helper_st, 0) < 0 && errno == EINTR) {}
  }
  if (!whole) {
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
      return util::make_error(util::ErrorCode::kSandbox,
                              "the sandbox zygote did not finish building in " + std::to_string(kBuildTimeoutS) + " s");
    return util::make_error(util::ErrorCode::kSandbox, "the sandbox zygote exited before its report");
  }
  w.error[sizeof w.error - 1] = '\0';
  r.pid = w.pid;
  r.landlock_abi = w.landlock_abi;
  r.layers = Layers(w.layers);
  r.error = w.error;
  return r;
}

}  // namespace sandbox::zygote
