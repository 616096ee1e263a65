// CSV/TSV formula-injection gate: RFC 4180 parsing, neutralisation, reject mode,
// and the byte-for-byte guarantees for files that need no change.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <random>
#include <string>

#include "server/artifacts/csv.h"

using namespace std::string_literals;
using artifacts::csv::is_dangerous_cell;
using artifacts::csv::Mode;
using artifacts::csv::process;
using artifacts::csv::Result;

namespace {

const std::string kBom = "\xEF\xBB\xBF";

Result neutralise(std::string_view in, char delimiter = ',') {
  return process(in, delimiter, Mode::kNeutralise);
}

Result reject(std::string_view in, char delimiter = ',') {
  return process(in, delimiter, Mode::kReject);
}

// Asserts the file passes untouched.
void check_unchanged(std::string_view in, char delimiter = ',') {
  const Result r = neutralise(in, delimiter);
  CHECK(r.ok);
  CHECK(r.output == in);
  CHECK(r.cells_changed == 0);
  CHECK(r.cells_dangerous == 0);
  CHECK(r.reason.empty());
}

}  // namespace

TEST_CASE("the seed exceptions CSV passes unchanged with 0 cells changed") {
  const std::string seed =
      "kind,transaction_id,order_id,amount,detail\n"
      "duplicate,tx1,A101,120.00,\"repeated export row, counted once\"\n"
      "unmatched,tx4,A999,30.00,order not in orders export\n"
      "shortfall,,A103,50.00,expected 150.00 paid 100.00\n";
  check_unchanged(seed);
  const Result r = reject(seed);
  CHECK(r.ok);
  CHECK(r.output == seed);
}

TEST_CASE("quoted fields with embedded commas, quotes, LF and CRLF are parsed as one cell") {
  check_unchanged("a,\"x, y\",b\n");                         // a comma inside quotes
  // ... though a reader splitting on it sees " =1+1" (issue 16).
  CHECK(neutralise("a,\"x, =1+1\",b\n").output == "a,\"x,' =1+1\",b\n");
  check_unchanged("a,\"say \"\"=hi\"\"\",b\n");             // value: say "=hi"
  check_unchanged("a,\"line1\n=1+1\",b\n");                 // '=' after an embedded LF
  check_unchanged("a,\"line1\r\n=1+1\",b\r\n");             // '=' after an embedded CRLF
  check_unchanged("\"\",\"\"\"\"\n");                       // empty quoted, a lone quote

  // A dangerous quoted cell keeps its quotes and everything inside them.
  const Result r = neutralise("a,\"=HYPERLINK(\"\"http://x\"\",\"\"a,b\"\")\nmore\",c\n");
  CHECK(r.ok);
  CHECK(r.output == "a,\"'=HYPERLINK(\"\"http://x\"\",\"\"a,b\"\")\nmore\",c\n");
  CHECK(r.cells_changed == 1);
}

TEST_CASE("a UTF-8 BOM is preserved and is not part of the first cell") {
  check_unchanged(kBom + "-80.00,x\n");  // would be text were the BOM part of the cell
  {
    const Result r = neutralise(kBom + "=1+1,x\n");
    CHECK(r.ok);
    CHECK(r.output == kBom + "'=1+1,x\n");
    CHECK(r.cells_changed == 1);
  }
  {
    // The first cell is still recognised as quoted after the BOM.
    const Result r = neutralise(kBom + "\"=a,b\",x\n");
    CHECK(r.ok);
    CHECK(r.output == kBom + "\"'=a,b\",x\n");
  }
  check_unchanged(kBom);
}

TEST_CASE("CRLF files stay CRLF and LF files stay LF") {
  {
    const Result r = neutralise("h1,h2\r\n=1,ok\r\nok,@x\r\n");
    CHECK(r.ok);
    CHECK(r.output == "h1,h2\r\n'=1,ok\r\nok,'@x\r\n");
    CHECK(r.cells_changed == 2);
  }
  {
    const Result r = neutralise("h1,h2\n=1,ok\nok,@x\n");
    CHECK(r.output == "h1,h2\n'=1,ok\nok,'@x\n");
  }
  {
    // Mixed endings are kept exactly as they were.
    const Result r = neutralise("a\r\n=b\nc\r\n");
    CHECK(r.output == "a\r\n'=b\nc\r\n");
  }
}

TEST_CASE("plain numbers with a sign are not formulas and stay untouched") {
  for (const char* v : {"-80.00", "+3", "-0.5", "1e-5", "-.5", "-1e5", "+1E+10", "-5.", "-0",
                        "+.25e-3", "-12345678901234567890"}) {
    CAPTURE(v);
    CHECK_FALSE(is_dangerous_cell(v));
  }
  check_unchanged("amount,delta\n-80.00,+3\n-0.5,1e-5\n");
  check_unchanged("\"-80.00\",\"+3\"\n");  // quoting does not change the value
}

TEST_CASE("signs that do not form a plain number are formula triggers") {
  for (const char* v : {"-", "+", "-1+2", "-A1", "+A1", "-1e", "-1e+", "-.", "-1.2.3", "+-1",
                        "-1 ", "--1", "-1,5", "-1e5+cmd|' /C calc'!A0"}) {
    CAPTURE(v);
    CHECK(is_dangerous_cell(v));
  }
}

TEST_CASE("each ASCII trigger character is neutralised") {
  for (const char* v : {"=1+1", "+1+1", "-1+1", "@SUM(A1)", "\t=cmd", "\r=cmd",
                        "=cmd|' /C calc'!A0"}) {
    CAPTURE(v);
    CHECK(is_dangerous_cell(v));
  }
  const Result r = neutralise("=1+1,+1+1,-1+1,@SUM(A1)\n");
  CHECK(r.ok);
  CHECK(r.output == "'=1+1,'+1+1,'-1+1,'@SUM(A1)\n");
  CHECK(r.cells_changed == 4);
  CHECK(r.cells_dangerous == 4);
  CHECK(r.reason == "4 cells starting with =, +, -, @, tab or CR were prefixed with an apostrophe");
}

TEST_CASE("each full-width trigger (U+FF1D, U+FF0B, U+FF0D, U+FF20) is neutralised") {
  const std::string eq = "\xEF\xBC\x9D", plus = "\xEF\xBC\x8B", minus = "\xEF\xBC\x8D",
                    at = "\xEF\xBC\xA0";
  for (const std::string& t : {eq, plus, minus, at}) {
    CAPTURE(t);
    CHECK(is_dangerous_cell(t + "1+1"));
    CHECK(is_dangerous_cell(t));
  }
  CHECK(is_dangerous_cell(minus + "1"));  // a full-width sign never makes a plain number
  const Result r = neutralise(eq + "1+1," + plus + "A1,\"" + minus + "1+1\"," + at + "SUM(A1)\n");
  CHECK(r.ok);
  CHECK(r.output ==
        "'" + eq + "1+1,'" + plus + "A1,\"'" + minus + "1+1\",'" + at + "SUM(A1)\n");
  CHECK(r.cells_changed == 4);
  // Other full-width characters in the same block are harmless.
  CHECK_FALSE(is_dangerous_cell("\xEF\xBC\xA1"));  // U+FF21 Ａ
}

TEST_CASE("a header row with =HYPERLINK(...) is neutralised like any other row") {
  {
    const Result r = neutralise(
        "\"=HYPERLINK(\"\"http://evil.example\"\",\"\"click\"\")\",name\n1,alice\n");
    CHECK(r.ok);
    CHECK(r.output ==
          "\"'=HYPERLINK(\"\"http://evil.example\"\",\"\"click\"\")\",name\n1,alice\n");
    CHECK(r.cells_changed == 1);
  }
  {
    // Unquoted, with literal quotes and no comma: only the apostrophe is added.
    const Result r = neutralise("=HYPERLINK(\"http://evil.example\"),name\n1,alice\n");
    CHECK(r.ok);
    CHECK(r.output == "'=HYPERLINK(\"http://evil.example\"),name\n1,alice\n");
    CHECK(r.cells_changed == 1);
  }
}

TEST_CASE("TAB and CR as first character are triggers") {
  {
    // Unquoted TAB in a CSV is part of the cell; a TAB-splitting reader sees "=cmd".
    const Result r = neutralise("a,\t=cmd\n");
    CHECK(r.output == "a,'\t'=cmd\n");
    CHECK(r.cells_changed == 2);
  }
  {
    // A cell can only start with CR when quoted: outside quotes CR ends the record.
    const Result r = neutralise("a,\"\r=cmd\"\n");
    CHECK(r.output == "a,\"'\r=cmd\"\n");
    CHECK(r.cells_changed == 1);
  }
  CHECK(is_dangerous_cell("\t"));
  CHECK(is_dangerous_cell("\t-1"));  // not a plain number once the TAB is counted
}

TEST_CASE("leading spaces do not hide a trigger") {
  CHECK(is_dangerous_cell(" =1+1"));
  CHECK(is_dangerous_cell("   @SUM(A1)"));
  CHECK(is_dangerous_cell(" \t=1"));
  CHECK(is_dangerous_cell("\n=1+1"));
  CHECK(is_dangerous_cell(" \"=1+1\""));  // some importers trim then honour the quote
  CHECK_FALSE(is_dangerous_cell(" -1"));   // still a plain number
  CHECK_FALSE(is_dangerous_cell("   "));
  CHECK_FALSE(is_dangerous_cell("a =1"));
  const Result r = neutralise("x, =1+1\n");
  CHECK(r.output == "x,' =1+1\n");
  CHECK(r.cells_changed == 1);
}

TEST_CASE("harmless values are not triggers") {
  for (const char* v : {"", "abc", "1+1", "a=b", "'=1+1", "A1", ".5", "100%", "#REF!", "%", "e=mc2",
                        "\xE2\x88\x92" "1"}) {  // U+2212 MINUS SIGN is not a formula start
    CAPTURE(v);
    CHECK_FALSE(is_dangerous_cell(v));
  }
}

TEST_CASE("counts are exact across rows, columns and quoting") {
  const Result r = neutralise("=a,b,\"+c\"\n-1,-x,@\n,\"\",\" =\"\n");
  CHECK(r.ok);
  CHECK(r.output == "'=a,b,\"'+c\"\n-1,'-x,'@\n,\"\",\"' =\"\n");
  CHECK(r.cells_changed == 5);
  CHECK(r.cells_dangerous == 5);
  CHECK(r.reason == "5 cells starting with =, +, -, @, tab or CR were prefixed with an apostrophe");

  const Result one = neutralise("a,=b\n");
  CHECK(one.reason == "1 cell starting with =, +, -, @, tab or CR was prefixed with an apostrophe");
}

TEST_CASE("neutralising is idempotent: the output needs no further change") {
  const std::string in = "=1,\"+2\",\t-x, =y,@z\r\n\"\r=cmd\",-1+1,\"\xEF\xBC\x9D" "1\"\n";
  const Result first = neutralise(in);
  REQUIRE(first.ok);
  CHECK(first.cells_changed == 8);  // "\t-x" twice: the cell and "-x" after its TAB
  check_unchanged(first.output);
}

TEST_CASE("TSV: tab is the delimiter, and a cell starts with TAB only when quoted") {
  {
    const Result r = neutralise("name\tformula\nalice\t=1+1\nbob\t-3\n", '\t');
    CHECK(r.ok);
    CHECK(r.output == "name\tformula\nalice\t'=1+1\nbob\t-3\n");
    CHECK(r.cells_changed == 1);
  }
  check_unchanged("a\t\tb\n", '\t');       // an empty cell between two tabs
  check_unchanged("a,b\tc\n", '\t');       // a comma is not a delimiter in TSV
  {
    const Result r = neutralise("a\t\"\t=cmd\"\n", '\t');
    CHECK(r.output == "a\t\"'\t'=cmd\"\n");
    CHECK(r.cells_changed == 2);
  }
}

// Issue 16 (found by tests/fuzz/csv_fuzz): a reader splitting on another
// separator than the file's (a ';' locale opening a comma file, a TSV opened
// as CSV) sees the pieces of a value as cells, so "x;=cmd()" held a formula.
TEST_CASE("issue 16: a formula after ',', ';' or TAB inside a value is neutralised") {
  {
    const Result r = neutralise("a,\"x;=cmd()\"\n");
    CHECK(r.ok);
    CHECK(r.output == "a,\"x;'=cmd()\"\n");
    CHECK(r.cells_changed == 1);
    CHECK(r.cells_dangerous == 1);
  }
  {
    const Result r = neutralise("a,=b\tc\n", '\t');  // a comma reader: "a" and "=b\tc"
    CHECK(r.output == "a,'=b\tc\n");
  }
  {
    const Result r = neutralise("\t-x\n");  // the cell, and "-x" after its TAB
    CHECK(r.output == "'\t'-x\n");
    CHECK(r.cells_changed == 2);
    CHECK(r.cells_dangerous == 1);
    CHECK(r.reason == "1 cell starting with =, +, -, @, tab or CR was prefixed with an apostrophe");
  }
  {
    // Offsets in a quoted value count its "" escapes: the apostrophe lands after the ';'.
    const Result r = neutralise("\"\"\"q\"\";@x\"\n");
    CHECK(r.output == "\"\"\"q\"\";'@x\"\n");
  }
  check_unchanged("\"1;-5;+3;2e5\"\n");   // numbers after a separator are numbers
  check_unchanged("\"a; b, c\"\n");
  CHECK_FALSE(reject("\"x;=cmd()\"\n").ok);
}

TEST_CASE("reject mode refuses a dangerous file and names the first cell") {
  const Result r = reject("h1,h2,h3\nok,ok,=1+1\n@x,ok,ok\n");
  CHECK_FALSE(r.ok);
  CHECK(r.output.empty());
  CHECK(r.cells_dangerous == 2);
  CHECK(r.cells_changed == 0);
  CHECK(r.reason ==
        "2 cells start with =, +, -, @, tab or CR (spreadsheet formula injection); the first "
        "is at row 2, column 3");

  // Rows are records: a quoted newline does not advance the row.
  const Result one = reject("\"a\nb\",x\nc,-y\n");
  CHECK_FALSE(one.ok);
  CHECK(one.reason ==
        "1 cell starts with =, +, -, @, tab or CR (spreadsheet formula injection); the first is "
        "at row 2, column 2");

  const std::string clean = "a,-1\nb,+2.5\n";
  const Result ok = reject(clean);
  CHECK(ok.ok);
  CHECK(ok.output == clean);
  CHECK(ok.reason.empty());
}

TEST_CASE("an unterminated quoted field fails with its line number") {
  {
    const Result r = neutralise("a,b\nc,\"never closed\nmore\n");
    CHECK_FALSE(r.ok);
    CHECK(r.output.empty());
    CHECK(r.reason == "unterminated quoted field starting on line 2 (row 2, column 2)");
  }
  {
    const Result r = reject("\"x\r\ny\",z\r\n\"open");
    CHECK_FALSE(r.ok);
    CHECK(r.reason == "unterminated quoted field starting on line 3 (row 2, column 1)");
  }
  {
    // An escaped quote at EOF does not close the field.
    const Result r = neutralise("\"abc\"\"");
    CHECK_FALSE(r.ok);
    CHECK(r.reason == "unterminated quoted field starting on line 1 (row 1, column 1)");
  }
}

TEST_CASE("text after a closing quote is refused: readers disagree on its value") {
  const Result r = neutralise("a\n\"\"=1+1,b\n");  // some readers see the cell "=1+1"
  CHECK_FALSE(r.ok);
  CHECK(r.output.empty());
  CHECK(r.reason == "unexpected text after the closing quote of a quoted field on line 2 "
                    "(row 2, column 1)");
  CHECK_FALSE(neutralise("\"a\" ,b\n").ok);
}

TEST_CASE("a quote inside an unquoted field is a literal character") {
  check_unchanged("ab\"c,d\"e\n");
  const Result r = neutralise("a\"b,=c\"\n");
  CHECK(r.ok);
  CHECK(r.output == "a\"b,'=c\"\n");
}

TEST_CASE("a lone CR ends a record so CR-splitting readers see no hidden formula") {
  const Result r = neutralise("a\r=cmd()\rb\n");
  CHECK(r.ok);
  CHECK(r.output == "a\r'=cmd()\rb\n");
  CHECK(r.cells_changed == 1);
  const Result rej = reject("a,b\r=c\n");
  CHECK(rej.reason ==
        "1 cell starts with =, +, -, @, tab or CR (spreadsheet formula injection); the first is "
        "at row 2, column 1");
}

TEST_CASE("a sep= directive naming another delimiter is refused") {
  const Result r = neutralise("sep=;\na;=cmd()\n");
  CHECK_FALSE(r.ok);
  CHECK(r.reason == "first line is a \"sep=\" directive naming a delimiter other than ','; "
                    "spreadsheets would split cells differently from this check");
  CHECK_FALSE(neutralise(kBom + "SEP=|\nx\n").ok);
  CHECK_FALSE(neutralise("sep=,\n", '\t').ok);
  check_unchanged("sep=,\na,b\n");
  check_unchanged("sep=\t\na\tb\n", '\t');
  check_unchanged("separator\n");
}

TEST_CASE("empty input and a BOM alone are fine") {
  check_unchanged("");
  check_unchanged(kBom);
  check_unchanged("\n");
  check_unchanged("\r\n\r\n");
  const Result r = reject("");
  CHECK(r.ok);
  CHECK(r.output.empty());
}

TEST_CASE("the last line may lack a newline") {
  check_unchanged("a,b\nc,d");
  {
    const Result r = neutralise("a,b\nc,=d");
    CHECK(r.output == "a,b\nc,'=d");
  }
  {
    const Result r = neutralise("a,b\nc,\"=d\"");
    CHECK(r.output == "a,b\nc,\"'=d\"");
  }
  check_unchanged("a,");  // a trailing delimiter means one more, empty, cell
}

TEST_CASE("max_cells bounds the work and names the limit") {
  CHECK(process("a,b\nc,d\n", ',', Mode::kNeutralise, 4).ok);
  CHECK(process("a,b,", ',', Mode::kNeutralise, 3).ok);
  {
    const Result r = process("a,b\nc,d\ne\n", ',', Mode::kNeutralise, 4);
    CHECK_FALSE(r.ok);
    CHECK(r.output.empty());
    CHECK(r.reason == "more than 4 cells (max_cells); refused at line 3 (row 3, column 1)");
  }
  {
    const Result r = process("a,b,", ',', Mode::kReject, 2);  // the empty last cell counts
    CHECK_FALSE(r.ok);
    CHECK(r.reason == "more than 2 cells (max_cells); refused at line 1 (row 1, column 3)");
  }
  CHECK(process("", ',', Mode::kNeutralise, 0).ok);
}

TEST_CASE("an unsupported delimiter is refused rather than guessed") {
  const Result r = process("a;b\n", ';', Mode::kNeutralise);
  CHECK_FALSE(r.ok);
  CHECK(r.reason == "unsupported delimiter 0x3B; expected ',' or tab");
  CHECK_FALSE(process("a\"b\n", '"', Mode::kNeutralise).ok);
}

TEST_CASE("a 1 MB generated file is processed in one pass") {
  std::string in = "id,amount,formula,note\r\n";
  size_t expected = 0;
  for (size_t i = 0; in.size() < (1u << 20); ++i) {
    in += std::to_string(i) + ",-" + std::to_string(i % 1000) + ".25,";
    if (i % 10 == 0) {
      in += "=A" + std::to_string(i) + "+1";
      ++expected;
    } else {
      in += "plain";
    }
    in += ",\"quoted, with \"\"escapes\"\"\nand a newline\"\r\n";
  }
  const Result r = neutralise(in);
  REQUIRE(r.ok);
  CHECK(r.cells_changed == expected);
  CHECK(r.output.size() == in.size() + expected);
  check_unchanged(r.output);
  const Result rej = reject(in);
  CHECK_FALSE(rej.ok);
  CHECK(rej.cells_dangerous == expected);
}

TEST_CASE("random inputs: neutralised output is stable, only adds apostrophes, agrees with reject") {
  // Alphabet chosen to hit every parser state: quotes, both terminators, both
  // delimiters, triggers, spaces and digits.
  static constexpr char kAlphabet[] = ",\"\r\n\t=+-@ a1.e'";
  std::mt19937 rng(20240611);
  std::uniform_int_distribution<size_t> pick(0, sizeof(kAlphabet) - 2);
  std::uniform_int_distribution<size_t> length(0, 24);
  for (int iteration = 0; iteration < 5000; ++iteration) {
    std::string in;
    for (size_t k = length(rng); k > 0; --k) in.push_back(kAlphabet[pick(rng)]);
    for (char delimiter : {',', '\t'}) {
      CAPTURE(in);
      const Result n = neutralise(in, delimiter);
      const Result r = reject(in, delimiter);
      if (!n.ok) {
        CHECK(n.output.empty());
        CHECK_FALSE(r.ok);
        CHECK(r.reason == n.reason);  // a parse error is the same in both modes
        continue;
      }
      CHECK(n.output.size() == in.size() + n.cells_changed);
      CHECK(n.cells_changed >= n.cells_dangerous);  // a cell may hold several dangerous pieces
      CHECK(r.cells_dangerous == n.cells_dangerous);
      CHECK(r.ok == (n.cells_changed == 0));
      const Result again = neutralise(n.output, delimiter);
      CHECK(again.ok);
      CHECK(again.cells_changed == 0);
      CHECK(again.output == n.output);
          // Dropping the inserted apostrophes gives back the input exactly.
      std::string restored;
      size_t j = 0;
      for (char c : n.output) {
        if (j < in.size() && c == in[j]) {
          restored.push_back(c);
          ++j;
        } else {
          CHECK(c == '\'');
        }
      }
      CHECK(restored == in);
    }
  }
}
