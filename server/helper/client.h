// The server's side of the parser helper (server/parser/main.cpp): the helper
// process started once, and a child of it forked for each job's artifacts,
// each job's proxy request heads and each upload, so that one child's fault
// or compromise reaches nothing but what that one use gave it. A child that
// crashes, hangs past a call's timeout or answers nonsense is killed; the
// next use gets a new one, and a dead helper is started again. Thread-safe.
#pragma once
#include <sys/types.h>

#include <memory>
#include <mutex>
#include <string>

#include "server/helper/wire.h"
#include "server/util/fd.h"
#include "server/util/result.h"

namespace helper {

// One child: requests in turn from one owner. Destroyed: killed.
class Child {
 public:
  Child(util::UniqueFd sock, util::UniqueFd pidfd) : sock_(std::move(sock)), pidfd_(std::move(pidfd)) {}
  Child(Child&&) noexcept = default;
  Child& operator=(Child&&) noexcept = default;
  ~Child() { kill(); }
  // A request and its answer by timeout_ms. A kFailure answer is an error
  // with its text; any error (no answer in time, EOF, a malformed answer)
  // kills the child: call() fails from then on.
  util::Result<Message> call(const Message& request, int timeout_ms, uint64_t answer_bytes_max);
  bool alive() const { return sock_.valid(); }
  // The socket, for a caller that talks to the child asynchronously (the
  // proxy); kill() still ends the child.
  int socket() const { return sock_.get(); }
  void kill();

 private:
  util::UniqueFd sock_;
  util::UniqueFd pidfd_;
};

class Parsers {
 public:
  // exe: throwbox-parser. id: a root server's uid and gid for it (a lease
  // the caller holds), or a normal user's (its own, in a user namespace).
  // Nothing starts until start() or the first child().
  Parsers(std::string exe, Identity id) : exe_(std::move(exe)), id_(id) {}
  // The helper started now, so that one that cannot confine itself stops the
  // server at its start rather than failing its first job.
  util::Status start();
  ~Parsers();
  Parsers(const Parsers&) = delete;
  Parsers& operator=(const Parsers&) = delete;

  // A new child, the helper started again first if it died.
  util::Result<Child> child();
  // What the helper said it did at its last start (for doctor and the log).
  int landlock_abi() const { return landlock_abi_; }
  uint64_t restarts() const { return restarts_; }

 private:
  util::Status spawn_locked();
  void stop_locked();
  util::Result<Child> fork_locked();

  const std::string exe_;
  const Identity id_;
  std::mutex mu_;  // one fork request at a time: each takes well under a millisecond
  util::UniqueFd control_;
  pid_t pid_ = -1;
  int landlock_abi_ = 0;
  uint64_t restarts_ = 0;
};

}  // namespace helper
