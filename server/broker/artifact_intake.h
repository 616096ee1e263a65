// A finished job's harvested files through the gate into the store: each
// becomes an ArtifactSummary (stored with an id, or rejected with a reason).
// The files' bytes are parsed by a parser helper child of the job's own; the
// gate's decisions around that are made here. Runs on the job's worker
// thread, on the trusted side.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "server/artifacts/gate.h"
#include "server/broker/job.h"
#include "server/helper/client.h"
#include "server/store/store.h"

namespace broker {

// How long one file's inspection may take before its child is killed and the
// file rejected (a PDF of the policy's largest size takes well under a second here).
constexpr int kInspectTimeoutMs = 20000;

// file_max_read_bytes: the most read back of one harvested file (the policy's outputs cap).
std::vector<ArtifactSummary> store_artifacts(const artifacts::Gate& gate, helper::Parsers& parsers, store::Store& store,
                                             uint64_t file_max_read_bytes, const std::string& tenant,
                                             const std::string& job_id, const sandbox::Outcome& outcome);

// An upload's media type, by a parser helper child of its own.
std::string upload_media_type(helper::Parsers& parsers, const std::vector<std::string>& allowed,
                              const std::string& name, const std::string& content);

}  // namespace broker
