// Finding, making and removing the server's cgroup directory. Runs in the server
// (serve, doctor) at start-up before any thread exists, and at exit. It never
// removes a directory whose server may be alive: only names of this pid
// namespace whose pid is gone or was reused are reclaimed.
#include "server/sandbox/cgroup_host.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "server/util/fd.h"
#include "server/util/fs.h"
#include "server/util/text.h"

namespace sandbox::cgroup_host {
namespace {

constexpr const char* kControllers[] = {"memory", "pids", "cpu"};
constexpr const char* kV1Controllers[] = {"memory", "pids", "cpu", "cpuacct"};
constexpr const char* kRootPrefix = "server-";                // under <mount>/throwbox (root)
constexpr const char* kDelegatedPrefix = "throwbox-server-";  // in a delegated cgroup
constexpr int kKillTimeoutMs = 2000;
// An old server's runner made job-* directly under the base and attached to it
// at once: one still empty after this long was abandoned.
constexpr int kLegacyJobAgeS = 60;

using cgroups::read_small;
using cgroups::write_file;

std::vector<std::string> words(const std::string& text, char sep = ' ') {
  std::vector<std::string> out;
  std::string w;
  for (char c : text) {
    if (c == sep || c == '\n' || c == ' ') {
      if (!w.empty()) out.push_back(w);
      w.clear();
    } else {
      w += c;
    }
  }
  if (!w.empty()) out.push_back(w);
  return out;
}

bool has_word(const std::string& text, const std::string& word, char sep = ' ') {
  for (auto& w : words(text, sep))
    if (w == word) return true;
  return false;
}

// Exact names: "cpu" must not match "cpuset".
bool lists_controllers(const std::string& file) {
  std::string text = read_small(file);
  for (const char* c : kControllers)
    if (!has_word(text, c)) return false;
  return true;
}

std::string missing_controllers(const std::string& file) {
  std::string text = read_small(file), out;
  for (const char* c : kControllers)
    if (!has_word(text, c)) out += (out.empty() ? "" : ", ") + std::string(c);
  return out;
}

util::Status enable_controllers(const std::string& dir) {
  return write_file(dir + "/cgroup.subtree_control", "+memory +pids +cpu");
}

struct Mount {
  std::string path, fstype, options;
};

std::vector<Mount> cgroup_mounts() {
  std::vector<Mount> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream pre(line.substr(0, dash)), post(line.substr(dash + 3));
    std::string id, parent, devno, root, mountpoint, fstype, source, super;
    pre >> id >> parent >> devno >> root >> mountpoint;
    post >> fstype >> source >> super;
    if (fstype == "cgroup2" || fstype == "cgroup") out.push_back({mountpoint, fstype, super});
  }
  return out;
}

// This process's v2 cgroup ("0::/path" in /proc/self/cgroup), relative to the mount.
std::string own_v2_path() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return "";
}

uint64_t own_pidns() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

// Field 22 of /proc/<pid>/stat (clock ticks since boot); 0 when it is gone.
uint64_t start_time_of(pid_t pid) {
  std::string stat = read_small("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  auto fields = words(stat.substr(paren + 1));
  // fields[0] is field 3 (state): field 22 is fields[19].
  return fields.size() > 19 ? std::strtoull(fields[19].c_str(), nullptr, 10) : 0;
}

bool writable_cgroup(const std::string& dir) {
  return ::access(dir.c_str(), W_OK) == 0 && ::access((dir + "/cgroup.procs").c_str(), W_OK) == 0 &&
         ::access((dir + "/cgroup.subtree_control").c_str(), W_OK) == 0;
}

// Whether this process is the only one in the cgroup (it may then leave it
// for a leaf and give its controllers to children: cgroups(7), "no internal
// processes" rule).
bool alone_in(const std::string& dir) {
  auto pids = words(read_small(dir + "/cgroup.procs"));
  const std::string self = std::to_string(::getpid());
  for (auto& p : pids)
    if (p != self) return false;
  return !pids.empty();
}

std::vector<std::string> subdirs(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (e->d_type == DT_DIR) out.push_back(name);
  }
  ::closedir(d);
  return out;
}

// Depth first: every process killed, every directory removed.
bool remove_recursively(const std::string& dir, const std::string& skip = "") {
  bool all = true;
  for (auto& sub : subdirs(dir)) {
    if (dir + "/" + sub == skip) {
      all = false;
      continue;
    }
    all = remove_recursively(dir + "/" + sub, skip) && all;
  }
  if (!skip.empty() && !all) return false;
  return cgroups::kill_and_remove(dir, kKillTimeoutMs) && all;
}

// Removes the directories in `dir` named prefix + server name whose server is
// gone; returns how many.
size_t reclaim_orphans(const std::string& dir, const std::string& prefix, uint64_t pidns,
                       std::vector<std::string>& notes) {
  size_t removed = 0;
  for (auto& name : subdirs(dir)) {
    if (name.rfind(prefix, 0) != 0) continue;
    Owner owner = owner_of(std::string_view(name).substr(prefix.size()), pidns);
    if (owner != Owner::gone) continue;
    if (remove_recursively(dir + "/" + name))
      ++removed;
    else
      notes.push_back("could not remove " + dir + "/" + name + " of a server that is gone: " + util::errno_name(errno));
  }
  return removed;
}

// Empty job cgroups that servers before per-server directories left directly
// in the base.
size_t reclaim_legacy_jobs(const std::string& base) {
  size_t removed = 0;
  const time_t now = ::time(nullptr);
  for (auto& name : subdirs(base)) {
    if (name.rfind("job-", 0) != 0) continue;
    std::string path = base + "/" + name;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || now - st.st_mtime < kLegacyJobAgeS) continue;
    if (::rmdir(path.c_str()) == 0) ++removed;
  }
  return removed;
}

std::string parent_of(const std::string& dir) { return dir.substr(0, dir.rfind('/')); }

}  // namespace

Owner owner_of(std::string_view name, uint64_t pidns) {
  // <pidns>-<pid>-<start>
  std::vector<std::string> parts;
  std::string cur;
  for (char c : name) {
    if (c == '-') {
      parts.push_back(cur);
      cur.clear();
    } else if (c >= '0' && c <= '9') {
      cur += c;
    } else {
      return Owner::unknown;
    }
  }
  parts.push_back(cur);
  if (parts.size() != 3) return Owner::unknown;
  for (auto& p : parts)
    if (p.empty() || p.size() > 20) return Owner::unknown;
  // Another pid namespace (another container): its pids mean nothing here.
  if (std::strtoull(parts[0].c_str(), nullptr, 10) != pidns) return Owner::unknown;
  long pid = std::strtol(parts[1].c_str(), nullptr, 10);
  if (pid <= 0) return Owner::unknown;
  uint64_t start = start_time_of(static_cast<pid_t>(pid));
  return start == std::strtoull(parts[2].c_str(), nullptr, 10) ? Owner::alive : Owner::gone;
}

std::string own_dir_name() {
  return std::to_string(own_pidns()) + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(start_time_of(::getpid()));
}

// The steps of set_up, each filling the tree or saying why not.
struct Builder {
  ServerTree& t;
  const uint64_t pidns = own_pidns();
  const std::string name = own_dir_name();

  // Root on the host's real root cgroup: a shared <mount>/throwbox.
  util::Status v2_root(const std::string& mount) {
    const std::string base = mount + "/throwbox";
    if (auto s = enable_controllers(mount); !s) return s;
    for (int attempt = 0;; ++attempt) {
      if (auto s = util::make_dirs(base, 0755); !s) return s;
      if (auto s = enable_controllers(base); !s) return s;
      t.orphans_removed_ += reclaim_orphans(base, kRootPrefix, pidns, t.notes_) + reclaim_legacy_jobs(base);
      const std::string dir = base + "/" + kRootPrefix + name;
      // ENOENT: another server removed the empty base meanwhile; make it again.
      if (::mkdir(dir.c_str(), 0755) != 0) {
        if (errno == ENOENT && attempt < 3) continue;
        return util::make_error(util::ErrorCode::kSandbox, util::call_error("mkdir", dir, errno));
      }
      t.dirs_.push_back(dir);
      t.bases_.push_back(base);
      if (auto s = enable_controllers(dir); !s) return s;
      t.host_.v2_base = dir;
      t.host_.placement = "root: " + dir;
      return util::ok_status();
    }
  }

  // Alone in a delegated cgroup: move into a leaf, give the controllers to
  // the children (systemd.resource-control(5), Delegate=: the payload moves
  // itself into a subgroup).
  // A delegated parent's other children are this user's other scopes: a
  // server killed in one of them left its directory there (systemd removes a
  // scope's cgroup when the scope ends; without systemd, or before it does,
  // the next server here does).
  void reclaim_beside(const std::string& own, const std::string& mount) {
    const std::string parent = parent_of(own);
    if (own == mount || parent.size() < mount.size() || !writable_cgroup(parent)) return;
    for (auto& sibling : subdirs(parent)) {
      if (parent + "/" + sibling == own) continue;
      t.orphans_removed_ += reclaim_orphans(parent + "/" + sibling, kDelegatedPrefix, pidns, t.notes_);
    }
  }

  util::Status v2_own(const std::string& own) {
    t.orphans_removed_ += reclaim_orphans(own, kDelegatedPrefix, pidns, t.notes_);
    const std::string dir = own + "/" + kDelegatedPrefix + name, leaf = dir + "/server";
    if (::mkdir(dir.c_str(), 0755) != 0)
      return util::make_error(util::ErrorCode::kSandbox, util::call_error("mkdir", dir, errno));
    t.dirs_.push_back(dir);
    if (::mkdir(leaf.c_str(), 0755) != 0)
      return util::make_error(util::ErrorCode::kSandbox, util::call_error("mkdir", leaf, errno));
    if (auto s = write_file(leaf + "/cgroup.procs", std::to_string(::getpid())); !s) return s;
    t.self_leaf_ = leaf;
    t.original_ = own;
    const bool had = lists_controllers(own + "/cgroup.subtree_control");
    if (auto s = enable_controllers(own); !s) return s;
    t.enabled_original_ = !had;
    if (auto s = enable_controllers(dir); !s) return s;
    t.host_.v2_base = dir;
    t.host_.placement = "delegated: " + own + " (this server moved into " + leaf + ")";
    return util::ok_status();
  }

  // Others share our cgroup: the jobs go beside it, in the delegated parent.
  util::Status v2_beside(const std::string& own, const std::string& parent) {
    if (!lists_controllers(parent + "/cgroup.subtree_control"))
      if (auto s = enable_controllers(parent); !s) return s;
    t.orphans_removed_ += reclaim_orphans(parent, kDelegatedPrefix, pidns, t.notes_);
    const std::string dir = parent + "/" + kDelegatedPrefix + name;
    if (::mkdir(dir.c_str(), 0755) != 0)
      return util::make_error(util::ErrorCode::kSandbox, util::call_error("mkdir", dir, errno));
    t.dirs_.push_back(dir);
    if (auto s = enable_controllers(dir); !s) return s;
    t.host_.v2_base = dir;
    t.host_.placement = "delegated: " + dir + " (beside " + own + ", which other processes share)";
    return util::ok_status();
  }

  // Undoes a failed attempt so the next one starts clean.
  void undo() {
    t.remove_all();
    t.dirs_.clear();
    t.bases_.clear();
    t.host_ = cgroups::Host();
    t.original_.clear();
    t.enabled_original_ = false;
  }

  std::string v2(const std::string& mount) {
    if (!lists_controllers(mount + "/cgroup.controllers"))
      return "cgroup v2 at " + mount + " lacks the " + missing_controllers(mount + "/cgroup.controllers") +
             " controllers (bound to cgroup v1 hierarchies, or not enabled)";
    std::string why;
    if (::geteuid() == 0) {
      if (auto s = v2_root(mount); s)
        return "";
      else
        why = s.error().message + "; ";
      undo();
    }
    const std::string rel = own_v2_path();
    const std::string own = rel == "/" ? mount : mount + rel;
    if (rel.empty() || rel.find("/..") != std::string::npos)
      return why + "this process's cgroup v2 path is outside the mounted tree (" + rel + ")";
    if (writable_cgroup(own) && lists_controllers(own + "/cgroup.controllers") && alone_in(own)) {
      reclaim_beside(own, mount);
      if (auto s = v2_own(own); s)
        return "";
      else
        why += s.error().message + "; ";
      undo();
    }
    const std::string parent = parent_of(own);
    if (own != mount && parent.size() >= mount.size() && writable_cgroup(parent) &&
        lists_controllers(parent + "/cgroup.controllers")) {
      reclaim_beside(own, mount);
      if (auto s = v2_beside(own, parent); s)
        return "";
      else
        why += s.error().message + "; ";
      undo();
    }
    if (!writable_cgroup(own))
      return why + "cgroup v2 " + own + " is not delegated to uid " + std::to_string(::geteuid()) +
             " (its cgroup.procs or cgroup.subtree_control is not writable)";
    if (!lists_controllers(own + "/cgroup.controllers"))
      return why + "cgroup v2 " + own + " lacks the " + missing_controllers(own + "/cgroup.controllers") +
             " controllers (enable them in the parent's cgroup.subtree_control, or Delegate=yes)";
    return why + "cgroup v2 " + own + " is shared with other processes and its parent " + parent + " is not delegated";
  }

  std::string v1(const std::vector<Mount>& mounts) {
    if (::geteuid() != 0) return "only cgroup v1 controllers here, and v1 cannot be delegated to a normal user";
    std::map<std::string, std::string> mount_of;
    for (const char* ctl : kV1Controllers) {
      for (auto& m : mounts)
        if (m.fstype == "cgroup" && has_word(m.options, ctl, ',')) mount_of[ctl] = m.path;
      if (!mount_of.count(ctl)) return std::string("no cgroup v1 hierarchy with the ") + ctl + " controller";
    }
    // One directory per hierarchy: systemd co-mounts cpu,cpuacct.
    std::map<std::string, std::string> dir_of_mount;
    for (auto& [ctl, mnt] : mount_of) {
      if (dir_of_mount.count(mnt)) continue;
      const std::string base = mnt + "/throwbox";
      if (::mkdir(base.c_str(), 0755) != 0 && errno != EEXIST) return util::call_error("mkdir", base, errno);
      t.bases_.push_back(base);
      t.orphans_removed_ += reclaim_orphans(base, kRootPrefix, pidns, t.notes_) + reclaim_legacy_jobs(base);
      const std::string dir = base + "/" + kRootPrefix + name;
      if (::mkdir(dir.c_str(), 0755) != 0) return util::call_error("mkdir", dir, errno);
      t.dirs_.push_back(dir);
      dir_of_mount[mnt] = dir;
    }
    for (auto& [ctl, mnt] : mount_of) t.host_.v1_base[ctl] = dir_of_mount[mnt];
    t.host_.placement = "root: " + t.dirs_.front() + " (and in each other v1 hierarchy)";
    return "";
  }
};

std::unique_ptr<ServerTree> ServerTree::set_up() {
  std::unique_ptr<ServerTree> t(new ServerTree());
  Builder b{*t};
  auto mounts = cgroup_mounts();
  std::string why;
  for (auto& m : mounts) {
    if (m.fstype != "cgroup2") continue;
    std::string w = b.v2(m.path);
    if (w.empty()) {
      t->host_.mode = cgroups::Mode::v2;
      return t;
    }
    why = w;
  }
  std::string w1 = b.v1(mounts);
  if (w1.empty()) {
    t->host_.mode = cgroups::Mode::v1;
    return t;
  }
  b.undo();
  t->host_.why_not = mounts.empty() ? "no cgroup filesystem is mounted" : (why.empty() ? w1 : why + "; " + w1);
  return t;
}

void ServerTree::remove_all() {
  for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) {
    const std::string& dir = *it;
    if (!self_leaf_.empty() && self_leaf_.rfind(dir + "/", 0) == 0) {
      // Back into the cgroup this process came from, which must first give
      // its controllers back (a cgroup with them cannot hold processes).
      (void)remove_recursively(dir, self_leaf_);
      (void)write_file(dir + "/cgroup.subtree_control", "-memory -pids -cpu");
      if (enabled_original_)
        if (auto s = write_file(original_ + "/cgroup.subtree_control", "-memory -pids -cpu"); !s)
          spdlog::warn("cgroups: {}; {} stays", s.error().message, dir);
      if (auto s = write_file(original_ + "/cgroup.procs", std::to_string(::getpid())); !s) {
        spdlog::warn("cgroups: {}; {} stays until the next server here removes it", s.error().message, dir);
        continue;
      }
      self_leaf_.clear();
    }
    if (!remove_recursively(dir)) spdlog::warn("cgroups: could not remove {}: {}", dir, util::errno_name(errno));
  }
  dirs_.clear();
  // The shared bases go when the last server leaves (rmdir fails while any
  // other server's directory is in them).
  for (auto& base : bases_) (void)::rmdir(base.c_str());
  bases_.clear();
}

ServerTree::~ServerTree() { remove_all(); }

}  // namespace sandbox::cgroup_host
