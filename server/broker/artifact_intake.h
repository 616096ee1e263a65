// A finished job's harvested files through the gate into the store: each
// becomes an ArtifactSummary (stored with an id, or rejected with a reason).
// Runs on the job's worker thread, on the trusted side.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "server/artifacts/gate.h"
#include "server/broker/job.h"
#include "server/store/store.h"

namespace broker {

// file_max_read_bytes: the most read back of one harvested file (the policy's outputs cap).
std::vector<ArtifactSummary> store_artifacts(const artifacts::Gate& gate, store::Store& store,
                                             uint64_t file_max_read_bytes, const std::string& tenant,
                                             const std::string& job_id, const sandbox::Outcome& outcome);

}  // namespace broker
