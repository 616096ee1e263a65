// Namespace creation and identity: the clone with every namespace flag, the id
// maps written by the zygote (the runner's side), hostname and loopback set by the child.
#pragma once
#include <sched.h>
#include <signal.h>
#include <sys/types.h>

#include <cstdint>

#include "server/util/result.h"

namespace sandbox::namespaces {

// clone(2) flags for pid 1: fresh user, pid, mount, ipc, uts and cgroup
// namespaces, SIGCHLD to the parent. Each flag removes one view of the host:
// users, pids, mounts, SysV IPC, hostname and the cgroup path. The network
// namespace, the costliest to make (about 0.6 ms), is made by pid 1 itself
// first thing (unshare_network_in_child) while its parent writes the id maps.
// The cgroup namespace comes later, from pid 1 once it is in the job's cgroup
// (unshare_cgroup_in_child): rooted there, /proc/self/cgroup shows "/".
constexpr unsigned long kSandboxCloneFlags =
    CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | SIGCHLD;

// The sandbox's network namespace: no interface but loopback. First thing in
// the child, before it waits for the parent's go.
void unshare_network_in_child(int report_sock);

// A root zygote, around the clone: the new user namespace's owner is the
// creator's effective uid, and the kernel charges what the sandbox holds
// (processes, queued signals, inotify instances, message queue bytes) to its
// owner up the namespace chain. become_owner_in_parent sets the effective ids
// to the sandbox's own host uid/gid, keeping the capabilities
// (SECBIT_NO_SETUID_FIXUP) and the file-system ids (0: pid 1 opens its bind
// sources as the server); restore_root_in_parent undoes it.
util::Status become_owner_in_parent(uint32_t host_uid, uint32_t host_gid);
util::Status restore_root_in_parent();

// Where newgidmap is expected beside it (Debian's uidmap package).
constexpr const char* kNewuidmap = "/usr/bin/newuidmap";
constexpr const char* kNewgidmap = "/usr/bin/newgidmap";

// A normal user's subordinate ids (spec.subordinate_uid): the zygote moves
// into a user namespace of its own where the server's uid and gid are 0 and
// the sandbox's subordinate ones are 1, mapped by newuidmap and newgidmap
// run from a helper it forked before (still outside). In it the zygote acts
// as a root server's does.
util::Status enter_subordinate_ns_in_parent(uint32_t sub_uid, uint32_t sub_gid);
// The runner, once pid 1 exists: joins that namespace (the parent of pid 1's)
// to deliver and harvest as the sandbox's id.
util::Status join_subordinate_ns_in_parent(pid_t pid1);

// The cgroup namespace, rooted at pid 1's cgroup (the job's, once attached).
void unshare_cgroup_in_child(int report_sock);

// setgroups=deny, then uid_map and gid_map mapping the sandbox user (kSandboxUid)
// to host_uid/host_gid: the only identity that exists inside.
util::Status write_id_maps_in_parent(pid_t child, uint32_t host_uid, uint32_t host_gid);

// A template's user namespace (LaunchSpec::template_socket): the sandbox
// user to host_uid/host_gid as write_id_maps_in_parent does, and the host
// ids first..first+count-1 to themselves (host_uid and host_gid left out):
// a job sandbox made inside it maps its own host id there.
util::Status write_template_id_maps_in_parent(pid_t child, uint32_t host_uid, uint32_t host_gid, uint32_t first,
                                              uint32_t count);
// An id across the user namespace of `pid` (map_file: "uid_map" or
// "gid_map", read from outside): a host id to the one inside (from_host),
// or an id inside to the host's; an error when unmapped.
util::Result<uint32_t> map_id_in_parent(pid_t pid, const char* map_file, uint32_t id, bool from_host);
// A zygote whose pid 1 is made inside a template's namespaces: as root it
// first makes the template's user (owner_uid/owner_gid, host ids) its
// effective ids, keeping its capabilities and root's file-system ids
// (become_owner_in_parent), then joins the user and pid namespaces of the
// process `pidfd` names (the template's pid 1), with every capability in
// that user namespace. pid 1's user namespace is then the template's
// user's, whose forks may join it.
util::Status enter_template_in_parent(int pidfd, uint32_t owner_uid, uint32_t owner_gid);
// After the clone, to write pid 1's id maps through /proc (owned by that
// user): the file-system ids become the template's sandbox user's.
util::Status own_files_as_template_user_in_parent();

// UTS: a fixed hostname so nothing of the host's name leaks.
void set_hostname_in_child(int report_sock);
// The empty network namespace gets loopback up and nothing else.
void bring_up_loopback_in_child(int report_sock);

}  // namespace sandbox::namespaces
