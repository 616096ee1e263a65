// doctest's runner for unit_tests, the one executable of every
// tests/unit/*_test.cpp. ctest runs it once per case, the case selected by
// --source-file and --test-case (tests/unit/discover_cases.cmake): a run whose
// selection matches no case fails here, where doctest alone would pass with
// nothing run, so a case that is renamed or not matched cannot pass unseen.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

namespace {

bool g_ran = false;       // a test run, not a query such as --list-test-cases
unsigned g_selected = 0;  // cases the selection matched

struct SelectionCount : doctest::IReporter {
  explicit SelectionCount(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override {
    g_ran = true;
    g_selected = stats.numTestCasesPassingFilters;
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

}  // namespace

DOCTEST_REGISTER_LISTENER("selection_count", 0, SelectionCount);

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int rc = context.run();
  if (g_ran && g_selected == 0) {
    std::fputs("unit_tests: no test case matches the selection\n", stderr);
    return 1;
  }
  return rc;
}
