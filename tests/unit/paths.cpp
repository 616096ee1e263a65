// The one unit-test object compiled with the tree's and the build's absolute
// paths (tests/unit/CMakeLists.txt defines them for this file alone).
#include "tests/unit/paths.h"

namespace unit {

std::string source_dir() { return THROWBOX_SOURCE_DIR; }
std::string build_dir() { return THROWBOX_BUILD_DIR; }

}  // namespace unit
