// artifacts::pdf: each construct a reader runs or opens unasked is rejected
// with a reason naming its object, kStrip removes it and its rewrite passes
// kReject, and tests/gate_corpus/pdf/cases.json holds case by case.
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/artifacts/pdf.h"
#include "tests/unit/paths.h"

using artifacts::pdf::check;
using artifacts::pdf::Mode;
using artifacts::pdf::Result;

namespace {

const std::string kCorpus = unit::source_dir() + "/tests/gate_corpus/pdf/";

std::string read_corpus(const std::string& name) {
  std::ifstream f(kCorpus + name, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "cannot open " << kCorpus + name);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

void check_rejected(const Result& r, const std::string& reason_part) {
  CHECK_FALSE(r.ok);
  CHECK_MESSAGE(contains(r.reason, reason_part), "reason: " << r.reason);
  CHECK(r.reason.rfind("PDF: ", 0) == 0);
  CHECK(r.output.empty());
}

// A classic PDF (objects 1..n, xref table, trailer) with correct offsets.
std::string make_pdf(const std::vector<std::string>& bodies) {
  std::string out = "%PDF-1.7\n";
  std::vector<size_t> offsets;
  for (size_t i = 0; i < bodies.size(); ++i) {
    offsets.push_back(out.size());
    out += std::to_string(i + 1) + " 0 obj\n" + bodies[i] + "\nendobj\n";
  }
  const size_t xref = out.size();
  out += "xref\n0 " + std::to_string(bodies.size() + 1) + "\n0000000000 65535 f \n";
  for (size_t off : offsets) {
    std::string digits = std::to_string(off);
    out += std::string(10 - digits.size(), '0') + digits + " 00000 n \n";
  }
  out += "trailer\n<< /Size " + std::to_string(bodies.size() + 1) + " /Root 1 0 R >>\nstartxref\n" +
         std::to_string(xref) + "\n%%EOF\n";
  return out;
}

const std::vector<std::string> kOnePage{"<< /Type /Catalog /Pages 2 0 R >>",
                                        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
                                        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>"};

}  // namespace

TEST_CASE("the PDF builder of these tests makes files qpdf reads without repair") {
  Result r = check(make_pdf(kOnePage), Mode::kReject);
  CHECK_MESSAGE(r.ok, r.reason);
}

TEST_CASE("more tokens than qpdf parses in bounded time are refused before it parses them") {
  std::vector<std::string> bodies = kOnePage;
  std::string many = "[";
  for (int i = 0; i < 600'000; ++i) many += "[]";
  bodies.push_back(many + "]");
  check_rejected(check(make_pdf(bodies), Mode::kReject), "tokens to parse, more than 524288 (bounds qpdf's CPU time)");
}

TEST_CASE("a plain one-page PDF is accepted byte for byte in both modes") {
  const std::string plain = read_corpus("plain.pdf");
  for (Mode mode : {Mode::kReject, Mode::kStrip}) {
    Result r = check(plain, mode);
    CHECK_MESSAGE(r.ok, r.reason);
    CHECK(r.output == plain);
    CHECK(r.removed == 0);
    CHECK(r.reason.empty());
  }
}

TEST_CASE("a reported bypass: OpenAction JavaScript calling submitForm, then /Launch cmd.exe") {
  const std::string bytes = read_corpus("issue17_openaction_js_submit_launch.pdf");
  Result r = check(bytes, Mode::kReject);
  check_rejected(r, "PDF: JavaScript action (/S /JavaScript) in object 6 0 (the catalog's /OpenAction)");
  CHECK_MESSAGE(
      contains(r.reason,
               "Launch action (/S /Launch: runs a program or opens a file) in object 7 0 (object 6 0's /Next)"),
      r.reason);

  Result s = check(bytes, Mode::kStrip);
  REQUIRE_MESSAGE(s.ok, s.reason);
  CHECK(s.removed == 2);
  CHECK(contains(s.reason, "PDF: removed JavaScript action"));
  CHECK_FALSE(contains(s.output, "/JavaScript"));
  CHECK_FALSE(contains(s.output, "cmd.exe"));
  Result again = check(s.output, Mode::kReject);
  CHECK_MESSAGE(again.ok, again.reason);
  CHECK(again.output == s.output);
  // Deterministic: the same input strips to the same bytes (static /ID).
  CHECK(check(bytes, Mode::kStrip).output == s.output);
}

TEST_CASE("JavaScript is found where byte scanners miss it") {
  check_rejected(check(read_corpus("js_in_object_stream.pdf"), Mode::kReject),
                 "JavaScript action (/S /JavaScript) in object 6 0 (the catalog's /OpenAction)");
  check_rejected(check(read_corpus("js_unreachable.pdf"), Mode::kReject),
                 "JavaScript action (/S /JavaScript) in object 6 0 (referenced by no object)");
  check_rejected(check(read_corpus("js_behind_next.pdf"), Mode::kReject),
                 "JavaScript action (/S /JavaScript) in object 7 0 (object 6 0's /Next)");
  check_rejected(check(read_corpus("js_hex_escaped_name.pdf"), Mode::kReject), "JavaScript action (/S /JavaScript)");
  check_rejected(check(read_corpus("js_encrypted_empty_password.pdf"), Mode::kReject),
                 "JavaScript action (/S /JavaScript)");
  check_rejected(check(read_corpus("js_earlier_revision.pdf"), Mode::kReject),
                 "object 6 0 at byte 436 is not the one the cross-reference table lists");
}

TEST_CASE("an innocent /GoTo opening action stays; its chained script does not") {
  CHECK(check(read_corpus("openaction_goto.pdf"), Mode::kReject).ok);
  Result s = check(read_corpus("js_behind_next.pdf"), Mode::kStrip);
  REQUIRE_MESSAGE(s.ok, s.reason);
  CHECK(s.removed == 1);
  CHECK(contains(s.output, "/OpenAction"));
  CHECK(contains(s.output, "/GoTo"));
  CHECK_FALSE(contains(s.output, "JavaScript"));
}

TEST_CASE("links: https is a link, file: is not; Named only for page navigation") {
  CHECK(check(read_corpus("uri_link.pdf"), Mode::kReject).ok);
  CHECK(check(read_corpus("named_nextpage.pdf"), Mode::kReject).ok);
  check_rejected(check(read_corpus("uri_file.pdf"), Mode::kReject),
                 "URI action to a non-web address (file:///C:/Windows/System32/cmd.exe) in object 6 0 (page 3 0's "
                 "/Annots [0]) at /A");
  check_rejected(check(read_corpus("named_print.pdf"), Mode::kReject), "/A action that is a /Named action (/Print)");
  check_rejected(check(read_corpus("openaction_uri.pdf"), Mode::kReject),
                 "/OpenAction that is a /URI action, not navigation in object 1 0 (the catalog) at /OpenAction");
}

TEST_CASE("kStrip of an embedded file removes the name tree, the file spec's /EF and the stream") {
  Result s = check(read_corpus("embedded_files.pdf"), Mode::kStrip);
  REQUIRE_MESSAGE(s.ok, s.reason);
  CHECK(s.removed == 3);
  CHECK_FALSE(contains(s.output, "MZ not really"));
  CHECK_FALSE(contains(s.output, "/EmbeddedFiles"));
}

TEST_CASE("files that cannot be checked are rejected in both modes") {
  for (Mode mode : {Mode::kReject, Mode::kStrip}) {
    check_rejected(check(read_corpus("encrypted_user_password.pdf"), mode), "encrypted with a user password");
    check_rejected(check(read_corpus("truncated.pdf"), mode), "qpdf cannot read it without repairing it");
    check_rejected(check(read_corpus("xref_stream_bomb.pdf"), mode), "cross-reference streams inflate beyond 8 MiB");
    check_rejected(check(read_corpus("object_stream_bomb.pdf"), mode), "object streams decode beyond 256 MiB");
    check_rejected(check("", mode), "PDF: qpdf");
    check_rejected(check("%PDF-1.7\n1 0 obj << /S /JavaScript", mode), "PDF: qpdf");
    check_rejected(check(std::string(artifacts::pdf::kMaxInputBytes + 1, ' '), mode), "larger than 16 MiB");
  }
}

TEST_CASE("every case of tests/gate_corpus/pdf/cases.json holds") {
  nlohmann::json cases = nlohmann::json::parse(read_corpus("cases.json"));
  REQUIRE(cases.size() >= 40);
  size_t accepted = 0, rejected = 0, sanitized = 0;
  for (const auto& c : cases) {
    const std::string file = c.at("file"), expect = c.at("expect"), reason = c.at("reason_contains");
    const Mode mode = c.value("mode", "reject") == "strip" ? Mode::kStrip : Mode::kReject;
    CAPTURE(file);
    CAPTURE(expect);
    const std::string bytes = read_corpus(file);
    Result r = check(bytes, mode);
    CAPTURE(r.reason);
    if (expect == "accepted") {
      ++accepted;
      CHECK(r.ok);
      CHECK(r.output == bytes);
      CHECK(r.removed == 0);
    } else if (expect == "rejected") {
      ++rejected;
      CHECK_FALSE(r.ok);
      CHECK(contains(r.reason, reason));
      CHECK(r.output.empty());
    } else {
      REQUIRE(expect == "sanitized");
      ++sanitized;
      CHECK(r.ok);
      CHECK(r.removed > 0);
      CHECK(contains(r.reason, reason));
      CHECK(r.output != bytes);
      CHECK_FALSE(check(bytes, Mode::kReject).ok);
    }
    // The fuzz invariant on every file: what kStrip lets out passes kReject.
    Result s = check(bytes, Mode::kStrip);
    if (s.ok) {
      Result again = check(s.output, Mode::kReject);
      CHECK_MESSAGE(again.ok, again.reason);
    }
  }
  CHECK(accepted >= 6);
  CHECK(rejected >= 30);
  CHECK(sanitized >= 5);
}
