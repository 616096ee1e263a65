// Artifact intake. The harvested copies are host files in the job's scratch
// directory; what is stored is the gate's content (sanitized when it said so).
#include "server/broker/artifact_intake.h"

#include <spdlog/spdlog.h>

#include "server/util/crypto.h"
#include "server/util/fs.h"

namespace broker {

std::vector<ArtifactSummary> store_artifacts(const artifacts::Gate& gate, store::Store& store,
                                             uint64_t file_max_read_bytes, const std::string& tenant,
                                             const std::string& job_id, const sandbox::Outcome& outcome) {
  std::vector<ArtifactSummary> out;
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
    artifacts::Verdict v = gate.check(f.name, std::move(*content));
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
      a.reason = "could not be stored";
    } else {
      a.artifact_id = stored->artifact_id;
      a.size = stored->size;      // sanitized content may differ from what the job wrote
      a.sha256 = stored->sha256;
    }
    out.push_back(a);
  }
  return out;
}

}  // namespace broker
