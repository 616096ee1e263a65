// Starting a job's runner. The spec (or claim) crosses as one JSON line; the
// runner reads all of it before it writes, so writing first cannot deadlock.
#include "server/broker/job_launch.h"

#include <signal.h>

#include <cerrno>
#include <future>

#include <spdlog/spdlog.h>

#include "server/broker/job_spec.h"
#include "server/broker/runner_protocol.h"
#include "server/util/call_trace.h"
#include "server/util/text.h"

namespace broker {
namespace {

util::Result<sandbox::Outcome> read_and_finish(std::unique_ptr<RunnerProcess> runner, const std::string& scratch_dir,
                                               const std::string& job_id, uint64_t timeout_ms,
                                               const JobRequest& request, std::unique_ptr<FinishedRunner>& finished) {
  // Handed over first: if the progress callback throws, the reaper still gets the runner.
  RunnerProcess& r = *runner;
  finished = std::make_unique<FinishedRunner>(FinishedRunner{std::move(runner), scratch_dir, job_id});
  return read_outcome(r, job_id, timeout_ms, request.cancel ? request.cancel->fd() : -1, request.on_progress,
                      request.on_listener);
}

}  // namespace

util::Result<sandbox::Outcome> start_cold(RunnerFleet& fleet, util::WorkerPool& release, sandbox::LaunchSpec& spec,
                                          IdentityLease identity, const JobRequest& request,
                                          const std::function<util::Status()>& before_start,
                                          std::unique_ptr<FinishedRunner>& finished) {
  auto runner = fleet.take();
  if (!runner) return runner.error();
  const std::string own_id = spec.job_id;  // names the job in log lines and traces
  if (!(*runner)->prepared_id().empty()) move_to_sandbox(spec, (*runner)->prepared_id());
  bool wrote = (*runner)->write_line(to_json(spec).dump());
  if (!wrote) {
    // A spare that died just now (its end of the pipe closed): once more, fresh,
    // in a sandbox of the spec's own id (the spare's goes with the spare).
    (*runner)->close_stdin();
    std::string dead_dir = fleet.scratch_dir_of(**runner);
    fleet.retire(FinishedRunner{std::move(*runner), std::move(dead_dir), "dead runner"});
    move_to_sandbox(spec, own_id);
    runner = fleet.spawn();
    if (!runner) return runner.error();
    wrote = (*runner)->write_line(to_json(spec).dump());
  }
  (*runner)->hold(std::move(identity));
  if (!wrote) {
    const int err = errno;  // before the signal call
    (*runner)->signal(SIGTERM);
    finished = std::make_unique<FinishedRunner>(FinishedRunner{std::move(*runner), spec.scratch_dir, own_id});
    return util::make_error(util::ErrorCode::kInternal, util::call_error("write", "launch spec to the runner", err));
  }
  util::call_mark("spec written", own_id);
  if (!before_start) {
    (*runner)->close_stdin();
    return read_and_finish(std::move(*runner), spec.scratch_dir, own_id, spec.timeout_ms, request, finished);
  }
  // The runner builds the sandbox now, and starts the program only at EOF on
  // its stdin: what must happen first (the ledger record) happens meanwhile,
  // on the release thread. Writing the spec woke the runner's zygote on this
  // CPU (a pipe write wakes its reader on the writer's CPU), where it waited
  // while this thread wrote the record: 0.26 ms median in a sched trace of 26
  // jobs, 0.06 ms with the release thread.
  //
  // The release task owns what it touches (a copy of before_start, which owns
  // its own state, and the runner's shared control), so it may outlive this
  // frame; a signal from it cannot reach a runner that was already reaped.
  struct Release {
    std::function<util::Status()> before_start;
    std::shared_ptr<RunnerControl> runner;
    std::promise<util::Status> released;
  };
  auto state = std::make_shared<Release>(Release{before_start, (*runner)->control(), {}});
  std::future<util::Status> ready = state->released.get_future();
  auto release_runner = [state] {
    util::Status s = state->before_start();
    // A failed record is a cancel at the start gate: the program never
    // starts, and the runner removes its cgroup and mount point as after
    // any job (a SIGKILL would leave them to the next start-up's reclaim).
    if (s)
      state->runner->close_stdin();
    else
      state->runner->signal(SIGTERM);
    state->released.set_value(std::move(s));
  };
  // However this frame is left (the progress callback may throw), the record
  // is made, or has failed, before the caller goes on.
  struct AwaitRelease {
    std::future<util::Status>& ready;
    ~AwaitRelease() {
      if (ready.valid()) ready.wait();
    }
  } await_release{ready};
  if (!release.submit(release_runner)) release_runner();
  auto outcome = read_and_finish(std::move(*runner), spec.scratch_dir, own_id, spec.timeout_ms, request, finished);
  if (util::Status s = ready.get(); !s) return s.error();
  return outcome;
}

WarmStart start_warm(Pool& pool, RunnerFleet& fleet, const sandbox::LaunchSpec& spec, const JobRequest& request,
                     const std::function<util::Status()>& record_start, std::unique_ptr<FinishedRunner>& finished) {
  WarmStart out;
  std::unique_ptr<WarmSandbox> warm = pool.claim(request.runtime);
  if (!warm) return out;
  // It gets this job's code, inputs and deadline, and is destroyed afterwards like a cold one.
  sandbox::Claim claim{spec.job_id,  spec.code,   spec.inputs,       spec.timeout_ms,   spec.progress,
                       spec.network, spec.ca_env, spec.workspace_in, spec.workspace_out};
  if (auto s = record_start(); !s) {
    warm->runner->close_stdin();  // released unclaimed
    fleet.retire(FinishedRunner{std::move(warm->runner), warm->spec.scratch_dir, warm->spec.job_id});
    out.outcome = s.error();
    return out;
  }
  if (!warm->runner->write_line(to_json(claim).dump())) {
    spdlog::warn("job {}: warm sandbox {} refused its claim; starting cold", spec.job_id, warm->spec.job_id);
    warm->runner->close_stdin();
    fleet.retire(FinishedRunner{std::move(warm->runner), warm->spec.scratch_dir, warm->spec.job_id});
    return out;
  }
  warm->runner->close_stdin();
  util::call_mark("claim written", spec.job_id);
  spdlog::debug("job {}: warm sandbox {}", spec.job_id, warm->spec.job_id);
  out.started = true;
  out.outcome =
      read_and_finish(std::move(warm->runner), warm->spec.scratch_dir, spec.job_id, spec.timeout_ms, request, finished);
  return out;
}

}  // namespace broker
