// CSV/TSV formula-injection gate: RFC 4180 parsing, the readers on ',', ';', TAB,
// '|' and "sep=", neutralisation, reject mode, the byte-for-byte guarantees for
// files that need no change, and the table-driven corpus in tests/gate_corpus/csv.
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "server/artifacts/csv.h"
#include "tests/unit/paths.h"

using namespace std::string_literals;
using artifacts::csv::is_dangerous_cell;
using artifacts::csv::Mode;
using artifacts::csv::process;
using artifacts::csv::Result;

namespace {

const std::string kBom = "\xEF\xBB\xBF";
const std::string kCmd = "cmd|' /C calc'!A0";
const std::string kReaders = "for a reader splitting on ',', ';', tab or '|'";
const std::string kTsvReaders = "for a reader splitting on tab, ',', ';' or '|'";
const std::string kTriggers = "(=, +, -, @, tab, CR or a Unicode form of them) ";

std::string sanitized_reason(const std::string& cells, const std::string& apostrophes, const std::string& first,
                             const std::string& readers = kReaders) {
  return cells + " a formula " + kTriggers + readers + "; " + apostrophes + " inserted; the first is at " + first;
}

Result neutralise(std::string_view in, char delimiter = ',') { return process(in, delimiter, Mode::kNeutralise); }

Result reject(std::string_view in, char delimiter = ',') { return process(in, delimiter, Mode::kReject); }

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

TEST_CASE("the reconciliation example's exceptions CSV passes unchanged with 0 cells changed") {
  const std::string exceptions =
      "kind,transaction_id,order_id,amount,detail\n"
      "duplicate,tx1,A101,120.00,\"repeated export row, counted once\"\n"
      "unmatched,tx4,A999,30.00,order not in orders export\n"
      "shortfall,,A103,50.00,expected 150.00 paid 100.00\n";
  check_unchanged(exceptions);
  const Result r = reject(exceptions);
  CHECK(r.ok);
  CHECK(r.output == exceptions);
}

TEST_CASE("quoted fields with embedded commas, quotes, LF and CRLF are parsed as one cell") {
  check_unchanged("a,\"x, y\",b\n");  // a comma inside quotes
  // ... though a reader splitting on it sees " =1+1": the apostrophe
  // goes right before the trigger, after what that reader may trim.
  CHECK(neutralise("a,\"x, =1+1\",b\n").output == "a,\"x, '=1+1\",b\n");
  check_unchanged("a,\"say \"\"=hi\"\"\",b\n");  // value: say "=hi"
  check_unchanged("a,\"line1\nline2\",b\n");     // an embedded LF
  check_unchanged("\"line1\r\nline2\",b\r\n");   // an embedded CRLF
  check_unchanged("\"\",\"\"\"\"\n");            // empty quoted, a lone quote

  // A dangerous quoted cell keeps its quotes and everything inside them.
  const Result r = neutralise("a,\"=HYPERLINK(\"\"http://x\"\",\"\"a,b\"\")\nmore\",c\n");
  CHECK(r.ok);
  CHECK(r.output == "a,\"'=HYPERLINK(\"\"http://x\"\",\"\"a,b\"\")\nmore\",c\n");
  CHECK(r.cells_changed == 1);
}

TEST_CASE("a UTF-8 BOM is preserved and is not part of the first cell") {
  check_unchanged(kBom + "-80.00,5\n");  // would be text were the BOM part of the cell
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
  for (const char* v : {"-80.00", "+3", "-0.5", "1e-5", "-.5", "-1e5", "+1E+10", "-5.", "-0", "+.25e-3",
                        "-12345678901234567890", "-1,5", "+1.234,56", "-1.2.3", "-1 ", " -1", "-1\""}) {
    CAPTURE(v);
    CHECK_FALSE(is_dangerous_cell(v));
  }
  check_unchanged("amount,delta\n-80.00,+3\n-0.5,1e-5\n");
  check_unchanged("\"-80.00\",\"+3\"\n");  // quoting does not change the value
}

// A ';' reader opening "-1,-2" sees one cell "-1,-2": plain numbers joined by
// reader delimiters name no function, reference or DDE server.
TEST_CASE("numbers joined by reader delimiters are a number list, not a formula") {
  for (const char* v : {"-1,-2", "-1;+2", "-1\t-2", "-1|+2e5", "-1,,2", "-1;", "-1, 2", "-3;-4,5"}) {
    CAPTURE(v);
    CHECK_FALSE(is_dangerous_cell(v));
  }
  check_unchanged("-1,-2,+3\n-0.5,1e-5,+1E+10\n");
  check_unchanged("-1,5;+1.234,56\n");
  check_unchanged("x\t-1;-2|+3\n", '\t');
  // Text after the number makes the ';' reader's cell "-80.00,refund": sign-led and
  // no number list, as "-1,WEBSERVICE(...)" would be. The cost is one apostrophe.
  const Result r = neutralise("amount,note\n-80.00,refund\n");
  CHECK(r.output == "amount,note\n'-80.00,refund\n");
  CHECK(r.cells_changed == 1);
  CHECK(is_dangerous_cell("-1,HYPERLINK(\"http://x\")"));
}

TEST_CASE("signs that do not form a plain number are formula triggers") {
  for (const char* v : {"-", "+", "-1+2", "-A1", "+A1", "-1e", "-1e+", "-.", "+-1", "--1", "-1 2", "-,5",
                        "-1e5+cmd|' /C calc'!A0", "-1+cmd", "-1,5x", "-1;a"}) {
    CAPTURE(v);
    CHECK(is_dangerous_cell(v));
  }
}

TEST_CASE("each ASCII trigger character is neutralised") {
  for (const char* v : {"=1+1", "+1+1", "-1+1", "@SUM(A1)", "\t=cmd", "\r=cmd", "=cmd|' /C calc'!A0"}) {
    CAPTURE(v);
    CHECK(is_dangerous_cell(v));
  }
  const Result r = neutralise("=1+1,+1+1,-1+1,@SUM(A1)\n");
  CHECK(r.ok);
  CHECK(r.output == "'=1+1,'+1+1,'-1+1,'@SUM(A1)\n");
  CHECK(r.cells_changed == 4);
  CHECK(r.cells_dangerous == 4);
  CHECK(r.reason == sanitized_reason("4 cells start", "4 apostrophes", "row 1, column 1, as split on ','"));
}

TEST_CASE("each full-width trigger (U+FF1D, U+FF0B, U+FF0D, U+FF20) is neutralised") {
  const std::string eq = "\xEF\xBC\x9D", plus = "\xEF\xBC\x8B", minus = "\xEF\xBC\x8D", at = "\xEF\xBC\xA0";
  for (const std::string& t : {eq, plus, minus, at}) {
    CAPTURE(t);
    CHECK(is_dangerous_cell(t + "1+1"));
    CHECK(is_dangerous_cell(t));
  }
  CHECK(is_dangerous_cell(minus + "1"));  // a full-width sign never makes a plain number
  const Result r = neutralise(eq + "1+1," + plus + "A1,\"" + minus + "1+1\"," + at + "SUM(A1)\n");
  CHECK(r.ok);
  CHECK(r.output == "'" + eq + "1+1,'" + plus + "A1,\"'" + minus + "1+1\",'" + at + "SUM(A1)\n");
  CHECK(r.cells_changed == 4);
  // Other full-width characters in the same block are harmless.
  CHECK_FALSE(is_dangerous_cell("\xEF\xBC\xA1"));  // U+FF21 Ａ
}

TEST_CASE("small, superscript and subscript forms and U+2212 are triggers: NFKC folds them") {
  for (const char* t : {"\xEF\xB9\xA6",     // U+FE66 small =
                        "\xEF\xB9\xA2",     // U+FE62 small +
                        "\xEF\xB9\xA3",     // U+FE63 small -
                        "\xEF\xB9\xAB",     // U+FE6B small @
                        "\xE2\x81\xBA",     // U+207A superscript +
                        "\xE2\x81\xBB",     // U+207B superscript minus
                        "\xE2\x81\xBC",     // U+207C superscript =
                        "\xE2\x82\x8A",     // U+208A subscript +
                        "\xE2\x82\x8B",     // U+208B subscript minus
                        "\xE2\x82\x8C",     // U+208C subscript =
                        "\xE2\x88\x92"}) {  // U+2212 minus sign
    CAPTURE(t);
    CHECK(is_dangerous_cell(std::string(t) + "1"));
    const Result r = neutralise("a," + std::string(t) + kCmd + "\n");
    CHECK(r.output == "a,'" + std::string(t) + kCmd + "\n");
  }
  CHECK_FALSE(is_dangerous_cell("\xE2\x81\xB9"));  // U+2079 superscript nine
  CHECK_FALSE(is_dangerous_cell("\xEF\xB9\xA4"));  // U+FE64 small <
}

TEST_CASE("a header row with =HYPERLINK(...) is neutralised like any other row") {
  {
    const Result r = neutralise("\"=HYPERLINK(\"\"http://evil.example\"\",\"\"click\"\")\",name\n1,alice\n");
    CHECK(r.ok);
    CHECK(r.output == "\"'=HYPERLINK(\"\"http://evil.example\"\",\"\"click\"\")\",name\n1,alice\n");
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
    // A cell can only start with CR when quoted: outside quotes CR ends the record,
    // as it does for a ';' reader here (its field "a,\"" is unquoted), which then
    // sees a row starting "=cmd".
    const Result r = neutralise("a,\"\r=cmd\"\n");
    CHECK(r.output == "a,\"'\r'=cmd\"\n");
    CHECK(r.cells_changed == 2);
    CHECK(r.cells_dangerous == 1);
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
  CHECK_FALSE(is_dangerous_cell(" -1"));  // still a plain number
  CHECK_FALSE(is_dangerous_cell("   "));
  CHECK_FALSE(is_dangerous_cell("a =1"));
  const Result r = neutralise("x, =1+1\n");
  CHECK(r.output == "x, '=1+1\n");
  CHECK(r.cells_changed == 1);
}

TEST_CASE("Unicode spaces before a trigger are skipped as importers trim them") {
  for (const char* sp : {"\xC2\xA0",         // U+00A0 no-break space
                         "\xE3\x80\x80",     // U+3000 ideographic space
                         "\xE2\x80\x80",     // U+2000 en quad
                         "\xE2\x80\x8A",     // U+200A hair space
                         "\xE2\x80\x8B",     // U+200B zero width space
                         "\xE2\x80\xAF",     // U+202F narrow no-break space
                         "\xE2\x81\x9F",     // U+205F medium mathematical space
                         "\xE2\x81\xA0",     // U+2060 word joiner
                         "\xC2\x85",         // U+0085 next line
                         "\xEF\xBB\xBF"}) {  // U+FEFF inside a cell
    CAPTURE(sp);
    CHECK(is_dangerous_cell(std::string(sp) + "=1"));
    CHECK(is_dangerous_cell(std::string(sp) + sp + " \"@x"));
    CHECK_FALSE(is_dangerous_cell(std::string(sp) + "-1"));
    const Result r = neutralise("a," + std::string(sp) + "=1\n");
    CHECK(r.output == "a," + std::string(sp) + "'=1\n");
  }
  CHECK_FALSE(is_dangerous_cell("\xC2\xA1=1"));  // U+00A1 is no space
}

TEST_CASE("harmless values are not triggers") {
  for (const char* v : {"", "abc", "1+1", "a=b", "'=1+1", "A1", ".5", "100%", "#REF!", "%", "e=mc2", "' =1",
                        "\xE2\x80\x90"
                        "1"}) {  // U+2010 HYPHEN: NFKC keeps it
    CAPTURE(v);
    CHECK_FALSE(is_dangerous_cell(v));
  }
}

TEST_CASE("counts are exact across rows, columns and quoting") {
  // "-1" is a number, but a ';' reader sees the row "-1,-x,@" as one sign-led cell.
  const Result r = neutralise("=a,b,\"+c\"\n-1,-x,@\n,\"\",\" =\"\n");
  CHECK(r.ok);
  CHECK(r.output == "'=a,b,\"'+c\"\n'-1,'-x,'@\n,\"\",\" '=\"\n");
  CHECK(r.cells_changed == 6);
  CHECK(r.cells_dangerous == 6);
  CHECK(r.reason == sanitized_reason("6 cells start", "6 apostrophes", "row 1, column 1, as split on ','"));

  const Result one = neutralise("a,=b\n");
  CHECK(one.reason == sanitized_reason("1 cell starts", "1 apostrophe", "row 1, column 2, as split on ','"));
}

TEST_CASE("neutralising is idempotent: the output needs no further change") {
  const std::string in =
      "=1,\"+2\",\t-x, =y,@z\r\n\"\r=cmd\",-1+1,\"\xEF\xBC\x9D"
      "1\"\n";
  const Result first = neutralise(in);
  REQUIRE(first.ok);
  CHECK(first.cells_changed == 8);  // "\t-x" twice: the cell and "-x" after its TAB
  CHECK(first.cells_dangerous == 7);
  check_unchanged(first.output);
}

TEST_CASE("TSV: tab is the delimiter, and a cell starts with TAB only when quoted") {
  {
    const Result r = neutralise("name\tformula\nalice\t=1+1\nbob\t-3\n", '\t');
    CHECK(r.ok);
    CHECK(r.output == "name\tformula\nalice\t'=1+1\nbob\t-3\n");
    CHECK(r.cells_changed == 1);
  }
  check_unchanged("a\t\tb\n", '\t');  // an empty cell between two tabs
  check_unchanged("a,b\tc\n", '\t');  // a comma is not a delimiter in TSV
  {
    const Result r = neutralise("a\t\"\t=cmd\"\n", '\t');
    CHECK(r.output == "a\t\"'\t'=cmd\"\n");
    CHECK(r.cells_changed == 2);
  }
}

// Found by tests/fuzz/csv_fuzz: a reader splitting on another
// separator than the file's (a ';' locale opening a comma file, a TSV opened
// as CSV) sees the pieces of a value as cells, so "x;=cmd()" held a formula.
TEST_CASE("a formula after ',', ';' or TAB inside a value is neutralised") {
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
    CHECK(r.reason == sanitized_reason("1 cell starts", "2 apostrophes", "row 1, column 1, as split on ','"));
  }
  {
    // Offsets in a quoted value count its "" escapes: the apostrophe lands after the ';'.
    const Result r = neutralise("\"\"\"q\"\";@x\"\n");
    CHECK(r.output == "\"\"\"q\"\";'@x\"\n");
  }
  check_unchanged("\"1;-5;+3;2e5\"\n");  // numbers after a separator are numbers
  check_unchanged("\"a; b, c\"\n");
  CHECK_FALSE(reject("\"x;=cmd()\"\n").ok);
}

// A reported bypass: a ';'-separated .csv with DDE and HYPERLINK cells was
// accepted ("no formula cells") because only ',' split it; Excel in de-DE,
// fr-FR or nl-NL locales splits a double-clicked .csv on ';'.
TEST_CASE("the reported ';' bypass is refused as a CSV and neutralised as a TSV") {
  const std::string reported = "a;b\n1;=cmd|' /C calc'!A0\n2;=HYPERLINK(\"http://x\",\"y\")\n";
  {
    // For a ',' reader the third row's second field is "\"y\")": text after a
    // closing quote, on which readers disagree. Refused in both modes.
    const Result r = neutralise(reported);
    CHECK_FALSE(r.ok);
    CHECK(r.output.empty());
    CHECK(r.reason ==
          "unexpected text after the closing quote of a quoted field on line 3 "
          "(row 3, column 2)");
    CHECK(reject(reported).reason == r.reason);
  }
  {
    const Result r = neutralise(reported, '\t');
    CHECK(r.ok);
    CHECK(r.output == "a;b\n1;'=cmd|' /C calc'!A0\n2;'=HYPERLINK(\"http://x\",\"y\")\n");
    CHECK(r.cells_changed == 2);
  }
  {
    // Its DDE row alone parses as a CSV: neutralised, and in reject mode the
    // reason names the ';' reader.
    const std::string dde = "a;b\n1;=cmd|' /C calc'!A0\n";
    CHECK(neutralise(dde).output == "a;b\n1;'=cmd|' /C calc'!A0\n");
    const Result r = reject(dde);
    CHECK_FALSE(r.ok);
    CHECK(r.reason == "1 cell starts a formula " + kTriggers + kReaders +
                          " (spreadsheet formula injection); the first is at row 2, column 1, as "
                          "split on ';'");
  }
  {
    const Result r = neutralise("a|b\n1|=" + kCmd + "\n");
    CHECK(r.output == "a|b\n1|'=" + kCmd + "\n");
    CHECK(reject("a|b\n1|=" + kCmd + "\n").reason.ends_with("as split on '|'"));
  }
}

TEST_CASE("a reader on another delimiter may start a cell inside the writer's quoted field") {
  {
    const Result r = neutralise("name,id\n\"Doe;=" + kCmd + "\",1\n");
    CHECK(r.output == "name,id\n\"Doe;'=" + kCmd + "\",1\n");
  }
  {
    // The ';' reader's cell begins '""=cmd', which it takes as an opening quote
    // closed at once: Excel then shows "=cmd..." as the cell. The apostrophe goes
    // after the escaped quote, before the trigger, so every reader sees it first.
    const Result r = neutralise("1,\"a;\"\"=" + kCmd + "\"\"\"\n");
    CHECK(r.output == "1,\"a;\"\"'=" + kCmd + "\"\"\"\n");
    CHECK(r.cells_changed == 1);
  }
  {
    // A ';' reader takes the quote of 'a,"line1' as a literal: the LF ends its row
    // and "=1+1\",b" begins the next one.
    const Result r = neutralise("a,\"line1\n=1+1\",b\n");
    CHECK(r.output == "a,\"line1\n'=1+1\",b\n");
    const Result crlf = neutralise("a,\"line1\r\n=1+1\",b\r\n");
    CHECK(crlf.output == "a,\"line1\r\n'=1+1\",b\r\n");
    const Result rej = reject("a,\"line1\n=1+1\",b\n");
    CHECK(rej.reason.ends_with("the first is at row 1, column 2, as split on ';'"));
  }
  {
    // A quoted field at a line start is quoted for every reader: its LF is safe.
    check_unchanged("\"line1\n=1+1\",b\n");
  }
  {
    // '|' inside a quoted comma field, and ',' inside a quoted TSV field.
    CHECK(neutralise("1,\"x|@SUM(1)\"\n").output == "1,\"x|'@SUM(1)\"\n");
    CHECK(neutralise("1\t\"x,-2+" + kCmd + "\"\n", '\t').output == "1\t\"x,'-2+" + kCmd + "\"\n");
  }
}

TEST_CASE("an apostrophe that would follow a closing quote cannot be placed: refused") {
  // A quote-blind ',' splitter sees '"""\tb' start with TAB, at the TSV field's
  // end: an apostrophe there would be text after the closing quote.
  const Result r = neutralise("\"a,\"\"\"\tb\n", '\t');
  CHECK_FALSE(r.ok);
  CHECK(r.output.empty());
  CHECK(r.reason ==
        "a reader splitting on ',' sees a cell starting with tab right after the "
        "closing quote of the field on line 1 (row 1, column 1), where no "
        "apostrophe can go");
  CHECK(reject("\"a,\"\"\"\tb\n", '\t').reason == r.reason);
}

TEST_CASE("an apostrophe inside another reader's number list leaves it a number list") {
  // Found by csv_fuzz. The ',' reader's cell "\t" needs an apostrophe, and the
  // TAB reader's cell "+3," then reads "+3,'": still no formula, or each fix
  // would need another ("-0;+2,-0;+2,...;+" chained them back to the start).
  const Result r = neutralise("+3,\t\n", '\t');
  CHECK(r.ok);
  CHECK(r.output == "+3,'\t\n");
  CHECK(r.cells_changed == 1);
  check_unchanged(r.output, '\t');
  {
    const Result chain = neutralise(",-0;+2,-0;+2,-0;+\n", '\t');
    CHECK(chain.ok);
    // The ',' reader's last cell "-0;+" holds a lone '+', the ';' reader's is "+":
    // two apostrophes, and the ';' reader's "+2,'-0" stays a number list.
    CHECK(chain.output == ",-0;+2,-0;+2,'-0;'+\n");
    CHECK(chain.cells_changed == 2);
  }
  {
    // Found by csv_fuzz: the ',' reader's row 2 is a cell starting with TAB; the
    // TAB reader's cell is the quoted "-0\n\t...", whose element "-0\n" now ends
    // with the apostrophe put before that TAB.
    const Result r2 = neutralise("\t\"-0\n\t");
    CHECK(r2.ok);
    CHECK(r2.output == "'\t\"-0\n'\t");
    CHECK(r2.cells_changed == 2);
    check_unchanged(r2.output);
  }
  CHECK_FALSE(is_dangerous_cell("-0\n'\t"));
  CHECK_FALSE(is_dangerous_cell("-1'"));
  CHECK_FALSE(is_dangerous_cell("-1,'-2"));
  CHECK_FALSE(is_dangerous_cell("-1;'"));
  CHECK(is_dangerous_cell("-1,'-'2"));  // apostrophes only around an element
  CHECK(is_dangerous_cell("-1,'A1"));
  CHECK(is_dangerous_cell("-1,'x'!A1"));  // a sheet reference
}

TEST_CASE("reject mode refuses a dangerous file and names the first cell") {
  const Result r = reject("h1,h2,h3\nok,ok,=1+1\n@x,ok,ok\n");
  CHECK_FALSE(r.ok);
  CHECK(r.output.empty());
  CHECK(r.cells_dangerous == 2);
  CHECK(r.cells_changed == 0);
  CHECK(r.reason == "2 cells start a formula " + kTriggers + kReaders +
                        " (spreadsheet formula injection); the first is at row 2, column 3, as "
                        "split on ','");

  // Rows are records: a quoted newline does not advance the row.
  const Result one = reject("\"a\nb\",x\nc,-y\n");
  CHECK_FALSE(one.ok);
  CHECK(one.reason == "1 cell starts a formula " + kTriggers + kReaders +
                          " (spreadsheet formula injection); the first is at row 2, column 2, as "
                          "split on ','");

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
  CHECK(r.reason ==
        "unexpected text after the closing quote of a quoted field on line 2 "
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
  CHECK(rej.reason == "1 cell starts a formula " + kTriggers + kReaders +
                          " (spreadsheet formula injection); the first is at row 2, column 1, as "
                          "split on ','");
}

// Excel obeys a first line "sep=X" and splits on X: X is one more reader, so a
// file naming one is neutralised as X would split it, not refused.
TEST_CASE("a sep= directive adds its delimiter as a reader") {
  {
    const Result r = neutralise("sep=;\na;=cmd()\n");
    CHECK(r.ok);
    CHECK(r.output == "sep=;\na;'=cmd()\n");
  }
  {
    const Result r = neutralise(kBom + "SEP=|\nx|-y\n");
    CHECK(r.output == kBom + "SEP=|\nx|'-y\n");
  }
  {
    // A delimiter no other reader uses: '#' splits "id#=1+1".
    const Result r = neutralise("sep=#\nid#=1+1\n");
    CHECK(r.ok);
    CHECK(r.output == "sep=#\nid#'=1+1\n");
    CHECK(r.reason == sanitized_reason("1 cell starts", "1 apostrophe", "row 2, column 1, as split on '#'",
                                       "for a reader splitting on ',', ';', tab, '|' or '#'"));
    const Result rej = reject("sep=#\nid#=1+1\n");
    CHECK(rej.reason.ends_with("the first is at row 2, column 1, as split on '#'"));
    check_unchanged("sep=#\nid#1\n");
    check_unchanged("id#=1+1\n");  // without the directive '#' is text
  }
  check_unchanged("sep=,\na,b\n");
  check_unchanged("sep=\t\na\tb\n", '\t');
  check_unchanged("sep=,\n", '\t');
  check_unchanged("separator\n");
}

TEST_CASE("a sep= directive that cannot be modelled is refused") {
  // A quote or line break as delimiter changes what a field is; an apostrophe
  // would make the fix itself a delimiter; a non-ASCII byte is half a character.
  const Result quote = neutralise("sep=\"\na\"=1\n");
  CHECK_FALSE(quote.ok);
  CHECK(quote.output.empty());
  CHECK(quote.reason ==
        "first line is a \"sep=\" directive naming the delimiter 0x22; Excel "
        "would split cells in a way this check cannot follow");
  CHECK(neutralise("sep='\na'=1\n").reason.starts_with("first line is a \"sep=\" directive naming the delimiter 0x27"));
  CHECK(neutralise("sep=\xC3\xA9\na\n")
            .reason.starts_with("first line is a \"sep=\" directive naming the delimiter 0xC3"));
  CHECK(neutralise("sep=\x01\na\n").reason.starts_with("first line is a \"sep=\" directive naming the delimiter 0x01"));
  for (const char* in : {"sep=", "sep=\n", "sep=\r\na\n"}) {
    CAPTURE(in);
    const Result r = reject(in);
    CHECK_FALSE(r.ok);
    CHECK(r.reason ==
          "first line is a \"sep=\" directive naming no delimiter; Excel would "
          "split cells in a way this check cannot follow");
  }
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
  static constexpr char kAlphabet[] = ",;|\"\r\n\t=+-@ a1.e'";
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

// tests/gate_corpus/csv/cases.json: one file per case, the verdict expected in
// kNeutralise mode, and for "sanitized" the exact output in <file>.expected.
namespace {

std::string read_corpus_file(const std::string& name) {
  std::ifstream in(unit::source_dir() + "/tests/gate_corpus/csv/" + name, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open tests/gate_corpus/csv/" << name);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("gate corpus: every case in tests/gate_corpus/csv/cases.json") {
  const nlohmann::json cases = nlohmann::json::parse(read_corpus_file("cases.json"), nullptr, false);
  REQUIRE(cases.is_array());
  CHECK(cases.size() >= 60);
  size_t accepted = 0, sanitized = 0, rejected = 0;
  for (const nlohmann::json& c : cases) {
    const std::string file = c.at("file").get<std::string>();
    const std::string expect = c.at("expect").get<std::string>();
    const std::string needle = c.at("reason_contains").get<std::string>();
    const std::string d = c.at("delimiter").get<std::string>();
    CAPTURE(file);
    REQUIRE((d == "," || d == "\t"));
    REQUIRE(!c.at("reader").get<std::string>().empty());
    REQUIRE(!c.at("source").get<std::string>().empty());
    const char delimiter = d[0];
    const std::string in = read_corpus_file(file);
    const Result n = process(in, delimiter, Mode::kNeutralise);
    const Result r = process(in, delimiter, Mode::kReject);
    CAPTURE(n.reason);
    CHECK(n.reason.find(needle) != std::string::npos);
    if (expect == "accepted") {
      ++accepted;
      CHECK(n.ok);
      CHECK(n.output == in);
      CHECK(n.cells_changed == 0);
      CHECK(r.ok);
      CHECK(r.output == in);
    } else if (expect == "sanitized") {
      ++sanitized;
      CHECK(n.ok);
      CHECK(n.cells_changed > 0);
      CHECK(n.output == read_corpus_file(file + ".expected"));
      CHECK_FALSE(r.ok);  // kReject refuses what kNeutralise had to change
      CHECK(r.output.empty());
      CHECK(r.reason.find("spreadsheet formula injection") != std::string::npos);
    } else {
      REQUIRE(expect == "rejected");
      ++rejected;
      CHECK_FALSE(n.ok);
      CHECK(n.output.empty());
      CHECK_FALSE(r.ok);
    }
  }
  CHECK(accepted > 0);
  CHECK(sanitized > 0);
  CHECK(rejected > 0);
}
