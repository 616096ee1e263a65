// The sandbox user's file-system identity for the scope of one step of the
// runner parent (deliver.cpp, workspace.cpp): what it creates in the
// sandbox's tmpfs is owned by that user inside. Never used in the child.
#pragma once
#include <signal.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <sys/types.h>

namespace sandbox {

// Files created in the sandbox's tmpfs need an owner mapped in its user
// namespace; as root this also drops CAP_DAC_OVERRIDE for the write.
// A change of fsuid/fsgid clears PR_SET_PDEATHSIG (prctl(2)): it is set again
// afterwards, or a runner would outlive a killed server (and its sandbox too);
// the caller checks deliver::parent_alive once its copies are done.
class AsSandboxUser {
 public:
  AsSandboxUser(uid_t uid, gid_t gid) : old_uid_(::setfsuid(uid)), old_gid_(::setfsgid(gid)) {}
  AsSandboxUser(const AsSandboxUser&) = delete;
  AsSandboxUser& operator=(const AsSandboxUser&) = delete;
  ~AsSandboxUser() {
    ::setfsgid(static_cast<gid_t>(old_gid_));
    ::setfsuid(static_cast<uid_t>(old_uid_));
    (void)::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  }

 private:
  int old_uid_, old_gid_;
};

}  // namespace sandbox
