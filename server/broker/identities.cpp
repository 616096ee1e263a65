// Host identities for sandboxes: the range check at start-up and the leases.
#include "server/broker/identities.h"

#include <linux/capability.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "server/util/text.h"

namespace broker {
namespace {

std::vector<std::string_view> split(std::string_view line, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t pos = line.find(sep, start);
    out.push_back(line.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) return out;
    start = pos + 1;
  }
}

std::optional<uint64_t> number(std::string_view s) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

constexpr std::string_view kHoldPrefix = "throwbox/uid/";

// Binds the abstract name of one uid; EADDRINUSE: someone holds it.
util::Result<util::UniqueFd> hold(uint32_t uid) {
  util::UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return util::make_error(util::ErrorCode::kInternal, util::call_error("socket", "AF_UNIX", errno));
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  const std::string name = std::string(kHoldPrefix) + std::to_string(uid);
  std::memcpy(addr.sun_path + 1, name.data(), name.size());  // sun_path[0] == 0: the abstract namespace
  const socklen_t len = static_cast<socklen_t>(offsetof(struct sockaddr_un, sun_path) + 1 + name.size());
  if (::bind(fd.get(), reinterpret_cast<struct sockaddr*>(&addr), len) != 0) {
    const int e = errno;
    return util::make_error(e == EADDRINUSE ? util::ErrorCode::kBusy : util::ErrorCode::kInternal,
                            util::call_error("bind", "@" + name, e));
  }
  return fd;
}

// newuidmap and newgidmap are set-uid root: they get their capabilities only
// without no_new_privs and with CAP_SETUID and CAP_SETGID in the bounding set
// (a systemd unit's NoNewPrivileges= or CapabilityBoundingSet= takes them).
bool set_uid_programs_work() {
  std::ifstream status("/proc/self/status");
  std::string line;
  bool nnp = false;
  uint64_t bounding = 0;
  while (std::getline(status, line)) {
    if (line.rfind("NoNewPrivs:", 0) == 0) nnp = line.find('1') != std::string::npos;
    if (line.rfind("CapBnd:", 0) == 0) bounding = std::strtoull(line.c_str() + 7, nullptr, 16);
  }
  constexpr uint64_t kNeeded = (uint64_t{1} << CAP_SETUID) | (uint64_t{1} << CAP_SETGID);
  return !nnp && (bounding & kNeeded) == kNeeded;
}

}  // namespace

std::optional<std::string> range_conflict(std::string_view file_name, std::string_view text, bool subordinate,
                                          uint32_t first, uint32_t count) {
  const uint64_t lo = first, hi = uint64_t{first} + count;  // [lo, hi)
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto f = split(line, ':');
    if (subordinate) {
      if (f.size() < 3) continue;
      auto start = number(f[1]), n = number(f[2]);
      if (!start || !n) continue;
      if (*start < hi && lo < *start + *n) return std::string(file_name) + ": " + line;
    } else {
      if (f.size() < 3) continue;
      auto id = number(f[2]);
      if (id && lo <= *id && *id < hi) return std::string(file_name) + ": " + line;
    }
  }
  return std::nullopt;
}

std::optional<std::pair<uint32_t, uint32_t>> subordinate_range(std::string_view text, std::string_view name,
                                                               uint32_t id) {
  std::istringstream in{std::string(text)};
  std::string line;
  const std::string id_text = std::to_string(id);
  while (std::getline(in, line)) {
    auto f = split(line, ':');
    if (f.size() < 3 || (f[0] != name && f[0] != id_text)) continue;
    auto start = number(f[1]), n = number(f[2]);
    if (!start || !n || *n == 0 || *start > 0xFFFFFFFEull || *start + *n > 0xFFFFFFFFull) continue;
    return std::pair{static_cast<uint32_t>(*start), static_cast<uint32_t>(std::min<uint64_t>(*n, 1u << 20))};
  }
  return std::nullopt;
}

util::Result<Identities> Identities::make(const policy::Policy& policy, uint32_t euid, uint32_t egid,
                                          const std::string& etc_dir, const std::string& id_mapper) {
  Identities ids;
  if (euid != 0) {
    ids.shared_ = Identity{euid, egid, false, false};
    const std::string gid_mapper = id_mapper.substr(0, id_mapper.rfind('/') + 1) + "newgidmap";
    if (::access(id_mapper.c_str(), X_OK) != 0 || ::access(gid_mapper.c_str(), X_OK) != 0) {
      ids.why_shared_ = id_mapper + " or " + gid_mapper + " is missing (Debian package uidmap)";
      return ids;
    }
    if (!set_uid_programs_work()) {
      ids.why_shared_ =
          "set-uid programs cannot gain CAP_SETUID/CAP_SETGID here (no_new_privs, or a reduced "
          "capability bounding set such as systemd's NoNewPrivileges=/CapabilityBoundingSet=)";
      return ids;
    }
    std::string name;
    if (struct passwd* pw = ::getpwuid(euid)) name = pw->pw_name;
    auto read = [&](const char* file) {
      std::ifstream f(etc_dir + "/" + file);
      std::stringstream text;
      if (f) text << f.rdbuf();
      return text.str();
    };
    auto u = subordinate_range(read("subuid"), name, euid);
    auto g = subordinate_range(read("subgid"), name, euid);
    if (!u || !g) {
      ids.why_shared_ = "no /etc/subuid and /etc/subgid range for this user (usermod --add-subuids/--add-subgids)";
      return ids;
    }
    ids.per_sandbox_ = ids.subordinate_ = true;
    ids.first_ = u->first;
    ids.gid_first_ = g->first;
    ids.count_ = std::min(u->second, g->second);
    return ids;
  }
  ids.per_sandbox_ = true;
  ids.first_ = policy.sandbox.uid_first;
  ids.count_ = policy.sandbox.uid_count;
  for (auto [file, subordinate] : {std::pair{"passwd", false}, {"group", false}, {"subuid", true}, {"subgid", true}}) {
    const std::string path = etc_dir + "/" + file;
    std::ifstream f(path);
    if (!f) continue;  // no subuid file: nothing is delegated
    std::stringstream text;
    text << f.rdbuf();
    if (auto c = range_conflict(path, text.str(), subordinate, ids.first_, ids.count_))
      return util::make_error(util::ErrorCode::kPolicy, "sandbox.uid_range " + std::to_string(ids.first_) + ".." +
                                                            std::to_string(uint64_t{ids.first_} + ids.count_ - 1) +
                                                            " is in use on this host (" + *c +
                                                            "): a sandbox would share an account's identity; choose a "
                                                            "range no account uses (policy sandbox.uid_range)");
  }
  return ids;
}

util::Result<IdentityLease> Identities::lease() {
  if (!per_sandbox_) return IdentityLease(shared_, util::UniqueFd());
  for (uint32_t tried = 0; tried < count_; ++tried) {
    const uint32_t uid = first_ + cursor_.fetch_add(1) % count_;
    auto held = hold(uid);
    const uint32_t gid = subordinate_ ? gid_first_ + (uid - first_) : uid;
    if (held) return IdentityLease(Identity{uid, gid, true, subordinate_}, std::move(*held));
    if (held.error().code != util::ErrorCode::kBusy) return held.error();
  }
  return util::busy_error(std::string("every host uid of ") +
                              (subordinate_ ? "the server user's /etc/subuid range" : "sandbox.uid_range") + " (" +
                              std::to_string(count_) + ") is held by a live sandbox; retry later",
                          1);
}

}  // namespace broker
