// Artifact names (server/artifacts/names.cpp): each refusal has its own
// reason, and ordinary names pass.
#include "server/artifacts/names.h"

#include <doctest/doctest.h>

#include <string>

using artifacts::names::default_extensions;
using artifacts::names::extension;
using artifacts::names::is_executable_extension;
using artifacts::names::problem;

namespace {
std::string why(const std::string& name) { return problem(name).value_or("(none)"); }
}  // namespace

TEST_CASE("ordinary names, also in subdirectories and with non-ASCII letters, pass") {
  for (const char* ok : {"report.csv", "charts/q1.png", "Übersicht 2026.md", "a.b.c.txt", "données.json", "x"})
    CHECK_MESSAGE(!problem(ok), ok, ": ", why(ok));
}

TEST_CASE("bidirectional controls are refused: the name would display as another") {
  // invoice<U+202E>fdp.cmd shows as "invoicedmc.pdf".
  CHECK(why("invoice\u202efdp.cmd").find("bidirectional control character (U+202E)") != std::string::npos);
  for (const char* c :
       {"\u202a", "\u202b", "\u202c", "\u202d", "\u2066", "\u2067", "\u2068", "\u2069", "\u200e", "\u200f", "\u061c"})
    CHECK_MESSAGE(why(std::string("a") + c + ".txt").find("bidirectional") != std::string::npos, why(c));
}

TEST_CASE("control characters, C0, DEL and C1, are refused with their code point") {
  CHECK(why(std::string("a\x01.txt")) == "a control character (U+0001) in the name");
  CHECK(why("a\x7f.txt") == "a control character (U+007F) in the name");
  CHECK(why("a\u0085.txt") == "a control character (U+0085) in the name");
  CHECK(why("dir\n/a.txt") == "a control character (U+000A) in the name");
}

TEST_CASE("a trailing dot or space is refused: Windows drops it on save") {
  CHECK(why("report.csv.").find("ends with a dot") != std::string::npos);
  CHECK(why("summary.csv ").find("ends with a space") != std::string::npos);
  CHECK(why("dir./a.txt").find("ends with a dot") != std::string::npos);
}

TEST_CASE("Windows device names are refused, whatever follows a dot, in any case") {
  for (const char* dev : {"CON", "con.txt", "NUL.csv", "Aux.md", "prn", "COM1.json", "lpt9.txt", "COM\u00b9.txt",
                          "CONIN$.txt", "nul .txt", "dir/NUL.txt"})
    CHECK_MESSAGE(why(dev).find("Windows device name") != std::string::npos, dev, ": ", why(dev));
  for (const char* fine : {"CONSOLE.txt", "COM10.txt", "nullable.txt", "LPT.txt", "com.txt"})
    CHECK_MESSAGE(!problem(fine), fine, ": ", why(fine));
}

TEST_CASE("characters Windows refuses in names are refused, each named") {
  for (char c : std::string("<>:\"|?*\\")) {
    const std::string name = std::string("a") + c + "b.txt";
    CHECK_MESSAGE(why(name) == std::string("the character '") + c + "', which Windows does not allow in file names",
                  name);
  }
}

TEST_CASE("invalid UTF-8 and empty components are refused") {
  CHECK(why("a\xff.txt") == "not valid UTF-8 (byte 1)");
  CHECK(why("a//b.txt") == "an empty path component");
  CHECK(why("../a.txt") == "\"..\" is not a file name");
}

TEST_CASE("extension: the last component's, lowercased; none for a dotfile or no dot") {
  CHECK(extension("Report.CSV") == ".csv");
  CHECK(extension("a.tar.gz") == ".gz");
  CHECK(extension("dir.d/README") == "");
  CHECK(extension(".profile") == "");
  CHECK(extension("x.") == ".");
}

TEST_CASE("default extensions per media type; executable extensions are known") {
  CHECK(default_extensions("text/plain") == std::vector<std::string>{".txt"});
  CHECK(default_extensions("image/jpeg") == std::vector<std::string>{".jpg", ".jpeg"});
  CHECK(default_extensions("application/x-unknown").empty());
  for (const char* x : {".cmd", ".ps1", ".vbs", ".js", ".desktop", ".exe", ".bat", ".lnk", ".hta", ".slk"})
    CHECK_MESSAGE(is_executable_extension(x), x);
  for (const char* x : {".txt", ".csv", ".md", ".png", ".pdf", ".json"}) CHECK_MESSAGE(!is_executable_extension(x), x);
}
