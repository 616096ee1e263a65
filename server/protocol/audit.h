// The audit log: append-only JSON lines in <state>/audit.log, one record per
// tool call, rotated at a size bound (one previous file kept as audit.log.1).
// Records hashes, ids, limits, layers, outcomes and verdicts: never code
// text, input contents, environment values or tokens. Thread-safe.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

namespace protocol {

class Audit {
 public:
  Audit(std::string path, uint64_t max_bytes);
  void append(nlohmann::json record);  // adds "time"; never throws

 private:
  std::string path_;
  uint64_t max_bytes_;
  std::mutex mu_;
};

// The record for one tools/call, from its arguments and its result.
nlohmann::json audit_record(const std::string& tenant, const std::string& tool, const nlohmann::json& args,
                            const nlohmann::json& result, int64_t duration_ms);

}  // namespace protocol
