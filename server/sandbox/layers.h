// The isolation layers a job ran inside, as its steps reported them: the
// zygote (namespaces but net, cgroup), pid 1 (net, root), the program child
// (everything up to seccomp). A bit set here is header-only and allocation
// free (child side); the names are the runner's (layers.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "server/sandbox/cgroups.h"

namespace sandbox {

enum class Layer : uint8_t {
  user_ns,
  pid_ns,
  mount_ns,
  net_ns,
  ipc_ns,
  uts_ns,
  cgroup_ns,
  pivot_root,
  readonly_root,
  fd_hygiene,
  rlimits,
  no_new_privs,
  landlock,
  capabilities_dropped,
  seccomp,
  cgroups,
  own_uid,          // the user namespace is owned by the sandbox's own host uid (root servers)
  user_limits,      // the user namespace's ucount limits were written
  subordinate_uid,  // own_uid from the server user's /etc/subuid range
  template_fork,    // the program is a template's fork; the user namespace is owned by the template's uid
};

// A set of Layer, as sent over the report pipe and the control socket.
class Layers {
 public:
  constexpr Layers() = default;
  constexpr explicit Layers(uint32_t bits) : bits_(bits) {}
  constexpr void add(Layer l) { bits_ |= bit(l); }
  constexpr bool has(Layer l) const { return (bits_ & bit(l)) != 0; }
  constexpr uint32_t bits() const { return bits_; }
  constexpr Layers operator|(Layers o) const { return Layers(bits_ | o.bits_); }

 private:
  static constexpr uint32_t bit(Layer l) { return uint32_t{1} << static_cast<unsigned>(l); }
  uint32_t bits_ = 0;
};

// The result's sandbox_layers, in the order the steps run:
// "namespaces:user,pid,mount,net,ipc,uts,cgroup" (the namespaces that were
// made), "pivot_root", "readonly_root", "fd_hygiene", "rlimits",
// "no_new_privs", "landlock:abi<N>", "capabilities_dropped", "seccomp",
// "cgroups:<mode>", then "host_uid:own" (a host uid of its own),
// "host_uid:template" (a host uid of its own, the user namespace owned by
// the template's: what the kernel counts per user is the template's
// forks' together), "host_uid:subordinate" (one of the server user's
// subordinate uids) or "host_uid:shared" (the server's, with others), then
// "user_limits", and "template_fork" (the program was forked from a
// template, template_fork.h).
std::vector<std::string> layer_names(Layers done, int landlock_abi, cgroups::Mode cgroup_mode);

}  // namespace sandbox
