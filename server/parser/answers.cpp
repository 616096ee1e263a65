// What a parser helper child answers (answers.h). Runs in the child only,
// on bytes a job or a client made.
#include "server/parser/answers.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "server/artifacts/inspect.h"
#include "server/network/head.h"
#include "server/network/inner_head.h"
#include "server/util/text.h"

namespace parser {

Message failure(const std::string& why) {
  Message m;
  m.kind = Kind::kFailure;
  m.meta = {{"error", why}};
  return m;
}

nlohmann::json probe() {
  auto outcome = [](long r) { return r >= 0 ? std::string("allowed") : util::errno_name(errno); };
  nlohmann::json out;
  int fd = ::open("/etc/passwd", O_RDONLY | O_CLOEXEC);
  out["open"] = outcome(fd);
  if (fd >= 0) ::close(fd);
  fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  out["socket"] = outcome(fd);
  if (fd >= 0) ::close(fd);
  out["kill"] = outcome(::kill(1, 0));
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  out["fork"] = outcome(pid);
  char* const argv[] = {const_cast<char*>("/bin/true"), nullptr};
  out["exec"] = outcome(::execve("/bin/true", argv, nullptr));
  return out;
}

Message answer_for(const Message& request, const artifacts::types::Sniffer& sniffer) {
  Message out;
  out.kind = Kind::kAnswer;
  switch (request.kind) {
    case Kind::kInspectArtifact: {
      if (!request.meta.contains("name") || !request.meta["name"].is_string() || !request.meta.contains("policy"))
        return failure("inspect: needs name and policy");
      auto policy = artifacts::gate_policy_from_json(request.meta["policy"]);
      if (!policy) return failure(policy.error().message);
      artifacts::Inspection i =
          artifacts::inspect(request.meta["name"].get<std::string>(), request.bytes, sniffer, *policy);
      out.meta = artifacts::to_json(i);
      if (i.changed) out.bytes = std::move(i.verdict.content);
      return out;
    }
    case Kind::kUploadType: {
      if (!request.meta.contains("name") || !request.meta["name"].is_string() || !request.meta.contains("allowed") ||
          !request.meta["allowed"].is_array())
        return failure("upload type: needs name and allowed");
      std::vector<std::string> allowed;
      for (auto& a : request.meta["allowed"])
        if (a.is_string()) allowed.push_back(a.get<std::string>());
      out.meta = {{"media_type", artifacts::upload_media_type(request.meta["name"].get<std::string>(), request.bytes,
                                                              sniffer, allowed)}};
      return out;
    }
    case Kind::kRequestHead: {
      network::Head head = network::parse_head(request.bytes);
      out.meta = network::to_json(head);
      out.bytes = std::move(head.forward);
      return out;
    }
    case Kind::kInnerRequest: {
      auto dest = network::parse_authority(request.meta.value("authority", ""), std::nullopt);
      if (!dest) return failure("inner request: authority: " + dest.error().message);
      network::InnerRequest inner =
          network::parse_inner_request(request.bytes, *dest, request.meta.value("credential_header", ""));
      out.meta = network::to_json(inner);
      out.bytes = std::move(inner.forward);
      return out;
    }
    case Kind::kProbe:
      out.meta = probe();
      return out;
    case Kind::kAnswer:
    case Kind::kFailure:
      break;
  }
  return failure("not a request");
}

}  // namespace parser
