// Workspaces: a job's /work kept from one call of a workspace to the next.
// The runner copies the broker's host tree into the sandbox's /work before
// the program starts (copy_in) and /work into a new host tree once it ended
// (copy_out), through /proc/<pid 1>/root. Runs in the runner parent; never
// follows a link on either side, never opens a FIFO, socket or device.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/sandbox/spec.h"
#include "server/util/result.h"

struct statfs;

namespace sandbox::workspace {

// A tree's bounds: far above what a job's /work (16384 inodes) can hold, low
// enough that a walk ends in seconds and its descriptors (three a level) fit.
constexpr uint64_t kEntriesMax = 100000;
constexpr int kDepthMax = 64;

// What a tree walk does with a FIFO, socket or device: the broker's tree only
// holds what copy_out made (refuse), a job's /work may hold anything (skip).
enum class Special { refuse, skip };

// Whose file-system identity creates the copies (fs_identity.h): the sandbox
// user's in the sandbox; none (the caller's own) on the host.
struct CreateAs {
  uid_t uid;
  gid_t gid;
};

struct TreeRules {
  uint64_t entries_max = kEntriesMax;   // every entry seen, skipped ones too
  int depth_max = kDepthMax;            // directories below the top one
  uint64_t bytes_max = UINT64_MAX;      // regular files' sizes together
  uint64_t allocated_max = UINT64_MAX;  // what files and symlinks occupy together (a tmpfs's pages)
  std::string allocated_note;           // appended when allocated_max is passed
  Special special = Special::refuse;
  mode_t dir_mode_add = 0;  // added to every directory's mode (the host keeps u+rwx)
  std::optional<CreateAs> create_as;
  std::string skip;                  // a path relative to the top that is not copied (the code file)
  std::string src_label, dst_label;  // how messages name the two tops: "/work", "workspace_out"
  std::string nospace_note;          // appended to an ENOSPC or EDQUOT in the destination
  // An entry of the source its owner cannot read (a job's chmod 0) gets u+r,
  // a directory u+rx, while it is read, and its mode back after: a runner
  // without CAP_DAC_OVERRIDE (a normal user's server, sharing the sandbox's
  // uid) still reads it, both ways. The copy has the mode the entry had.
  bool unlock_unreadable = false;
};

struct Tally {
  uint64_t bytes = 0;                      // regular files' contents copied
  uint64_t allocated = 0;                  // what the source's files and symlinks occupy (st_blocks)
  uint64_t entries = 0;                    // files, directories and symlinks made
  uint64_t skipped = 0;                    // special files not copied (Special::skip)
  std::vector<std::string> skipped_names;  // the first kSkippedNamesMax, labelled
};

// Copies the tree below src_dir into dst_dir (both directories; dst_dir
// empty but for rules.skip): directories and regular files with their mode &
// 0777 (no set-id or sticky bit) and times, symlinks as symlinks (readlinkat,
// symlinkat: never followed), hard links as separate files. Every open is
// openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
// relative to a directory already opened; an entry is re-checked (type,
// inode) once opened. The first error ends the walk; dst_dir then holds part
// of the tree.
util::Result<Tally> copy_tree(int src_dir, int dst_dir, const TreeRules& rules);
// mkdir(dst_path, 0700), which must not exist, and copy_tree into it; on any
// error nothing of dst_path is left.
util::Result<Tally> save_tree(int src_dir, const std::string& dst_path, const TreeRules& rules);
// /work nearly full when the program ended: under 64 KiB or 1% free, or no inode.
bool nearly_full(const struct statfs& st);
// What a workspace job's /work holds beyond the workspace's size: the pages
// of its code file. The workspace itself (every file but the code file) is
// kept within the workspace's size, so a workspace and any code always fit
// the next call's /work, however full the last call left it.
uint64_t code_room_bytes(uint64_t code_bytes);

// The workspace's tree (a host directory) into the sandbox's /work, as the
// sandbox user; the code file's name (spec.code_path) is left to the code.
// An ENOSPC says the workspace does not fit /work. pid 1 has pivoted into its
// root and nothing of the job runs yet.
util::Status copy_in(pid_t init_pid, const LaunchSpec& spec, const std::string& workspace_in);

// What copy_out did, as the outcome reports it (spec.h, Outcome::workspace_*).
struct Report {
  bool saved = false;
  bool full = false;
  Tally tally;
  std::string error;
};
// /work into a new spec.workspace_out once the program ended, while pid 1
// still holds the mounts (and nothing else runs in the sandbox). Bounded by
// /work's own size, which hard links could otherwise multiply on the host.
Report copy_out(pid_t init_pid, const LaunchSpec& spec);
void add_to_outcome(const Report& report, Outcome& outcome);

}  // namespace sandbox::workspace
