// A job's runner from start to outcome, on the job's worker thread: cold (a
// runner gets the whole spec; its start gate opens on the release thread once
// the ledger has the job) or warm (a pooled sandbox gets the job's claim).
// The runner is left in `finished` for the fleet's reaper.
#pragma once
#include <functional>
#include <memory>

#include "server/broker/identities.h"
#include "server/broker/job.h"
#include "server/broker/pool.h"
#include "server/broker/runner_fleet.h"
#include "server/sandbox/spec.h"
#include "server/util/result.h"
#include "server/util/worker_pool.h"

namespace broker {

// identity: the spec's host uid, held by the runner until it is reaped.
// spec: moved to the spare runner's sandbox when the spare is taken (its
// job_id, scratch and harvest directories change; move_to_sandbox).
// before_start (may be empty) runs on `release` while the runner builds the
// sandbox, before the program may start; its error cancels the runner at the
// start gate and is returned. It must own what it uses: it may outlive the call.
util::Result<sandbox::Outcome> start_cold(RunnerFleet& fleet, util::WorkerPool& release, sandbox::LaunchSpec& spec,
                                          IdentityLease identity, const JobRequest& request,
                                          const std::function<util::Status()>& before_start,
                                          std::unique_ptr<FinishedRunner>& finished);

struct WarmStart {
  bool started = false;  // false: no warm sandbox took the job; run it cold
  util::Result<sandbox::Outcome> outcome = util::make_error(util::ErrorCode::kInternal, "not started");
};
// The warm claim. record_start runs first, on this thread; when it fails the
// sandbox is retired unclaimed and nothing is started.
WarmStart start_warm(Pool& pool, RunnerFleet& fleet, const sandbox::LaunchSpec& spec, const JobRequest& request,
                     const std::function<util::Status()>& record_start, std::unique_ptr<FinishedRunner>& finished);

}  // namespace broker
