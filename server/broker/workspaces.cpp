// Workspaces (workspaces.h). Paths are built from ids only after they are
// checked to be random_id()s: nothing a client sends becomes a path.
#include "server/broker/workspaces.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <spdlog/spdlog.h>
#include <vector>

#include "server/util/fs.h"
#include "server/util/random.h"
#include "server/util/text.h"
#include "server/util/wall_clock.h"

namespace broker {

const char* const kUnknownWorkspace =
    "unknown workspace_id (it does not exist, has expired, was closed, or belongs to another tenant)";

namespace {

// On a shared root, how old a tree no open workspace names must be before a
// starting server takes it for a crash's leftover.
constexpr time_t kSharedStrayAgeS = 3600;

bool well_formed_id(const std::string& id) {
  return id.size() == 32 && id.find_first_not_of("0123456789abcdef") == std::string::npos;
}

util::Error unknown() { return util::make_error(util::ErrorCode::kNotFound, kUnknownWorkspace); }

util::Error in_use(const std::string& id, const char* what) {
  return util::make_error(util::ErrorCode::kBusy, "busy: workspace " + id + " is in use by another call; " + what);
}

}  // namespace

nlohmann::json to_json(const WorkspaceInfo& info) {
  return {{"workspace_id", info.workspace_id},
          {"expires_at", util::iso8601(info.expires_ms)},
          {"ttl_s", info.ttl_s},
          {"size_max_bytes", info.size_max_bytes},
          {"size_bytes", info.size_bytes}};
}

Workspaces::Workspaces(const policy::Workspaces& policy, std::string root, Ledger& ledger, RemoveTree remove_tree)
    : policy_(policy),
      root_(std::move(root)),
      ledger_(ledger),
      remove_tree_(remove_tree ? std::move(remove_tree) : RemoveTree(util::remove_tree)) {
  if (auto s = util::make_dirs(root_, 0700); !s) throw std::runtime_error("workspaces: " + s.error().message);
}

std::optional<Workspaces::Doomed> Workspaces::retire_locked(const WorkspaceRow& row, const char* by) {
  if (busy_.count(row.workspace_id) || !well_formed_id(row.workspace_id)) return std::nullopt;
  auto closed = ledger_.workspace_close(row.tenant, row.workspace_id, util::wall_ms(), by);
  if (!closed || !*closed) return std::nullopt;
  // Renamed aside first: the id's path is free at once, and reclaim() removes
  // a tree a crash left there (no open row has that name).
  Doomed d{row.tenant, row.workspace_id, root_ + "/" + row.workspace_id + ".gone-" + util::random_id()};
  if (::rename((root_ + "/" + row.workspace_id).c_str(), d.path.c_str()) != 0) {
    if (errno != ENOENT)
      spdlog::error("workspace {}: {}", row.workspace_id, util::call_error("rename", row.workspace_id, errno));
    d.path = root_ + "/" + row.workspace_id;  // deleted in place
  }
  ++deleting_[row.tenant];
  return d;
}

std::vector<Workspaces::Doomed> Workspaces::retire_expired_locked(const std::string& tenant) {
  std::vector<Doomed> out;
  for (const WorkspaceRow& row : ledger_.workspace_expired(util::wall_ms()))
    if (tenant.empty() || row.tenant == tenant)
      if (auto d = retire_locked(row, "expired")) out.push_back(std::move(*d));
  return out;
}

void Workspaces::delete_trees(const std::vector<Doomed>& doomed) {
  for (const Doomed& d : doomed) {
    if (auto s = remove_tree_(d.path); !s) spdlog::error("workspace {}: {}", d.workspace_id, s.error().message);
    std::lock_guard lock(mu_);
    if (auto it = deleting_.find(d.tenant); it != deleting_.end() && --it->second == 0) deleting_.erase(it);
  }
}

uint64_t Workspaces::count_locked(const std::string& tenant) {
  auto it = deleting_.find(tenant);
  return ledger_.workspace_count(tenant) + (it == deleting_.end() ? 0 : it->second);
}

uint64_t Workspaces::count(const std::string& tenant) {
  std::lock_guard lock(mu_);
  return count_locked(tenant);
}

util::Result<WorkspaceInfo> Workspaces::open(const std::string& tenant, std::optional<double> ttl_s) {
  uint64_t ttl = policy_.ttl_s_default;
  if (ttl_s) {
    if (!std::isfinite(*ttl_s) || *ttl_s < 1 || *ttl_s > static_cast<double>(policy_.ttl_s_max))
      return util::make_error(util::ErrorCode::kInvalidArgument, "ttl_s: must be between 1 and " +
                                                                     std::to_string(policy_.ttl_s_max) +
                                                                     " seconds (the policy's workspaces.ttl_s.max)");
    ttl = static_cast<uint64_t>(std::llround(*ttl_s));
  }
  // This tenant's expired workspaces are gone before it may open another:
  // until its tree is deleted, an expired one still counts.
  std::vector<Doomed> expired;
  {
    std::lock_guard lock(mu_);
    expired = retire_expired_locked(tenant);
  }
  delete_trees(expired);
  std::lock_guard lock(mu_);
  const int64_t now = util::wall_ms();
  if (uint64_t open = count_locked(tenant); open >= policy_.per_tenant_max)
    return util::make_error(util::ErrorCode::kBusy, "busy: this tenant has " + std::to_string(open) +
                                                        " open workspaces, the policy's workspaces.per_tenant_max; "
                                                        "close one (close_workspace) first");
  WorkspaceRow row;
  row.workspace_id = util::random_id();
  row.tenant = tenant;
  row.created_ms = now;
  row.ttl_ms = static_cast<int64_t>(ttl) * 1000;
  row.expires_ms = now + row.ttl_ms;
  const std::string dir = root_ + "/" + row.workspace_id;
  if (::mkdir(dir.c_str(), 0700) != 0)
    return util::make_error(util::ErrorCode::kIo, util::call_error("mkdir", dir, errno));
  if (auto s = ledger_.workspace_insert(row); !s) {
    (void)util::remove_tree(dir);
    return s.error();
  }
  spdlog::info("workspace {} opened by tenant {} (ttl {} s)", row.workspace_id, tenant, ttl);
  return WorkspaceInfo{row.workspace_id, row.expires_ms, ttl, policy_.size_max_bytes, 0};
}

util::Status Workspaces::close(const std::string& tenant, const std::string& id) {
  if (!well_formed_id(id)) return unknown();
  std::vector<Doomed> doomed;
  util::Status answer = util::ok_status();
  {
    std::lock_guard lock(mu_);
    doomed = retire_expired_locked(tenant);
    auto row = ledger_.workspace_find(tenant, id, util::wall_ms());
    if (!row) {
      answer = unknown();
    } else if (busy_.count(id)) {
      answer = in_use(id, "close it once that call has returned");
    } else if (auto d = retire_locked(*row, "close_workspace")) {
      doomed.push_back(std::move(*d));
      spdlog::info("workspace {} closed by tenant {}", id, tenant);
    } else if (ledger_.shared() && ledger_.workspace_find(tenant, id, util::wall_ms())) {
      answer = in_use(id, "a call on another server holds it; close it once that call has returned");
    } else {
      answer = unknown();
    }
  }
  delete_trees(doomed);
  return answer;
}

util::Result<std::shared_ptr<WorkspaceUse>> Workspaces::begin(const std::string& tenant, const std::string& id) {
  if (!well_formed_id(id)) return unknown();
  std::unique_lock lock(mu_);
  auto row = ledger_.workspace_find(tenant, id, util::wall_ms());
  if (!row) {
    // Likely expired: its tree, and any other expired one of the tenant's, goes now.
    std::vector<Doomed> expired = retire_expired_locked(tenant);
    lock.unlock();
    delete_trees(expired);
    return unknown();
  }
  if (busy_.count(id)) return in_use(id, "calls on one workspace run one at a time: retry when it has returned");
  busy_.insert(id);
  lock.unlock();
  // Across servers sharing the ledger: its hold there, taken without the
  // lock every call here takes (a round trip to the database).
  auto held = ledger_.workspace_hold(tenant, id);
  if (!held || !*held) {
    std::lock_guard relock(mu_);
    busy_.erase(id);
    if (!held) return held.error();
    return in_use(id,
                  "a call on another server holds it; calls on one workspace run one at a time: retry when it "
                  "has returned");
  }
  const std::string dir = root_ + "/" + id;
  restore_half_swapped(id);
  // A tree someone removed under a live row: the workspace is empty again.
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    const util::Error e = util::make_error(util::ErrorCode::kIo, util::call_error("mkdir", dir, errno));
    ledger_.workspace_unhold(id);
    std::lock_guard relock(mu_);
    busy_.erase(id);
    return e;
  }
  return std::shared_ptr<WorkspaceUse>(new WorkspaceUse(*this, *row, dir, dir + ".next-" + util::random_id()));
}

void Workspaces::restore_half_swapped(const std::string& id) {
  // A server that stopped between release()'s two renames left the tree
  // under its .old- name; the holder of the workspace puts it back.
  const std::string dir = root_ + "/" + id;
  if (::access(dir.c_str(), F_OK) == 0) return;
  DIR* d = ::opendir(root_.c_str());
  if (!d) return;
  std::string found;
  while (struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(id + ".old-", 0) == 0) found = name;
  }
  ::closedir(d);
  if (!found.empty() && ::rename((root_ + "/" + found).c_str(), dir.c_str()) == 0)
    spdlog::warn("workspace {}: its tree was left half-swapped; restored", id);
}

void Workspaces::release(WorkspaceUse& use, bool saved, uint64_t size_bytes, WorkspaceInfo* info) {
  const std::string& dir = use.dir_;
  const std::string old = dir + ".old-" + use.next_.substr(use.next_.rfind('-') + 1);
  if (saved) {
    // The job's copy replaces the tree in two renames; a crash between them
    // leaves both under root, and reclaim() keeps neither half-swapped name.
    if (::rename(dir.c_str(), old.c_str()) != 0 && errno != ENOENT) {
      spdlog::error("workspace {}: {}", use.id_, util::call_error("rename", dir, errno));
      saved = false;
    } else if (::rename(use.next_.c_str(), dir.c_str()) != 0) {
      spdlog::error("workspace {}: {}", use.id_, util::call_error("rename", use.next_, errno));
      (void)::rename(old.c_str(), dir.c_str());
      saved = false;
    }
  }
  (void)util::remove_tree(old);
  (void)util::remove_tree(use.next_);
  const int64_t expires = util::wall_ms() + use.row_.ttl_ms;
  uint64_t size = saved ? size_bytes : use.row_.size_bytes;
  if (auto s = ledger_.workspace_used(use.id_, size, expires); !s)
    spdlog::error("workspace {}: ledger: {}", use.id_, s.error().message);
  ledger_.workspace_unhold(use.id_);
  if (info)
    *info = WorkspaceInfo{use.id_, std::max(expires, use.row_.expires_ms),
                          static_cast<uint64_t>(use.row_.ttl_ms / 1000), policy_.size_max_bytes, size};
  std::lock_guard lock(mu_);
  busy_.erase(use.id_);
}

WorkspaceInfo WorkspaceUse::finish(bool saved, uint64_t size_bytes) {
  WorkspaceInfo info;
  finished_ = true;
  owner_.release(*this, saved, size_bytes, &info);
  return info;
}

WorkspaceUse::~WorkspaceUse() {
  if (!finished_) owner_.release(*this, false, 0, nullptr);
}

size_t Workspaces::expire(uint64_t forget_after_s) {
  std::vector<Doomed> expired;
  {
    std::lock_guard lock(mu_);
    expired = retire_expired_locked("");
  }
  delete_trees(expired);
  for (const Doomed& d : expired)
    spdlog::info("workspace {} of tenant {} expired and was deleted", d.workspace_id, d.tenant);
  ledger_.workspace_forget(forget_after_s);
  return expired.size();
}

size_t Workspaces::reclaim() {
  std::lock_guard lock(mu_);
  std::set<std::string> open;
  for (auto& id : ledger_.workspace_open_ids()) open.insert(id);
  size_t removed = 0;
  DIR* d = ::opendir(root_.c_str());
  if (!d) return 0;
  std::set<std::string> names;
  while (struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.insert(name);
  }
  ::closedir(d);
  if (ledger_.shared()) {
    // Other servers use this root now: only what no open workspace names and
    // nobody touched for an hour is a crash's leftover (a half-swapped tree
    // goes back when its workspace is next held: restore_half_swapped).
    for (auto& name : names) {
      if (open.count(name.substr(0, name.find('.')))) continue;
      struct stat st {};
      const std::string path = root_ + "/" + name;
      if (::lstat(path.c_str(), &st) != 0 || ::time(nullptr) - st.st_mtime < kSharedStrayAgeS) continue;
      if (util::remove_tree(path)) ++removed;
    }
    if (removed) spdlog::info("workspaces: removed {} stray trees at start-up", removed);
    return removed;
  }
  // A crash between release()'s two renames left the tree under its .old- name.
  for (auto& id : open) {
    if (names.count(id)) continue;
    for (auto& name : names)
      if (name.rfind(id + ".old-", 0) == 0 && ::rename((root_ + "/" + name).c_str(), (root_ + "/" + id).c_str()) == 0) {
        names.erase(name);
        names.insert(id);
        break;
      }
  }
  for (auto& name : names) {
    if (open.count(name) || busy_.count(name)) continue;
    if (util::remove_tree(root_ + "/" + name)) ++removed;
  }
  if (removed) spdlog::info("workspaces: removed {} stray trees at start-up", removed);
  return removed;
}

}  // namespace broker
