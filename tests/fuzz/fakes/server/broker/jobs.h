// Fuzz builds only (mcp_session): stands in for server/broker/jobs.h, ahead of
// it on the include path, so the session, the tools and the tasks registry
// compile unchanged against a broker that starts no runner and no sandbox.
// Keep run(), gate() and upload_media_type() as the real class declares them;
// the gate and the upload's type are worked out in this process.
#pragma once
#include <functional>
#include <string>

#include "server/artifacts/inspect.h"
#include "server/broker/job.h"
#include "server/broker/workspaces.h"
#include "server/policy/policy.h"
#include "server/store/store.h"
#include "server/util/result.h"

namespace broker {

class Jobs {
 public:
  using Runner = std::function<util::Result<JobResult>(const JobRequest& request)>;
  Jobs(artifacts::InProcessGate gate, Runner runner) : gate_(std::move(gate)), runner_(std::move(runner)) {}

  util::Result<JobResult> run(const JobRequest& request) { return runner_(request); }
  const artifacts::Gate& gate() const { return gate_.gate(); }
  std::string upload_media_type(const std::string& name, const std::string& content) {
    return artifacts::upload_media_type(name, content, gate_.sniffer(), gate_.gate().policy().allowed_media_types);
  }
  // The real registry over the harness's own ledger (set per epoch).
  void set_workspaces(Workspaces* w) { workspaces_ = w; }
  Workspaces& workspaces() { return *workspaces_; }
  util::Result<std::shared_ptr<WorkspaceUse>> hold_workspace(const std::string& tenant, const std::string& id) {
    return workspaces_->begin(tenant, id);
  }

 private:
  Workspaces* workspaces_ = nullptr;
  artifacts::InProcessGate gate_;
  Runner runner_;
};

}  // namespace broker
