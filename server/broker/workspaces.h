// Workspaces: a tenant's /work kept between the run_code calls that name it
// (docs/tools.md, Workspaces). Between calls a workspace is a directory tree under
// <store>/workspaces/<id> (0700, the server's user; the store is the state
// directory unless servers share one, and then so is the hold below), written only by a
// runner's copy of a job's /work (sandbox/workspace_copy); during a call it
// is that job's /work tmpfs, so its cap holds while the job writes. One call
// at a time: a second is busy at once (across servers that share a ledger,
// through its hold row: Ledger::workspace_hold). The ledger records open, each use and
// close; an unknown, expired, closed or foreign id reads exactly alike.
// A workspace counts toward its tenant's per_tenant_max until its tree is
// gone, expired or not; an expired one is deleted as soon as it is seen (its
// tenant's next open, call or close, or the janitor). Trees are deleted
// outside the lock every call takes: one tenant's deletion never stalls another.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <vector>
#include <string>

#include <nlohmann/json.hpp>

#include "server/broker/ledger.h"
#include "server/policy/policy.h"
#include "server/util/result.h"

namespace broker {

// What open_workspace answers and run_code's result repeats.
struct WorkspaceInfo {
  std::string workspace_id;
  int64_t expires_ms = 0;  // wall clock
  uint64_t ttl_s = 0;
  uint64_t size_max_bytes = 0;
  uint64_t size_bytes = 0;
};

class Workspaces;

// A workspace held by one call. Destroyed without finish(): released, the
// workspace as it was (the job's copy, if any, is dropped).
class WorkspaceUse {
 public:
  ~WorkspaceUse();
  WorkspaceUse(const WorkspaceUse&) = delete;
  WorkspaceUse& operator=(const WorkspaceUse&) = delete;
  const std::string& id() const { return id_; }
  const std::string& dir() const { return dir_; }        // copied into the job's /work
  const std::string& next_dir() const { return next_; }  // the runner writes the job's /work here
  // The job ended: its copy becomes the workspace when saved; the expiry moves on.
  WorkspaceInfo finish(bool saved, uint64_t size_bytes);

 private:
  friend class Workspaces;
  WorkspaceUse(Workspaces& owner, WorkspaceRow row, std::string dir, std::string next)
      : owner_(owner), row_(std::move(row)), id_(row_.workspace_id), dir_(std::move(dir)), next_(std::move(next)) {}
  Workspaces& owner_;
  WorkspaceRow row_;
  std::string id_, dir_, next_;
  bool finished_ = false;
};

class Workspaces {
 public:
  // How a tree is deleted (util::remove_tree; a test's may block).
  using RemoveTree = std::function<util::Status(const std::string& path)>;
  // root: <state>/workspaces, made 0700 if missing.
  Workspaces(const policy::Workspaces& policy, std::string root, Ledger& ledger, RemoveTree remove_tree = {});

  util::Result<WorkspaceInfo> open(const std::string& tenant, std::optional<double> ttl_s);
  util::Status close(const std::string& tenant, const std::string& workspace_id);
  // For one call: kNotFound (the unknown text), or kBusy while another call holds it.
  util::Result<std::shared_ptr<WorkspaceUse>> begin(const std::string& tenant, const std::string& workspace_id);
  // The janitor: expired workspaces closed and deleted (not one in use), and
  // the rows of those closed more than forget_after_s ago.
  size_t expire(uint64_t forget_after_s);
  // Open workspaces of the tenant and trees of its still being deleted.
  uint64_t count(const std::string& tenant);
  // Start-up: every directory under root that is not an open workspace's
  // (a crash's half-swapped copies, a deleted row's tree) is removed.
  size_t reclaim();

  uint64_t size_max_bytes() const { return policy_.size_max_bytes; }

 private:
  friend class WorkspaceUse;
  void release(WorkspaceUse& use, bool saved, uint64_t size_bytes, WorkspaceInfo* info);
  // A tree moved aside under the lock, deleted outside it.
  struct Doomed {
    std::string tenant, workspace_id, path;
  };
  // Under mu_: the row closed and the tree renamed aside (no file is
  // touched), counted in deleting_ until delete_trees has removed it.
  std::optional<Doomed> retire_locked(const WorkspaceRow& row, const char* by);
  // Under mu_: every expired workspace of the tenant ("" : of every tenant) not in use.
  std::vector<Doomed> retire_expired_locked(const std::string& tenant);
  // Without mu_: the trees deleted, then uncounted.
  void delete_trees(const std::vector<Doomed>& doomed);
  uint64_t count_locked(const std::string& tenant);
  // Held: the tree a stopped server left under its .old- name put back.
  void restore_half_swapped(const std::string& id);

  const policy::Workspaces& policy_;
  const std::string root_;
  Ledger& ledger_;
  RemoveTree remove_tree_;
  std::mutex mu_;                             // orders begin, close and expire over busy_, deleting_ and the rows
  std::set<std::string> busy_;                // ids a call holds
  std::map<std::string, uint64_t> deleting_;  // tenant -> trees closed and not yet deleted
};

nlohmann::json to_json(const WorkspaceInfo& info);
// The answer to any id that is not an open workspace of the caller's.
extern const char* const kUnknownWorkspace;

}  // namespace broker
