// Job admission and execution on the trusted side. The runner is a separate,
// single-threaded process (this server is multithreaded and must not do
// namespace work after fork). Secrets and the host environment stay here.
#include "server/broker/jobs.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <future>
#include <cmath>
#include <set>
#include <spdlog/spdlog.h>

#include "server/broker/pool.h"
#include "server/broker/python_loader.h"
#include "server/broker/runner_process.h"
#include "server/sandbox/cgroups.h"
#include "server/sandbox/seccomp.h"
#include "server/util/base64.h"
#include "server/util/crypto.h"
#include "server/util/fd.h"
#include "server/util/fs.h"
#include "server/util/text.h"

namespace broker {
namespace {

constexpr int64_t kRunnerGraceMs = 15000;  // set-up, kill and harvest beyond the job's own deadline
constexpr size_t kOutcomeMaxBytes = 64 * 1024 * 1024;

artifacts::Gate make_gate(const policy::Policy& p) {
  auto gate = artifacts::Gate::create({p.artifacts.allowed_media_types, p.artifacts.file_max_bytes,
                                       p.artifacts.csv_reject ? artifacts::csv::Mode::kReject
                                                              : artifacts::csv::Mode::kNeutralise,
                                       p.artifacts.active_content_as_text});
  if (!gate) throw std::runtime_error("artifact gate: " + gate.error().message);
  return std::move(*gate);
}

int64_t now_us() {
  struct timespec ts {};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

int64_t now_ms() {
  struct timespec ts {};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace

Cancellation::Cancellation() : efd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!efd_.valid()) throw std::runtime_error("eventfd failed");
}

void Cancellation::cancel() {
  if (requested_.exchange(true)) return;
  uint64_t one = 1;
  (void)::write(efd_.get(), &one, sizeof one);
}

struct Jobs::KeyedRun {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string request_sha256;
  std::optional<JobResult> result;
  util::Error error;
};

namespace {

nlohmann::json artifacts_to_json(const std::vector<ArtifactSummary>& list) {
  nlohmann::json out = nlohmann::json::array();
  for (auto& a : list)
    out.push_back({{"artifact_id", a.artifact_id ? nlohmann::json(*a.artifact_id) : nlohmann::json(nullptr)},
                   {"name", a.name}, {"media_type", a.media_type}, {"size", a.size}, {"sha256", a.sha256},
                   {"verdict", a.verdict}, {"reason", a.reason}});
  return out;
}

std::vector<ArtifactSummary> artifacts_from_json(const nlohmann::json& j) {
  std::vector<ArtifactSummary> out;
  if (!j.is_array()) return out;
  for (auto& a : j) {
    ArtifactSummary s;
    if (a.contains("artifact_id") && a["artifact_id"].is_string()) s.artifact_id = a["artifact_id"].get<std::string>();
    s.name = a.value("name", "");
    s.media_type = a.value("media_type", "");
    s.size = a.value("size", uint64_t{0});
    s.sha256 = a.value("sha256", "");
    s.verdict = a.value("verdict", "");
    s.reason = a.value("reason", "");
    out.push_back(s);
  }
  return out;
}

// A ledger row back into a result: what a repeated key returns.
JobResult from_ledger(const LedgerRow& row) {
  JobResult r;
  r.job_id = row.job_id;
  if (row.result.is_object() && row.result.contains("outcome")) {
    nlohmann::json o = row.result["outcome"];
    o["files"] = nlohmann::json::array();
    if (auto parsed = sandbox::outcome_from_json(o)) r.outcome = *parsed;
    r.artifacts = artifacts_from_json(row.result.value("artifacts", nlohmann::json::array()));
  } else {
    r.outcome.status = row.status == "running" ? "sandbox_error" : row.status;
    r.outcome.error = row.result.is_object() ? row.result.value("interrupted", "no result recorded") : "no result recorded";
  }
  return r;
}

}  // namespace

JobResult job_result_from_row(const LedgerRow& row) { return from_ledger(row); }

struct Jobs::Finished {
  std::unique_ptr<RunnerProcess> runner;
  std::string scratch_dir;
  std::string job_id;
};

Jobs::Jobs(const policy::Policy& policy, store::Store& store, std::string runner_exe,
           nlohmann::json cgroup_host)
    : policy_(policy),
      store_(store),
      runner_exe_(std::move(runner_exe)),
      cgroup_host_(std::move(cgroup_host)),
      gate_(make_gate(policy)),
      admission_(policy.admission) {
  auto ledger = Ledger::open(store_.state_dir() + "/ledger.sqlite3");
  if (!ledger) throw std::runtime_error("job ledger: " + ledger.error().message);
  ledger_ = std::move(*ledger);
  // The filter is the same for every job: compile it once, not per runner.
  auto program = sandbox::seccomp::compile_in_parent(cgroup_host_.value("mode", "none") != "none");
  if (!program) throw std::runtime_error(program.error().message);
  std::string raw(reinterpret_cast<const char*>(program->instructions.data()),
                  program->instructions.size() * sizeof(sock_filter));
  seccomp_bpf_base64_ = util::base64_encode(raw);
  // Cold jobs' scratch directories are made in it by their runners.
  if (auto s = util::make_dirs(store_.state_dir() + "/run", 0700); !s)
    throw std::runtime_error("scratch directory: " + s.error().message);
  reaper_ = std::jthread([this] { reap_loop(); });
  janitor_ = std::jthread([this](std::stop_token stop) {
    std::mutex m;
    std::condition_variable_any cv;
    std::unique_lock lock(m);
    while (!cv.wait_for(lock, stop, std::chrono::seconds(policy_.retention.janitor_interval_s), [] { return false; }))
      if (stop.stop_requested()) return;
      else expire();
  });
}

void Jobs::start_pool() {
  {
    std::lock_guard lock(reap_mu_);
    spare_wanted_ = true;
  }
  reap_cv_.notify_one();
  if (pool_ || !policy_.pool.enabled || policy_.pool.runtimes.empty()) return;
  pool_ = std::make_unique<Pool>(
      policy_, runner_exe_, [this](const policy::Runtime& rt) { return warm_spec(rt); },
      [this](std::unique_ptr<RunnerProcess> r, const std::string& dir, const std::string& id) {
        retire(std::move(r), dir, id);
      });
}

size_t Jobs::expire() {
  const auto& r = policy_.retention;
  size_t files = store_.expire(r.inputs_ttl_s, r.artifacts_ttl_s);
  size_t rows = ledger_->expire(r.jobs_ttl_s);
  if (files || rows) spdlog::info("janitor: removed {} expired files and {} job records", files, rows);
  return files + rows;
}

void Jobs::retire(std::unique_ptr<RunnerProcess> runner, const std::string& scratch_dir, const std::string& id) {
  {
    std::lock_guard lock(reap_mu_);
    reap_queue_.push_back(std::make_unique<Finished>(Finished{std::move(runner), scratch_dir, id}));
  }
  reap_cv_.notify_one();
}

PoolStats Jobs::pool_stats() { return pool_ ? pool_->stats() : PoolStats{}; }

Jobs::~Jobs() {
  pool_.reset();  // its idle runners go to the reaper, which is still running
  janitor_.request_stop();
  janitor_ = std::jthread();
  {
    std::lock_guard lock(reap_mu_);
    stopping_ = true;
    if (spare_) reap_queue_.push_back(unused_spare(std::move(spare_)));
  }
  reap_cv_.notify_all();
  reaper_ = std::jthread();  // joins after the queue is empty
}

std::unique_ptr<Jobs::Finished> Jobs::unused_spare(std::unique_ptr<RunnerProcess> spare) {
  // EOF instead of a spec: the spare writes a sandbox_error line and exits.
  spare->close_stdin();
  return std::make_unique<Finished>(Finished{std::move(spare), "", "spare runner"});
}

util::Result<std::unique_ptr<RunnerProcess>> Jobs::take_runner() {
  std::unique_ptr<RunnerProcess> runner;
  {
    std::lock_guard lock(reap_mu_);
    runner = std::move(spare_);
  }
  // A spare that died while idle (killed from outside) has hung up its stdout.
  struct pollfd p {runner ? runner->stdout_fd() : -1, POLLIN, 0};
  if (runner && ::poll(&p, 1, 0) == 0) return runner;
  if (runner) {
    spdlog::warn("spare runner {} exited while idle; starting another", runner->pid());
    {
      std::lock_guard lock(reap_mu_);
      reap_queue_.push_back(unused_spare(std::move(runner)));
    }
    reap_cv_.notify_one();
  }
  return RunnerProcess::spawn(runner_exe_);
}

void Jobs::reap_loop() {
  for (;;) {
    std::unique_ptr<Finished> f;
    {
      std::unique_lock lock(reap_mu_);
      reap_cv_.wait(lock, [&] { return stopping_ || !reap_queue_.empty() || spare_wanted_; });
      if (spare_wanted_ && !stopping_ && reap_queue_.empty()) {
        // Only with nothing to reap: a job that took the spare is still
        // running, and a new runner's exec (about 2 ms of CPU) next to its
        // set-up would slow it down more than the spare saves.
        spare_wanted_ = false;
        lock.unlock();
        auto spare = RunnerProcess::spawn(runner_exe_);
        if (!spare) spdlog::warn("spare runner: {}", spare.error().message);
        lock.lock();
        if (spare && !stopping_ && !spare_) spare_ = std::move(*spare);
        else if (spare) reap_queue_.push_back(unused_spare(std::move(*spare)));
        continue;
      }
      if (reap_queue_.empty()) {
        if (stopping_) return;
        continue;
      }
      f = std::move(reap_queue_.front());
      reap_queue_.pop_front();
    }
    // Teardown is a few milliseconds; a runner stuck longer is killed (its
    // pid 1 dies with it through PR_SET_PDEATHSIG).
    if (!f->runner->wait_or_kill(10000))
      spdlog::warn("job {}: runner still tearing down after 10 s; killed it", f->job_id);
    if (!f->scratch_dir.empty()) {
      if (auto s = util::remove_tree(f->scratch_dir); !s)
        spdlog::warn("job {}: cleanup: {}", f->job_id, s.error().message);
      // A runner that was killed never removed its cgroup (named after the
      // scratch directory); one that finished did, and this is ENOENT.
      remove_cgroups(std::filesystem::path(f->scratch_dir).filename().string());
    }
    std::lock_guard lock(reap_mu_);
    if (!spare_ && !stopping_) spare_wanted_ = true;
  }
}

size_t Jobs::remove_cgroups(const std::string& sandbox_id) const {
  sandbox::cgroups::Host host = sandbox::cgroups::host_from_json(cgroup_host_);
  std::vector<std::string> bases;
  if (host.mode == "v2") bases.push_back(host.v2_base);
  for (auto& [_, base] : host.v1_base) bases.push_back(base);
  size_t removed = 0;
  // rmdir only succeeds on an empty cgroup; ENOENT when the runner removed it.
  for (auto& base : bases)
    if (::rmdir((base + "/job-" + sandbox_id).c_str()) == 0) ++removed;
  return removed;
}

size_t Jobs::reclaim_leftovers() {
  size_t removed = 0;
  std::error_code ec;
  // A crashed server's runners died with it (PR_SET_PDEATHSIG), and their
  // sandboxes with them; only their scratch directories and (empty) cgroups
  // remain, both named after the sandbox. Only this state directory's: the
  // cgroup base may be shared with other servers, whose runners create empty
  // cgroups a moment before they attach to them.
  for (auto& e : std::filesystem::directory_iterator(store_.state_dir() + "/run", ec)) {
    const std::string id = e.path().filename().string();
    if (auto s = util::remove_tree(e.path().string()); s) ++removed;
    else spdlog::warn("reclaim: {}", s.error().message);
    removed += remove_cgroups(id);
  }
  if (removed) spdlog::info("reclaimed {} leftovers of an earlier run", removed);
  if (size_t failed = ledger_->fail_interrupted("the server stopped while the job ran"); failed) {
    spdlog::warn("{} job(s) were running when the server last stopped: recorded as failed", failed);
    removed += failed;
  }
  return removed;
}

util::Result<sandbox::LaunchSpec> Jobs::resolve(const JobRequest& req, const std::string& job_id) {
  const policy::Limits& lim = policy_.limits;
  const policy::Runtime* rt = policy_.find_runtime(req.runtime);
  if (!rt) {
    std::string names;
    for (auto& n : policy_.available_runtimes()) names += (names.empty() ? "" : ", ") + n;
    return util::make_error("invalid_argument",
                            "runtime: \"" + req.runtime + "\" is not offered here; available: " + names);
  }
  if (req.code.size() > lim.code_max_bytes)
    return util::make_error("invalid_argument", "code: longer than the policy's " +
                                                    std::to_string(lim.code_max_bytes) + " bytes");
  double timeout_s = req.timeout_s.value_or(lim.timeout_s_default);
  if (!std::isfinite(timeout_s) || timeout_s <= 0 || timeout_s > lim.timeout_s_max)
    return util::make_error("invalid_argument",
                            "timeout_s: must be > 0 and at most " + std::to_string(static_cast<int>(lim.timeout_s_max)) +
                                " seconds (the policy's ceiling)");
  if (req.input_ids.size() > lim.inputs_per_job_max)
    return util::make_error("invalid_argument", "input_ids: more than " +
                                                    std::to_string(lim.inputs_per_job_max) + " inputs");

  sandbox::LaunchSpec spec = base_spec(*rt, job_id);
  std::set<std::string> names;
  for (const std::string& id : req.input_ids) {
    auto in = store_.get_input(req.tenant, id);
    if (!in) return util::make_error(in.error().code, "input_ids: \"" + id + "\": " + in.error().message);
    if (!names.insert(in->name).second)
      return util::make_error("invalid_argument", "input_ids: two inputs are both named \"" + in->name +
                                                      "\"; /inputs/<name> must be unique per run");
    spec.inputs.push_back({in->name, in->blob_path});
  }
  spec.argv.push_back(spec.code_path);
  spec.code = req.code;
  spec.timeout_ms = static_cast<uint64_t>(std::llround(timeout_s * 1000));
  return spec;
}

sandbox::LaunchSpec Jobs::base_spec(const policy::Runtime& rt, const std::string& id) const {
  const policy::Limits& lim = policy_.limits;
  sandbox::LaunchSpec spec;
  spec.job_id = id;
  spec.argv = rt.command;
  spec.code_path = "/work/" + rt.code_file;
  for (auto& [k, v] : policy_.sandbox.env) spec.env.push_back(k + "=" + v);
  spec.readonly_paths = policy_.sandbox.readonly_paths;
  spec.work_max_bytes = lim.work_max_bytes;
  spec.tmp_max_bytes = lim.tmp_max_bytes;
  spec.outputs_max_bytes = lim.outputs_max_bytes;
  spec.outputs_max_files = lim.outputs_max_files;
  spec.artifact_max_bytes = policy_.artifacts.file_max_bytes;
  spec.stdout_max_bytes = lim.stdout_max_bytes;
  spec.stderr_max_bytes = lim.stderr_max_bytes;
  // Never host uid 0: as root the sandbox user is the policy's unprivileged id.
  if (::geteuid() == 0) {
    spec.host_uid = policy_.sandbox.host_uid_when_root;
    spec.host_gid = policy_.sandbox.host_gid_when_root;
  } else {
    spec.host_uid = ::geteuid();
    spec.host_gid = ::getegid();
  }
  spec.scratch_dir = store_.state_dir() + "/run/" + id;
  spec.harvest_dir = spec.scratch_dir + "/outputs";
  spec.memory_max_bytes = lim.memory_max_bytes;
  spec.pids_max = lim.pids_max;
  spec.nofile_max = lim.nofile_max;
  spec.cpu_max_cores = lim.cpu_max_cores;
  spec.cgroup_host = cgroup_host_;
  spec.require_landlock = policy_.sandbox.require_landlock;
  spec.require_cgroups = policy_.sandbox.require_cgroups;
  spec.seccomp_bpf_base64 = seccomp_bpf_base64_;
  return spec;
}

util::Result<sandbox::LaunchSpec> Jobs::warm_spec(const policy::Runtime& rt) const {
  sandbox::LaunchSpec spec = base_spec(rt, util::random_id());
  const policy::Limits& lim = policy_.limits;
  if (rt.loader == "python") {
    spec.warm = "preload";
    spec.argv.push_back("-c");
    spec.argv.push_back(kPythonLoader);
  } else {
    spec.warm = "exec";
  }
  spec.argv.push_back(spec.code_path);
  // The job's own deadline comes with its claim; RLIMIT_CPU, the backstop,
  // is set for the longest a job may ask for.
  spec.timeout_ms = static_cast<uint64_t>(std::llround(lim.timeout_s_max * 1000));
  spec.inputs_max_files = lim.inputs_per_job_max;
  spec.inputs_max_bytes = lim.inputs_per_job_max * (lim.input_max_bytes + 4096);
  return spec;
}

util::Result<sandbox::Outcome> Jobs::start_runner(const sandbox::LaunchSpec& spec, const JobRequest& request,
                                                  std::unique_ptr<Finished>& finished,
                                                  const std::function<util::Status()>& before_start) {
  auto runner = take_runner();
  if (!runner) return runner.error();
  // The runner reads its whole spec before writing anything, so this cannot deadlock.
  const std::string line = to_json(spec).dump();
  bool wrote = (*runner)->write_line(line);
  if (!wrote) {
    // A spare that died just now (its end of the pipe closed): once more, fresh.
    (*runner)->close_stdin();
    retire(std::move(*runner), "", "dead runner");
    runner = RunnerProcess::spawn(runner_exe_);
    if (!runner) return runner.error();
    wrote = (*runner)->write_line(line);
  }
  // The runner builds the sandbox now, and starts the program only at EOF on
  // its stdin: what must happen first (the ledger record) happens meanwhile,
  // on the release thread. Writing the spec woke the runner's zygote on this
  // CPU (a pipe write wakes its reader on the writer's CPU), where it waited
  // while this thread wrote the record: 0.26 ms median in a sched trace of 26
  // jobs, 0.06 ms with the release thread.
  if (wrote && before_start) {
    // The release task owns what it touches (a copy of before_start, which
    // owns its own state, and the runner's shared control): it may outlive
    // this frame if exchange() throws (the progress callback is the client's).
    struct Release {
      std::function<util::Status()> before_start;
      std::shared_ptr<RunnerControl> runner;
      std::promise<util::Status> released;
    };
    auto state = std::make_shared<Release>(Release{before_start, (*runner)->control(), {}});
    std::future<util::Status> ready = state->released.get_future();
    auto release = [state] {
      util::Status s = state->before_start();
      // A failed record is a cancel at the start gate: the program never
      // starts, and the runner removes its cgroup and mount point as after
      // any job (a SIGKILL would leave them to the next start-up's reclaim).
      // Once the runner was reaped (its deadline passed) there is no one to signal.
      if (s) state->runner->close_stdin();
      else state->runner->signal(SIGTERM);
      state->released.set_value(std::move(s));
    };
    // However this frame is left, the record is made (or has failed) first.
    struct AwaitRelease {
      std::future<util::Status>& ready;
      ~AwaitRelease() {
        if (ready.valid()) ready.wait();
      }
    } await_release{ready};
    if (!release_.submit(release)) release();
    auto outcome = exchange(std::move(*runner), spec.scratch_dir, spec.job_id, spec.timeout_ms, request, finished);
    if (util::Status s = ready.get(); !s) return s.error();
    return outcome;
  }
  if (!wrote) {
    (*runner)->signal(SIGTERM);
    finished = std::make_unique<Finished>(Finished{std::move(*runner), spec.scratch_dir, spec.job_id});
    return util::make_error("internal", "writing the launch spec to the runner failed");
  }
  (*runner)->close_stdin();
  return exchange(std::move(*runner), spec.scratch_dir, spec.job_id, spec.timeout_ms, request, finished);
}

util::Result<sandbox::Outcome> Jobs::exchange(std::unique_ptr<RunnerProcess> runner, const std::string& scratch_dir,
                                              const std::string& job_id, uint64_t timeout_ms,
                                              const JobRequest& request, std::unique_ptr<Finished>& finished) {
  // The runner writes JSON lines: progress ({"progress": ...}) then the outcome.
  std::string text = runner->take_pending(), outcome_line;
  const int64_t deadline = now_ms() + static_cast<int64_t>(timeout_ms) + kRunnerGraceMs;
  char buf[65536];
  bool killed = false, cancel_sent = false;
  const int fd = runner->stdout_fd();
  const int cancel_fd = request.cancel ? request.cancel->fd() : -1;
  for (;;) {
    int64_t left = deadline - now_ms();
    if (left <= 0) {
      spdlog::error("job {}: runner did not finish {} ms after its deadline; killing it", job_id, kRunnerGraceMs);
      runner->signal(SIGKILL);  // PDEATHSIG then takes the sandbox down
      killed = true;
      break;
    }
    struct pollfd p[2] = {{fd, POLLIN, 0}, {cancel_sent ? -1 : cancel_fd, POLLIN, 0}};
    int r = ::poll(p, 2, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    if (p[1].revents) {
      // The runner kills the tree through pid 1 and reports "cancelled".
      runner->signal(SIGTERM);
      cancel_sent = true;
    }
    if (!p[0].revents) continue;
    long n = util::read_some(fd, buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kOutcomeMaxBytes) {
      runner->signal(SIGKILL);
      killed = true;
      break;
    }
    for (size_t nl; (nl = text.find('\n')) != std::string::npos;) {
      std::string line = text.substr(0, nl);
      text.erase(0, nl + 1);
      if (line.rfind("{\"progress\"", 0) == 0) {
        if (request.on_progress) {
          auto doc = nlohmann::json::parse(line, nullptr, false);
          if (!doc.is_discarded()) request.on_progress(doc["progress"]);
        }
      } else {
        outcome_line = std::move(line);
      }
    }
  }
  if (outcome_line.empty()) outcome_line = text;
  runner->close_stdout();
  if (killed) runner->wait_or_kill(0);
  finished = std::make_unique<Finished>(Finished{std::move(runner), scratch_dir, job_id});
  if (killed) return util::make_error("internal", "runner exceeded its deadline or output bound");
  auto doc = nlohmann::json::parse(outcome_line, nullptr, false);
  if (doc.is_discarded()) return util::make_error("internal", "runner exited without a readable outcome");
  return sandbox::outcome_from_json(doc);
}

std::vector<ArtifactSummary> Jobs::store_artifacts(const std::string& tenant, const std::string& job_id,
                                                   const sandbox::Outcome& outcome) {
  std::vector<ArtifactSummary> out;
  for (const sandbox::HarvestedFile& f : outcome.files) {
    ArtifactSummary a;
    a.name = f.name;
    a.size = f.size;
    if (!f.rejected.empty()) {
      a.verdict = "rejected";
      a.reason = f.rejected;
      a.media_type = "application/octet-stream";
      out.push_back(a);
      continue;
    }
    auto content = util::read_file(f.host_path, policy_.limits.outputs_max_bytes);
    if (!content) {
      a.verdict = "rejected";
      a.reason = "could not be read back: " + content.error().message;
      out.push_back(a);
      continue;
    }
    a.sha256 = util::sha256_hex(*content);
    artifacts::Verdict v = gate_.check(f.name, std::move(*content));
    a.verdict = v.verdict;
    a.reason = v.reason;
    a.media_type = v.verdict == "rejected" ? "application/octet-stream" : v.media_type;
    if (v.verdict == "rejected") {
      out.push_back(a);
      continue;
    }
    store::ArtifactRecord rec;
    rec.job_id = job_id;
    rec.name = f.name;
    rec.media_type = v.media_type;
    rec.verdict = v.verdict;
    rec.reason = v.reason;
    auto stored = store_.put_artifact(tenant, rec, v.content);
    if (!stored) {
      spdlog::error("job {}: storing artifact {}: {}", job_id, f.name, stored.error().message);
      a.verdict = "rejected";
      a.reason = "could not be stored";
    } else {
      a.artifact_id = stored->artifact_id;
      a.size = stored->size;      // sanitized content may differ from what the job wrote
      a.sha256 = stored->sha256;
    }
    out.push_back(a);
  }
  return out;
}

util::Result<JobResult> Jobs::run(const JobRequest& req) {
  if (auto s = store_.check_tenant(req.tenant); !s) return s.error();
  // The request's identity for idempotency: everything that changes what runs.
  nlohmann::json canonical{{"runtime", req.runtime}, {"code", req.code}, {"input_ids", req.input_ids},
                           {"timeout_s", req.timeout_s ? nlohmann::json(*req.timeout_s) : nlohmann::json(nullptr)}};
  const std::string request_sha256 = util::sha256_hex(canonical.dump());
  if (req.idempotency_key.empty()) return run_once(req, request_sha256);

  const std::string slot = req.tenant + '\0' + req.idempotency_key;
  auto conflict = [&] {
    return util::make_error("invalid_argument",
                            "idempotency_key: \"" + req.idempotency_key +
                                "\" was already used for a different request (runtime, code, input_ids or "
                                "timeout_s differ); use a new key for a new request");
  };
  std::shared_ptr<KeyedRun> run;
  bool first = false;
  {
    std::lock_guard lock(keys_mu_);
    auto it = keyed_runs_.find(slot);
    if (it != keyed_runs_.end()) {
      run = it->second;
    } else if (auto row = ledger_->find_by_key(req.tenant, req.idempotency_key)) {
      if (row->request_sha256 != request_sha256) return conflict();
      spdlog::info("job {}: replayed for a repeated idempotency key", row->job_id);
      return from_ledger(*row);
    } else {
      run = std::make_shared<KeyedRun>();
      run->request_sha256 = request_sha256;
      keyed_runs_[slot] = run;
      first = true;
    }
  }
  if (!first) {
    // A concurrent submission with the same key shares the first one's execution.
    if (run->request_sha256 != request_sha256) return conflict();
    std::unique_lock lock(run->mu);
    run->cv.wait(lock, [&] { return run->done; });
    if (!run->result) return run->error;
    return *run->result;
  }
  auto result = run_once(req, request_sha256);
  {
    std::lock_guard lock(run->mu);
    if (result) run->result = *result;
    else run->error = result.error();
    run->done = true;
  }
  run->cv.notify_all();
  {
    std::lock_guard lock(keys_mu_);
    keyed_runs_.erase(slot);
  }
  return result;
}

util::Result<JobResult> Jobs::run_once(const JobRequest& req, const std::string& request_sha256) {
  JobResult result;
  result.job_id = util::random_id();
  // Where a job's time goes outside the sandbox (debug log; bench/speed.py).
  const int64_t t_begin = now_us();
  auto spec = resolve(req, result.job_id);
  if (!spec) return spec.error();
  // A slot first: beyond the limits this answers busy at once.
  if (auto s = admission_.acquire(req.tenant, req.cancel); !s) {
    if (s.error().code != "cancelled") return s.error();
    result.outcome.status = "cancelled";
    result.outcome.error = "cancelled while waiting for a slot";
    return result;
  }
  struct Slot {
    Admission& a;
    const std::string& tenant;
    uint64_t cpu_ms = 0;
    ~Slot() { a.release(tenant, cpu_ms); }
  } slot{admission_, req.tenant};

  // The ledger knows of the job before it starts.
  LedgerRow row;
  row.job_id = result.job_id;
  row.tenant = req.tenant;
  row.runtime = req.runtime;
  row.code_sha256 = util::sha256_hex(req.code);
  row.inputs = nlohmann::json::array();
  for (auto& id : req.input_ids)
    if (auto in = store_.get_input(req.tenant, id))
      row.inputs.push_back({{"input_id", id}, {"name", in->name}, {"sha256", in->sha256}});
  row.limits = {{"timeout_ms", spec->timeout_ms}, {"memory_max_bytes", spec->memory_max_bytes},
                {"pids_max", spec->pids_max}, {"stdout_max_bytes", spec->stdout_max_bytes}};
  row.idempotency_key = req.idempotency_key;
  row.request_sha256 = request_sha256;
  const int64_t t_admitted = now_us();
  // What recording the start needs and leaves, owned by the record_start
  // closure: on the cold path it runs on the release thread.
  struct Start {
    Ledger& ledger;
    LedgerRow row;
    int64_t t_recorded = 0;
    std::optional<util::Error> error;
  };
  auto start = std::make_shared<Start>(Start{*ledger_, std::move(row), 0, std::nullopt});
  // Before any of the job's code can run; a cold runner builds its sandbox meanwhile.
  std::function<util::Status()> record_start = [start]() -> util::Status {
    auto s = start->ledger.record_start(start->row);
    start->t_recorded = now_us();
    if (s) return util::ok_status();
    start->error = util::Error{"internal", s.error().message};
    return util::make_error("internal", s.error().message);
  };

  std::unique_ptr<Finished> finished;
  spec->progress = static_cast<bool>(req.on_progress);
  util::Result<sandbox::Outcome> outcome = util::make_error("internal", "not started");
  int64_t t_outcome = 0;
  bool started = false;
  // A warm sandbox when the pool has one: it gets this job's code and inputs
  // and this job's deadline, and is destroyed afterwards like a cold one.
  if (std::unique_ptr<WarmSandbox> warm = pool_ ? pool_->claim(req.runtime) : nullptr) {
    sandbox::Claim claim{result.job_id, spec->code, spec->inputs, spec->timeout_ms, spec->progress};
    if (auto s = record_start(); !s) {
      warm->runner->close_stdin();  // released unclaimed
      retire(std::move(warm->runner), warm->spec.scratch_dir, warm->spec.job_id);
      return s.error();
    }
    if (warm->runner->write_line(to_json(claim).dump())) {
      warm->runner->close_stdin();
      spdlog::debug("job {}: warm sandbox {}", result.job_id, warm->spec.job_id);
      outcome = exchange(std::move(warm->runner), warm->spec.scratch_dir, result.job_id, spec->timeout_ms, req,
                         finished);
      started = true;
    } else {
      spdlog::warn("job {}: warm sandbox {} refused its claim; starting cold", result.job_id, warm->spec.job_id);
      warm->runner->close_stdin();
      retire(std::move(warm->runner), warm->spec.scratch_dir, warm->spec.job_id);
    }
  }
  if (!started) {
    // The runner's zygote makes the scratch directory (an ext4 mkdir here took
    // 0.11 ms before the spec could be written); its parent exists.
    outcome = start_runner(*spec, req, finished, start->t_recorded ? std::function<util::Status()>() : record_start);
  }
  if (start->error) {
    // Never recorded, never started: the call fails as a whole.
    if (finished) retire(std::move(finished->runner), finished->scratch_dir, finished->job_id);
    return *start->error;
  }
  if (outcome) {
    result.outcome = std::move(*outcome);
    t_outcome = now_us();
    result.artifacts = store_artifacts(req.tenant, result.job_id, result.outcome);
  } else {
    spdlog::error("job {}: {}", result.job_id, outcome.error().message);
    result.outcome.status = "sandbox_error";
    result.outcome.error = outcome.error().message;
  }
  if (result.outcome.status == "sandbox_error")
    spdlog::error("job {}: sandbox_error: {}", result.job_id, result.outcome.error);
  if (finished) {
    {
      std::lock_guard lock(reap_mu_);
      reap_queue_.push_back(std::move(finished));
    }
    reap_cv_.notify_one();
  } else if (!started) {
    if (auto s = util::remove_tree(spec->scratch_dir); !s)
      spdlog::warn("job {}: cleanup: {}", result.job_id, s.error().message);
  }
  slot.cpu_ms = result.outcome.cpu_ms;
  nlohmann::json recorded_outcome = sandbox::to_json(result.outcome);
  recorded_outcome["files"] = nlohmann::json::array();  // host paths of a scratch dir now gone
  const int64_t t_stored = now_us();
  if (auto s = ledger_->record_end(result.job_id, result.outcome.status,
                                   {{"outcome", recorded_outcome}, {"artifacts", artifacts_to_json(result.artifacts)}});
      !s)
    spdlog::error("job {}: ledger: {}", result.job_id, s.error().message);
  const int64_t t_end = now_us();
  metrics_.job_ended(result.outcome.status, static_cast<double>(t_end - t_admitted) / 1e6);
  for (auto& a : result.artifacts) metrics_.artifact_judged(a.verdict);
  spdlog::debug("job {} timings (us): resolve+admit {} ledger_start {} runner {} store {} ledger_end+cleanup {}",
                result.job_id, t_admitted - t_begin, start->t_recorded - t_admitted,
                (t_outcome ? t_outcome : t_stored) - start->t_recorded, t_outcome ? t_stored - t_outcome : 0, t_end - t_stored);
  std::string layers;
  for (auto& l : result.outcome.layers) layers += (layers.empty() ? "" : " ") + l;
  spdlog::info("job {} tenant={} runtime={} start={} status={} duration_ms={} layers=[{}]", result.job_id,
               req.tenant, req.runtime, result.outcome.start, result.outcome.status, result.outcome.duration_ms, layers);
  return result;
}

}  // namespace broker
