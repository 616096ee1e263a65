// Small filesystem helpers for the trusted side (server threads, runner parent).
// Never used inside the sandbox child.
#pragma once
#include <string>
#include <string_view>

#include "server/util/result.h"

namespace util {

// Reads a whole regular file, refusing one larger than max_bytes.
Result<std::string> read_file(const std::string& path, size_t max_bytes);
// A file only this process's user may touch (a private key): read whole as
// read_file does, after checking it is a regular file (not a link) owned by
// the effective uid with no group or other permission bits. kNotFound when
// it is not there; kInvalidArgument, naming the file and what to do, when it
// is not private.
Result<std::string> read_private_file(const std::string& path, size_t max_bytes);
// Creates path with data at mode 0600 (written in full and fsynced under a
// temporary name, then linked): never replaces a file already there, which
// is then left as it is (success: two processes racing keep the first).
Status create_private_file(const std::string& path, std::string_view data);
// Writes to a temporary name in the same directory, fsyncs if asked, renames.
Status write_file_atomic(const std::string& path, std::string_view data, unsigned mode, bool sync = false);
// mkdir -p with the given mode for the directories it creates.
Status make_dirs(const std::string& path, unsigned mode);
// rm -rf without following symlinks; ENOENT is success.
Status remove_tree(const std::string& path);
// The directory of this process's executable (/proc/self/exe), without the
// trailing slash: an installed or built throwbox finds its parts from it.
std::string self_exe_dir();

}  // namespace util
