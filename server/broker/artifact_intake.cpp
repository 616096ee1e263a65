// Artifact intake. The harvested copies are host files in the job's scratch
// directory; what is stored is the gate's content (sanitized when it said
// so). One parser child serves the job's files in turn; one that fails on a
// file (a crash, no answer in time, nonsense) is killed, the file rejected,
// and the next file gets a new child.
#include "server/broker/artifact_intake.h"

#include <spdlog/spdlog.h>

#include "server/util/crypto.h"
#include "server/util/fs.h"

namespace broker {
namespace {

// The gate's verdict on one file: the name, the helper's inspection, the
// policy's checks of it. `child` is replaced when it fails.
artifacts::Verdict inspect_file(const artifacts::Gate& gate, helper::Parsers& parsers,
                                std::optional<helper::Child>& child, const std::string& name, std::string content) {
  if (auto refused = gate.check_name(name)) return *refused;
  if (content.size() > gate.policy().file_max_bytes)
    return artifacts::rejected("larger than the policy's " + std::to_string(gate.policy().file_max_bytes) +
                               " bytes per file");
  if (content.size() > helper::kRequestBytesMax)
    return artifacts::rejected("larger than the gate inspects (" + std::to_string(helper::kRequestBytesMax) +
                               " bytes)");
  if (!child || !child->alive()) {
    auto made = parsers.child();
    if (!made) {
      spdlog::error("artifact gate: {}", made.error().message);
      return artifacts::rejected("the gate could not inspect it (its parser helper is unavailable); rejected");
    }
    child.emplace(std::move(*made));
  }
  helper::Message request;
  request.kind = helper::Kind::kInspectArtifact;
  request.meta = {{"name", name}, {"policy", artifacts::to_json(gate.policy())}};
  request.bytes = content;
  auto answer = child->call(request, kInspectTimeoutMs, gate.policy().file_max_bytes);
  if (!answer) return artifacts::rejected("the gate's inspection failed on this file (" + answer.error().message + ")");
  return gate.finish(name, answer->meta, std::move(content), std::move(answer->bytes));
}

}  // namespace

std::vector<ArtifactSummary> store_artifacts(const artifacts::Gate& gate, helper::Parsers& parsers, store::Store& store,
                                             uint64_t file_max_read_bytes, const std::string& tenant,
                                             const std::string& job_id, const sandbox::Outcome& outcome) {
  std::vector<ArtifactSummary> out;
  std::optional<helper::Child> child;  // this job's, killed with the call
  for (const sandbox::HarvestedFile& f : outcome.files) {
    ArtifactSummary a;
    a.name = f.name;
    a.size = f.size;
    if (!f.rejected.empty()) {
      a.verdict = artifacts::VerdictKind::kRejected;
      a.reason = f.rejected;
      a.media_type = "application/octet-stream";
      out.push_back(a);
      continue;
    }
    auto content = util::read_file(f.host_path, file_max_read_bytes);
    if (!content) {
      a.verdict = artifacts::VerdictKind::kRejected;
      a.reason = "could not be read back: " + content.error().message;
      out.push_back(a);
      continue;
    }
    a.sha256 = util::sha256_hex(*content);
    artifacts::Verdict v = inspect_file(gate, parsers, child, f.name, std::move(*content));
    a.verdict = v.verdict;
    a.reason = v.reason;
    a.media_type = v.verdict == artifacts::VerdictKind::kRejected ? "application/octet-stream" : v.media_type;
    if (v.verdict == artifacts::VerdictKind::kRejected) {
      out.push_back(a);
      continue;
    }
    store::ArtifactRecord rec;
    rec.job_id = job_id;
    rec.name = f.name;
    rec.media_type = v.media_type;
    rec.verdict = to_string(v.verdict);  // the store keeps the name
    rec.reason = v.reason;
    auto stored = store.put_artifact(tenant, rec, v.content);
    if (!stored) {
      spdlog::error("job {}: storing artifact {}: {}", job_id, f.name, stored.error().message);
      a.verdict = artifacts::VerdictKind::kRejected;
      a.reason = "could not be stored: " + store::client_message(stored.error());
    } else {
      a.artifact_id = stored->artifact_id;
      a.size = stored->size;  // sanitized content may differ from what the job wrote
      a.sha256 = stored->sha256;
    }
    out.push_back(a);
  }
  return out;
}

std::string upload_media_type(helper::Parsers& parsers, const std::vector<std::string>& allowed,
                              const std::string& name, const std::string& content) {
  constexpr const char* kUnknown = "application/octet-stream";
  if (content.size() > helper::kRequestBytesMax) return kUnknown;
  auto child = parsers.child();
  if (!child) {
    spdlog::error("upload type: {}", child.error().message);
    return kUnknown;
  }
  helper::Message request;
  request.kind = helper::Kind::kUploadType;
  request.meta = {{"name", name}, {"allowed", allowed}};
  request.bytes = content;
  auto answer = child->call(request, kInspectTimeoutMs, 0);
  if (!answer) return kUnknown;
  // A media type, as libmagic names them: type/subtype, nothing else.
  const std::string type = answer->meta.value("media_type", "");
  if (type.empty() || type.size() > 127 || type.find('/') == std::string::npos ||
      type.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789/+-.") != std::string::npos)
    return kUnknown;
  return type;
}

}  // namespace broker
