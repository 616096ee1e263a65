// Host identities for sandboxes. As root every live sandbox gets a
// host uid and gid of its own from the policy's sandbox.uid_range, and its
// user namespace is owned by that uid: the kernel charges what a job holds
// (processes, queued signals, inotify instances, POSIX queue bytes, pipe
// buffers) to that uid, not to root, so no job can use up another's or the
// host's. A normal user cannot take other uids: every sandbox maps to the
// server's own uid, and the per-job shares of the per-user limits (rlimits,
// the user namespace's ucount limits) are what keeps one job from starving
// the others (docs/boundary.md). A normal user with subordinate ids
// (/etc/subuid and /etc/subgid, and newuidmap/newgidmap installed) gives each
// sandbox one of those: the runner maps it into a user namespace of its own
// between the host and the sandbox's, where it acts as a root server would.
#pragma once
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "server/policy/policy.h"
#include "server/sandbox/namespaces.h"
#include "server/util/fd.h"
#include "server/util/result.h"

namespace broker {

struct Identity {
  uint32_t uid = 0;
  uint32_t gid = 0;
  bool own_user_ns = false;  // the sandbox's user namespace is created with euid = uid (root servers)
  bool subordinate = false;  // uid/gid are the server user's subordinate ids (newuidmap)
};

// Held while the sandbox may live: the uid is free again only once the lease
// is destroyed (with the runner, after it was reaped). The hold is a bound
// abstract unix socket named after the uid: two servers on one host (one
// network namespace) never lease the same uid, and a dead server's holds
// vanish with it.
class IdentityLease {
 public:
  IdentityLease() = default;
  IdentityLease(Identity id, util::UniqueFd hold) : id_(id), hold_(std::move(hold)) {}
  const Identity& identity() const { return id_; }

 private:
  Identity id_;
  util::UniqueFd hold_;
};

class Identities {
 public:
  // euid 0: the policy's range, refused when an account or a subordinate id
  // range in etc_dir's passwd, group, subuid or subgid uses any id of it.
  // Otherwise the user's first subordinate uid and gid ranges when it has
  // both and `id_mapper` (newuidmap's path; its newgidmap beside it) is
  // executable, else the server's own ids, shared by all sandboxes.
  static util::Result<Identities> make(const policy::Policy& policy, uint32_t euid, uint32_t egid,
                                       const std::string& etc_dir = "/etc",
                                       const std::string& id_mapper = sandbox::namespaces::kNewuidmap);
  Identities(Identities&& o) noexcept
      : per_sandbox_(o.per_sandbox_),
        subordinate_(o.subordinate_),
        first_(o.first_),
        count_(o.count_),
        gid_first_(o.gid_first_),
        why_shared_(std::move(o.why_shared_)),
        shared_(o.shared_),
        cursor_(o.cursor_.load()) {}

  bool per_sandbox() const { return per_sandbox_; }
  bool subordinate() const { return subordinate_; }
  // Why a normal user's sandboxes share its uid (for doctor); empty otherwise.
  const std::string& why_shared() const { return why_shared_; }
  uint32_t first() const { return first_; }
  uint32_t count() const { return count_; }
  // kBusy when every uid of the range is held (by this server or another).
  util::Result<IdentityLease> lease();

 private:
  Identities() = default;
  bool per_sandbox_ = false;
  bool subordinate_ = false;
  uint32_t first_ = 0, count_ = 0;
  uint32_t gid_first_ = 0;  // subordinate: the gid range's start (a root range uses uid == gid)
  std::string why_shared_;
  Identity shared_;
  std::atomic<uint32_t> cursor_{0};  // the next uid tried: round robin, so a freed uid rests before reuse
};

// The first line of an account file (passwd/group: "name:x:id:...";
// subuid/subgid: "name:start:count") whose id or range meets
// [first, first + count), as "file: line"; nullopt when none does.
// The first "name:start:count" line of a subuid/subgid text for this user
// (by name or by uid number), as {start, count}.
std::optional<std::pair<uint32_t, uint32_t>> subordinate_range(std::string_view text, std::string_view name,
                                                               uint32_t id);

std::optional<std::string> range_conflict(std::string_view file_name, std::string_view text, bool subordinate,
                                          uint32_t first, uint32_t count);

}  // namespace broker
