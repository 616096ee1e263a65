// Namespace creation and identity: the clone with every namespace flag, the id
// maps written by the runner parent, hostname and loopback set by the child.
#pragma once
#include <sys/types.h>

#include <cstdint>

#include "server/util/result.h"

namespace sandbox::namespaces {

// clone(2) into fresh user, pid, mount, net, ipc, uts and cgroup namespaces.
// Fork-like: returns the child's pid in the parent, 0 in the child, -1 on error.
pid_t clone_sandbox_in_parent();

// The sandbox's network namespace: no interface but loopback. First thing in
// the child, before it waits for the parent's go.
void unshare_network_in_child(int report_sock);

// setgroups=deny, then uid_map and gid_map mapping the sandbox user (kSandboxUid)
// to host_uid/host_gid: the only identity that exists inside.
util::Status write_id_maps_in_parent(pid_t child, uint32_t host_uid, uint32_t host_gid);

// UTS: a fixed hostname so nothing of the host's name leaks.
void set_hostname_in_child(int report_sock);
// The empty network namespace gets loopback up and nothing else.
void bring_up_loopback_in_child(int report_sock);

}  // namespace sandbox::namespaces
