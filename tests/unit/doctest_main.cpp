// doctest's runner, compiled once and linked into every unit test executable
// (compiling it takes about 10 s: once per file was a third of the build).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
