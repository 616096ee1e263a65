// Where the unit tests find the tree (policies, fixtures, documents) and the
// build (the runner, the parser helper, the fake runner). Only paths.cpp
// names the absolute directories, so every other test object is the same in
// any clone of the tree (ccache hits across clones).
#pragma once
#include <string>

namespace unit {

std::string source_dir();
std::string build_dir();
// source_dir() or build_dir() followed by `rest` ("/policies/default.json").
inline std::string source_path(const std::string& rest) { return source_dir() + rest; }
inline std::string build_path(const std::string& rest) { return build_dir() + rest; }

}  // namespace unit
