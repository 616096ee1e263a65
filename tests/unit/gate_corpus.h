// The table-driven corpora of tests/gate_corpus/<check>/: one file per case
// and a cases.json manifest ({file, expect, reason_contains, reader, source}).
// check_corpus runs every case through a judge and checks its verdict name
// ("accepted" | "sanitized" | "rejected") and reason; include after doctest.
#pragma once
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include "tests/unit/paths.h"

namespace gate_corpus {

struct Judged {
  std::string verdict;  // "accepted" | "sanitized" | "rejected"
  std::string reason;
};

inline const std::filesystem::path kRoot = std::filesystem::path(unit::source_dir()) / "tests" / "gate_corpus";

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// judge(file_name, content) -> Judged. Every file in dir must be a case and
// every case a file. Returns the number of cases.
template <typename Judge>
size_t check_corpus(const std::filesystem::path& dir, Judge judge) {
  nlohmann::json cases = nlohmann::json::parse(read_file(dir / "cases.json"));
  REQUIRE(cases.is_array());
  std::set<std::string> listed;
  for (const nlohmann::json& c : cases) {
    const std::string file = c.at("file").get<std::string>();
    const std::string expect = c.at("expect").get<std::string>();
    const std::string reason_part = c.at("reason_contains").get<std::string>();
    CAPTURE(file);
    CHECK_MESSAGE(listed.insert(file).second, "listed twice");
    CHECK(!c.at("reader").get<std::string>().empty());
    CHECK(!c.at("source").get<std::string>().empty());
    REQUIRE((expect == "rejected" || expect == "accepted" || expect == "sanitized"));
    if (expect != "accepted") CHECK(!reason_part.empty());
    Judged j = judge(file, read_file(dir / file));
    CHECK_MESSAGE(j.verdict == expect, "expected " << expect << ", got " << j.verdict << ": " << j.reason);
    CHECK_MESSAGE(j.reason.find(reason_part) != std::string::npos, "reason: " << j.reason);
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::string name = entry.path().filename().string();
    if (name != "cases.json") CHECK_MESSAGE(listed.count(name) == 1, name << " is not in cases.json");
  }
  return cases.size();
}

}  // namespace gate_corpus
