// Host probes for `throwbox doctor`. Each probe is independent and says what
// it saw; the probe job at the end is the proof that the layers work together.
#include "server/doctor.h"

#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <iostream>
#include <optional>
#include <linux/seccomp.h>

#include "server/broker/identities.h"
#include "server/broker/jobs.h"
#include "server/sandbox/cgroup_host.h"
#include "server/sandbox/cgroups.h"
#include "server/sandbox/landlock.h"
#include "server/sandbox/seccomp.h"
#include "server/store/store.h"
#include "server/util/fs.h"
#include "server/util/text.h"

namespace doctor {
namespace {

struct Line {
  std::string layer;
  bool ok;
  std::string detail;
  std::string fix;
  bool required;
};

std::string read_trimmed(const std::string& path) {
  auto r = util::read_file(path, 4096);
  if (!r) return "";
  std::string s = *r;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

Line probe_user_namespaces() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(::unshare(CLONE_NEWUSER) == 0 ? 0 : errno);
  int st = 0;
  ::waitpid(pid, &st, 0);
  int err = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  if (err == 0)
    return {"user namespaces", true, "unshare(CLONE_NEWUSER) works for uid " + std::to_string(::geteuid()), "", true};
  std::string detail = "unshare(CLONE_NEWUSER): " + (err > 0 ? util::errno_name(err) : std::string("crashed"));
  std::string fix = "allow user namespaces";
  std::string max = read_trimmed("/proc/sys/user/max_user_namespaces");
  if (max == "0") fix = "sysctl -w user.max_user_namespaces=15000";
  if (read_trimmed("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1")
    fix =
        "Ubuntu 24.04+: AppArmor restricts unprivileged user namespaces; add an AppArmor profile "
        "granting 'userns' to the throwbox binary, or run throwbox as a root service";
  return {"user namespaces", false, detail, fix, true};
}

Line probe_seccomp() {
  auto prog = sandbox::seccomp::compile_in_parent();
  if (!prog) return {"seccomp", false, prog.error().message, "install a kernel with CONFIG_SECCOMP_FILTER", true};
  int mode = ::prctl(PR_GET_SECCOMP, 0, 0, 0, 0);
  if (mode < 0)
    return {"seccomp", false, "prctl(PR_GET_SECCOMP): " + util::errno_name(errno),
            "install a kernel with CONFIG_SECCOMP_FILTER", true};
  return {"seccomp", true, "filter of " + std::to_string(prog->instructions.size()) + " BPF instructions compiles", "",
          true};
}

Line probe_landlock(bool required) {
  int abi = sandbox::landlock::abi_version();
  if (abi > 0) return {"landlock", true, "ABI " + std::to_string(abi), "", required};
  return {"landlock", false, "landlock_create_ruleset: not available",
          "Linux 5.13+ with 'landlock' in the lsm= boot parameter (CONFIG_SECURITY_LANDLOCK=y)", required};
}

// The same set-up as serve (a delegated cgroup may move this process into a
// leaf), so the line says exactly what a job of `serve` here will get.
Line probe_cgroups(const sandbox::cgroups::Host& h, bool required) {
  if (h.mode != sandbox::cgroups::Mode::none)
    return {"cgroups", true, std::string(to_string(h.mode)) + ", " + h.placement, "", required};
  return {"cgroups", false, h.why_not + "; without cgroups " + sandbox::cgroup_host::kWithoutCgroups,
          "root: cgroup v2 with the memory, pids and cpu controllers, or v1 with them; a normal user: "
          "cgroup v2 delegated by systemd, e.g. systemd-run --user --scope -p Delegate=yes throwbox serve, "
          "or a systemd service with Delegate=yes (docs/operations.md, Hosts)",
          required};
}

// The sandboxes' host identity: a uid of their own (root) or the server's.
// Always "ok" unless the range is unusable: a shared uid is declared in every
// result (host_uid:shared) and bounded by the per-user shares.
Line probe_identity(const policy::Policy& pol) {
  auto ids = broker::Identities::make(pol, ::geteuid(), ::getegid());
  if (!ids) return {"sandbox identity", false, ids.error().message, "choose a range no account uses", true};
  if (ids->subordinate())
    return {"sandbox identity", true,
            "a uid of its own per live sandbox from this user's /etc/subuid range " + std::to_string(ids->first()) +
                ".." + std::to_string(uint64_t{ids->first()} + ids->count() - 1) +
                " (newuidmap; host_uid:subordinate); what the kernel counts per user still reaches this user at the "
                "top, bounded by each sandbox's share",
            "", true};
  if (ids->per_sandbox())
    return {"sandbox identity", true,
            "a host uid of its own per live sandbox, from sandbox.uid_range " + std::to_string(pol.sandbox.uid_first) +
                ".." + std::to_string(uint64_t{pol.sandbox.uid_first} + pol.sandbox.uid_count - 1) +
                ", owning its user namespace",
            "", true};
  return {"sandbox identity", true,
          "every sandbox maps to this server's uid " + std::to_string(::geteuid()) + " (host_uid:shared) because " +
              ids->why_shared() + "; each gets a share of this user's signal, message queue and inotify limits",
          "", true};
}

// The parser helper as serve starts it, and what its confinement refuses.
Line probe_parser(broker::Jobs& jobs) {
  auto probe = jobs.probe_parser();
  if (!probe)
    return {"parser helper", false, probe.error().message,
            "the helper needs what a sandbox needs (user namespaces as a normal user, seccomp); see above", true};
  std::string tried, allowed;
  for (auto& [what, got] : probe->items()) {
    const std::string g = got.is_string() ? got.get<std::string>() : "?";
    tried += (tried.empty() ? "" : ", ") + what + " " + g;
    if (g == "allowed") allowed += (allowed.empty() ? "" : ", ") + what;
  }
  if (!allowed.empty())
    return {"parser helper", false, "its confinement allows " + allowed + " (" + tried + ")", "report this as a bug",
            true};
  return {"parser helper", true, "confined, in a child: " + tried, "", true};
}

// Each profile's credentials: present, or missing and why; never a value.
// No line when no profile has one.
std::optional<Line> probe_credentials(const policy::Policy& pol) {
  std::string detail;
  bool ok = true;
  size_t count = 0;
  for (auto& [name, profile] : pol.network.profiles)
    for (auto& c : profile.credentials) {
      ++count;
      const bool present = c.value_problem.empty();
      ok = ok && present;
      detail += (detail.empty() ? "" : "; ") + name + ": " + c.host + ":" + std::to_string(c.port) + " " + c.header +
                (present ? " present" : " MISSING (" + c.value_problem + ")");
    }
  if (count == 0) return std::nullopt;
  return Line{"egress credentials", ok, detail,
              ok ? "" : "make each value_file named a one-line file only the server's user may read", true};
}

}  // namespace

int run(const policy::Policy& pol, const std::string& state_dir, const std::string& runner_exe) {
  std::vector<Line> lines;
  lines.push_back(probe_user_namespaces());
  lines.push_back(probe_identity(pol));
  lines.push_back(probe_seccomp());
  lines.push_back(probe_landlock(pol.sandbox.require_landlock));
  auto tree = sandbox::cgroup_host::ServerTree::set_up();
  lines.push_back(probe_cgroups(tree->host(), pol.sandbox.require_cgroups));

  // The proof: one real job through the runner with the policy's first runtime.
  std::string probe_state = state_dir + "/doctor-" + std::to_string(::getpid());
  Line job{"probe job", false, "", "", true};
  Line parser{"parser helper", false, "not started: the sandbox identity above is unusable", "", true};
  if (!lines[1].ok) {
    job.detail = "not run: the sandbox identity above is unusable";
  } else if (auto s = util::make_dirs(probe_state, 0700); !s) {
    job.detail = s.error().message;
  } else {
    store::Store store(probe_state);
    policy::Live live(std::make_shared<const policy::Policy>(pol));
    broker::Jobs jobs(live, store, runner_exe, sandbox::cgroups::to_json(tree->host()));
    parser = probe_parser(jobs);
    std::string runtime = pol.available_runtimes().front();
    const char* code = runtime == "python" ? "print('ok')" : runtime == "node" ? "console.log('ok')" : "echo ok";
    broker::JobRequest probe;
    probe.tenant = "doctor";
    probe.runtime = runtime;
    probe.code = code;
    probe.timeout_s = 10.0;
    auto r = jobs.run(probe);
    if (!r) {
      job.detail = r.error().message;
    } else {
      const auto& o = r->outcome;
      // The job must have had the cgroup the line above promises, no more, no less.
      const std::string want = tree->host().mode == sandbox::cgroups::Mode::none
                                   ? ""
                                   : std::string("cgroups:") + to_string(tree->host().mode);
      std::string got;
      for (auto& l : o.layers)
        if (l.rfind("cgroups:", 0) == 0) got = l;
      job.ok = o.status == sandbox::Status::completed && o.stdout_text == "ok\n" && got == want;
      std::string layers;
      for (auto& l : o.layers) layers += (layers.empty() ? "" : " ") + l;
      job.detail = runtime + ": status " + sandbox::to_string(o.status) +
                   (o.error.empty() ? "" : " (" + o.error + ")") + (layers.empty() ? "" : "; active layers: " + layers);
      if (!job.ok && o.status == sandbox::Status::completed && got != want)
        job.fix = "the job's cgroup layer (" + (got.empty() ? "none" : got) + ") differs from the probe's (" +
                  (want.empty() ? "none" : want) + "): report this as a bug";
      else if (!job.ok)
        job.fix = "see the failed step above; every layer must be in place before code runs";
    }
    (void)util::remove_tree(probe_state);
  }
  lines.push_back(job);
  lines.push_back(parser);
  if (auto credentials = probe_credentials(pol)) lines.push_back(*credentials);

  bool healthy = true;
  std::vector<std::string> degraded;
  std::cout << "throwbox doctor (policy " << pol.source << ", uid " << ::geteuid() << ")\n\n";
  for (auto& l : lines) {
    const char* mark = l.ok ? "ok     " : (l.required ? "MISSING" : "absent ");
    std::cout << mark << "  " << l.layer << ": " << l.detail << "\n";
    if (!l.ok && !l.fix.empty()) std::cout << "         fix: " << l.fix << "\n";
    if (!l.ok && !l.required) {
      std::cout << "         the policy allows running without it (sandbox.require." << l.layer
                << " is false); results say what is missing\n";
      degraded.push_back(l.layer);
    }
    if (!l.ok && l.required) healthy = false;
  }
  std::string missing;
  for (auto& d : degraded) missing += (missing.empty() ? "" : ", ") + d;
  std::cout << "\n"
            << (!healthy           ? "NOT ready: a required layer is missing"
                : degraded.empty() ? "ready: every layer is in place"
                                   : "ready, DEGRADED: jobs run without " + missing + " (allowed by the policy)")
            << "\n";
  return healthy ? 0 : 1;
}

}  // namespace doctor
