// The names of the reported layers (layers.h). Runs in the runner, once the
// outcome is known.
#include "server/sandbox/layers.h"

namespace sandbox {

std::vector<std::string> layer_names(Layers done, int landlock_abi, cgroups::Mode cgroup_mode) {
  std::vector<std::string> names;
  static constexpr struct {
    Layer layer;
    const char* name;
  } kNamespaces[] = {{Layer::user_ns, "user"},    {Layer::pid_ns, "pid"}, {Layer::mount_ns, "mount"},
                     {Layer::net_ns, "net"},      {Layer::ipc_ns, "ipc"}, {Layer::uts_ns, "uts"},
                     {Layer::cgroup_ns, "cgroup"}};
  std::string ns;
  for (auto& n : kNamespaces)
    if (done.has(n.layer)) ns += (ns.empty() ? "" : ",") + std::string(n.name);
  if (!ns.empty()) names.push_back("namespaces:" + ns);
  static constexpr struct {
    Layer layer;
    const char* name;
  } kSteps[] = {{Layer::pivot_root, "pivot_root"},
                {Layer::readonly_root, "readonly_root"},
                {Layer::fd_hygiene, "fd_hygiene"},
                {Layer::rlimits, "rlimits"},
                {Layer::no_new_privs, "no_new_privs"}};
  for (auto& s : kSteps)
    if (done.has(s.layer)) names.emplace_back(s.name);
  if (done.has(Layer::landlock)) names.push_back("landlock:abi" + std::to_string(landlock_abi));
  if (done.has(Layer::capabilities_dropped)) names.emplace_back("capabilities_dropped");
  if (done.has(Layer::seccomp)) names.emplace_back("seccomp");
  if (done.has(Layer::cgroups)) names.push_back(std::string("cgroups:") + cgroups::to_string(cgroup_mode));
  if (done.has(Layer::user_ns))
    names.emplace_back(!done.has(Layer::own_uid)          ? "host_uid:shared"
                       : done.has(Layer::subordinate_uid) ? "host_uid:subordinate"
                       : done.has(Layer::template_fork)   ? "host_uid:template"
                                                          : "host_uid:own");
  if (done.has(Layer::user_limits)) names.emplace_back("user_limits");
  if (done.has(Layer::template_fork)) names.emplace_back("template_fork");
  return names;
}

}  // namespace sandbox
