// A fresh directory under /tmp for one test case, removed with all it holds
// when the case ends.
#pragma once
#include <doctest/doctest.h>

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace unit {

struct TempDir {
  std::string path;
  // /tmp/throwbox-<tag>-test-XXXXXX, of the given mode.
  explicit TempDir(const std::string& tag = "unit", mode_t mode = 0700) {
    std::string tmpl = "/tmp/throwbox-" + tag + "-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
    ::chmod(path.c_str(), mode);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // The file `name` in it with `text`, of `mode`: its path.
  std::string write(const std::string& name, const std::string& text, mode_t mode = 0644) const {
    std::string p = path + "/" + name;
    std::ofstream(p) << text;
    ::chmod(p.c_str(), mode);
    return p;
  }
};

}  // namespace unit
