// A stand-in for throwbox-runner that builds no sandbox: it speaks the
// runner's protocol on its pipes (an optional prepare line, the launch spec,
// EOF as the start gate; progress lines, then one outcome line) and does what
// the job's code says, one directive a line:
//   stdout TEXT         the program printed TEXT
//   stderr TEXT
//   exit N              the program exited with N (failed when N is not 0)
//   status S            the outcome's status is S (timed_out, memory_exceeded, ...)
//   file NAME CONTENT   the program wrote /outputs/NAME (copied to the harvest dir)
//   progress            one progress line
//   wait                block until SIGTERM (the broker's cancel): "cancelled"
//   hang                ignore SIGTERM and never answer (the broker must kill it)
//   die                 exit without an outcome
//   garbage             write a line that is not JSON, then exit
// The broker's job path (launch, the runner's lines, intake, the ledger,
// idempotency) runs against it in tests/unit/job_path_test.cpp.
#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "server/sandbox/spec.h"
#include "server/util/fd.h"

namespace {

void write_line(const std::string& text) {
  std::string line = text + "\n";
  util::write_all(1, line.data(), line.size());
}

}  // namespace

int main() {
  // As the runner does: descriptors another child's spawn let through (the
  // other end of a pipe) would keep this one's stdin from ever reaching EOF.
  ::close_range(3, ~0U, 0);
  std::string line, spec_text;
  while (std::getline(std::cin, line)) {
    if (line.rfind("{\"prepare\"", 0) == 0) continue;
    spec_text = line;
    break;
  }
  if (spec_text.empty()) return 0;  // a spare retired unused
  auto doc = nlohmann::json::parse(spec_text, nullptr, false);
  auto spec = doc.is_discarded() ? util::make_error(util::ErrorCode::kSpec, "not JSON") : sandbox::spec_from_json(doc);
  sandbox::Outcome o;
  o.layers = {"fake"};
  if (!spec) {
    o.error = "fake runner: " + spec.error().message;
    write_line(sandbox::to_json(o).dump());
    return 0;
  }
  sigset_t term;
  ::sigemptyset(&term);
  ::sigaddset(&term, SIGTERM);
  ::sigprocmask(SIG_BLOCK, &term, nullptr);
  // What the runner's zygote makes: the job's scratch directory and its outputs.
  ::mkdir(spec->scratch_dir.c_str(), 0700);
  ::mkdir(spec->harvest_dir.c_str(), 0700);
  while (std::getline(std::cin, line)) {}  // the start gate: EOF

  o.status = sandbox::Status::completed;
  o.exited = true;
  std::istringstream code(spec->code);
  while (std::getline(code, line)) {
    std::istringstream words(line);
    std::string verb, rest;
    words >> verb;
    std::getline(words >> std::ws, rest);
    if (verb == "stdout") {
      o.stdout_text += rest + "\n";
    } else if (verb == "stderr") {
      o.stderr_text += rest + "\n";
    } else if (verb == "exit") {
      o.exit_code = std::stoi(rest);
      o.status = o.exit_code == 0 ? sandbox::Status::completed : sandbox::Status::failed;
    } else if (verb == "status") {
      o.status = sandbox::status_from_string(rest).value_or(sandbox::Status::sandbox_error);
    } else if (verb == "file") {
      const std::string name = rest.substr(0, rest.find(' '));
      const std::string content = rest.find(' ') == std::string::npos ? "" : rest.substr(rest.find(' ') + 1) + "\n";
      const std::string path = spec->harvest_dir + "/" + name;
      util::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
      if (!fd.valid() || !util::write_all(fd.get(), content.data(), content.size())) return 3;
      o.files.push_back(sandbox::HarvestedFile{name, content.size(), path, ""});
    } else if (verb == "progress") {
      write_line(nlohmann::json{{"progress", {{"elapsed_ms", 1}, {"stdout_bytes", o.stdout_text.size()}}}}.dump());
    } else if (verb == "wait") {
      int sig = 0;
      ::sigwait(&term, &sig);
      o.status = sandbox::Status::cancelled;
      o.exited = false;
      break;
    } else if (verb == "hang") {
      for (;;) ::pause();
    } else if (verb == "die") {
      return 1;
    } else if (verb == "garbage") {
      write_line("this is not the outcome");
      return 0;
    }
  }
  o.duration_ms = 1;
  write_line(sandbox::to_json(o).dump());
  return 0;
}
