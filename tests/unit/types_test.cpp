// Artifact media types: extension table, libmagic sniffing, and the agreement
// rules that stop an executable, archive or mislabelled file leaving as a chart.
#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

#include "server/artifacts/types.h"

using namespace std::string_literals;
using artifacts::types::decide;
using artifacts::types::Decision;
using artifacts::types::media_type_for_extension;
using artifacts::types::Sniffer;

namespace {

const std::vector<std::string> kDefaultAllowed{"text/plain",       "text/csv",      "text/tab-separated-values",
                                               "application/json", "text/markdown", "image/png",
                                               "image/jpeg",       "image/gif",     "application/pdf"};

const std::vector<std::string> kAllowedWithMarkup{"text/plain",       "text/csv",      "text/tab-separated-values",
                                                  "application/json", "text/markdown", "image/png",
                                                  "image/jpeg",       "image/gif",     "application/pdf",
                                                  "text/html",        "image/svg+xml", "application/xhtml+xml"};

const Sniffer& sniffer() {
  static Sniffer s = [] {
    auto created = Sniffer::create();
    REQUIRE_MESSAGE(created.ok(), created.error().message);
    return std::move(created.value());
  }();
  return s;
}

// A 1x1 RGBA PNG: signature, IHDR, IDAT, IEND.
const std::string kPng =
    "\x89PNG\r\n\x1a\n"
    "\x00\x00\x00\x0dIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
    "\x00\x00\x00\x0aIDATx\x9c\x63\x00\x01\x00\x00\x05\x00\x01\x0d\x0a\x2d\xb4"
    "\x00\x00\x00\x00IEND\xae\x42\x60\x82"s;

// The first 64 bytes of an x86-64 ELF executable header.
const std::string kElf =
    "\x7f"
    "ELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x02\x00\x3e\x00\x01\x00\x00\x00\x40\x10\x40\x00\x00\x00\x00\x00"
    "\x40\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x00\x00\x40\x00\x38\x00\x00\x00\x40\x00\x00\x00\x00\x00"s;

const std::string kPdf =
    "%PDF-1.4\n%\xe2\xe3\xcf\xd3\n"
    "1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n"
    "2 0 obj\n<< /Type /Pages /Kids [] /Count 0 >>\nendobj\n"
    "trailer\n<< /Root 1 0 R >>\n%%EOF\n"s;

const std::string kJpeg = "\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"s;
const std::string kGif = "GIF89a\x01\x00\x01\x00\x00\x00\x00;"s;

// A ZIP local file header for "a.txt" (stored), its data, central directory and end record.
const std::string kZip =
    "PK\x03\x04\x0a\x00\x00\x00\x00\x00\x00\x00\x21\x00\x86\xa6\x10\x36\x02\x00\x00\x00"
    "\x02\x00\x00\x00\x05\x00\x00\x00"
    "a.txthi"
    "PK\x01\x02\x14\x03\x0a\x00\x00\x00\x00\x00\x00\x00\x21\x00\x86\xa6\x10\x36\x02\x00"
    "\x00\x00\x02\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x00\xa4\x81\x00\x00"
    "\x00\x00"
    "a.txt"
    "PK\x05\x06\x00\x00\x00\x00\x01\x00\x01\x00\x33\x00\x00\x00\x25\x00\x00\x00\x00\x00"s;

const std::string kCsv = "city,population,area_km2\nOslo,709037,454\nBergen,289330,465\nTromso,77544,2521\n";
const std::string kJson = "{\"series\": [1, 2, 3], \"label\": \"caf\xc3\xa9\", \"ok\": true}\n";

const std::string kMatplotlibSvg =
    "<?xml version=\"1.0\" encoding=\"utf-8\" standalone=\"no\"?>\n"
    "<!DOCTYPE svg PUBLIC \"-//W3C//DTD SVG 1.1//EN\"\n"
    "  \"http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd\">\n"
    "<svg xmlns:xlink=\"http://www.w3.org/1999/xlink\" width=\"460.8pt\" height=\"345.6pt\" "
    "viewBox=\"0 0 460.8 345.6\" xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\">\n"
    " <defs>\n  <style type=\"text/css\">*{stroke-linejoin: round; stroke-linecap: butt}</style>\n </defs>\n"
    " <g id=\"figure_1\"><path d=\"M 0 345.6 L 460.8 345.6 L 460.8 0 L 0 0 z\" style=\"fill: #ffffff\"/></g>\n"
    "</svg>\n";

}  // namespace

TEST_CASE("extension table: lowercased last extension of the last path component") {
  CHECK(media_type_for_extension("notes.txt") == "text/plain");
  CHECK(media_type_for_extension("run.log") == "text/plain");
  CHECK(media_type_for_extension("data.csv") == "text/csv");
  CHECK(media_type_for_extension("data.tsv") == "text/tab-separated-values");
  CHECK(media_type_for_extension("x.json") == "application/json");
  CHECK(media_type_for_extension("README.md") == "text/markdown");
  CHECK(media_type_for_extension("README.markdown") == "text/markdown");
  CHECK(media_type_for_extension("chart.png") == "image/png");
  CHECK(media_type_for_extension("CHART.PNG") == "image/png");
  CHECK(media_type_for_extension("photo.jpg") == "image/jpeg");
  CHECK(media_type_for_extension("photo.JPEG") == "image/jpeg");
  CHECK(media_type_for_extension("anim.gif") == "image/gif");
  CHECK(media_type_for_extension("report.pdf") == "application/pdf");
  CHECK(media_type_for_extension("index.html") == "text/html");
  CHECK(media_type_for_extension("index.htm") == "text/html");
  CHECK(media_type_for_extension("page.xhtml") == "application/xhtml+xml");
  CHECK(media_type_for_extension("plot.svg") == "image/svg+xml");
  CHECK(media_type_for_extension("plots/2024.v1/chart.png") == "image/png");
}

TEST_CASE("extension table: unknown, missing and disguised extensions are unknown") {
  CHECK(media_type_for_extension("tool.exe") == "");
  CHECK(media_type_for_extension("archive.tar.gz") == "");
  CHECK(media_type_for_extension("Makefile") == "");
  CHECK(media_type_for_extension(".txt") == "");  // a hidden file, no extension
  CHECK(media_type_for_extension("file.") == "");
  CHECK(media_type_for_extension("") == "");
  CHECK(media_type_for_extension("chart.png.exe") == "");
  CHECK(media_type_for_extension("chart.png ") == "");    // trailing space is not png
  CHECK(media_type_for_extension("dir.png/file") == "");  // the directory's extension does not count
  CHECK(media_type_for_extension("chart.png\0.exe"s) == "");
}

TEST_CASE("sniffer: libmagic 5.x answers for the formats the gate cares about") {
  CHECK(sniffer().sniff(kPng).mime == "image/png");
  CHECK(sniffer().sniff(kPng).description.find("PNG image data, 1 x 1") == 0);
  CHECK(sniffer().sniff(kElf).mime == "application/x-executable");
  CHECK(sniffer().sniff(kPdf).mime == "application/pdf");
  CHECK(sniffer().sniff(kJpeg).mime == "image/jpeg");
  CHECK(sniffer().sniff(kGif).mime == "image/gif");
  CHECK(sniffer().sniff(kZip).mime == "application/zip");
  CHECK(sniffer().sniff(kJson).mime == "application/json");
  CHECK(sniffer().sniff(kMatplotlibSvg).mime == "image/svg+xml");
  CHECK(sniffer().sniff("").mime == "application/x-empty");
  // The PNG signature alone, without IHDR, is not enough for libmagic.
  CHECK(sniffer().sniff("\x89PNG\r\n\x1a\n"s).mime == "application/octet-stream");
}

TEST_CASE("sniffer: a bad database path is a usable error, not an exception") {
  auto created = Sniffer::create("/nonexistent/throwbox.mgc");
  REQUIRE_FALSE(created.ok());
  CHECK(created.error().code == util::ErrorCode::kIo);
  CHECK(created.error().message.find("magic_load(\"/nonexistent/throwbox.mgc\")") == 0);
}

TEST_CASE("sniffer: a moved-from sniffer reports an error instead of crashing") {
  auto created = Sniffer::create();
  REQUIRE(created.ok());
  Sniffer moved = std::move(created.value());
  auto sniffed = created.value().sniff(kPng);  // NOLINT(bugprone-use-after-move): the point
  CHECK(sniffed.mime.empty());
  CHECK(moved.sniff(kPng).mime == "image/png");
}

TEST_CASE("sniffer: concurrent sniffs on one handle agree") {
  constexpr size_t kThreads = 8;
  std::vector<std::thread> threads;
  std::vector<int> wrong(kThreads, 0);
  for (size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &wrong] {
      for (int k = 0; k < 50; ++k) {
        if (sniffer().sniff(kPng).mime != "image/png") ++wrong[t];
        if (sniffer().sniff(kPdf).mime != "application/pdf") ++wrong[t];
        if (sniffer().sniff(kElf).description.find("ELF 64-bit") != 0) ++wrong[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int w : wrong) CHECK(w == 0);
}

TEST_CASE("accepted: a real PNG named chart.png") {
  Decision d = decide("chart.png", kPng, sniffer(), kDefaultAllowed);
  CHECK(d.ok);
  CHECK(d.media_type == "image/png");
  CHECK(d.reason == "");
}

TEST_CASE("accepted: a PDF named report.pdf, a JPEG and a GIF") {
  CHECK(decide("report.pdf", kPdf, sniffer(), kDefaultAllowed).media_type == "application/pdf");
  CHECK(decide("photo.jpeg", kJpeg, sniffer(), kDefaultAllowed).media_type == "image/jpeg");
  CHECK(decide("anim.gif", kGif, sniffer(), kDefaultAllowed).media_type == "image/gif");
}

TEST_CASE("accepted: CSV text named data.csv is text/csv") {
  Decision d = decide("data.csv", kCsv, sniffer(), kDefaultAllowed);
  CHECK(d.ok);
  CHECK(d.media_type == "text/csv");
  // A one-column CSV sniffs as text/plain; still text, still text/csv.
  Decision one_column = decide("ids.csv", "id\n1\n2\n", sniffer(), kDefaultAllowed);
  CHECK(one_column.ok);
  CHECK(one_column.media_type == "text/csv");
}

TEST_CASE("accepted: JSON named x.json, including a bare number libmagic calls text/plain") {
  Decision d = decide("x.json", kJson, sniffer(), kDefaultAllowed);
  CHECK(d.ok);
  CHECK(d.media_type == "application/json");
  CHECK(decide("n.json", "42", sniffer(), kDefaultAllowed).media_type == "application/json");
}

TEST_CASE("accepted: TSV, Markdown, a log, UTF-8 with a BOM, and an empty text file") {
  CHECK(decide("t.tsv", "name\tvalue\nx\t1\n", sniffer(), kDefaultAllowed).media_type == "text/tab-separated-values");
  CHECK(decide("r.md", "# Results\n\n| a | b |\n|---|---|\n| 1 | 2 |\n", sniffer(), kDefaultAllowed).media_type ==
        "text/markdown");
  CHECK(decide("run.log", "step 1 ok\nstep 2 ok\n", sniffer(), kDefaultAllowed).media_type == "text/plain");
  CHECK(decide("bom.txt", "\xef\xbb\xbfhello\n", sniffer(), kDefaultAllowed).media_type == "text/plain");
  CHECK(decide("empty.txt", "", sniffer(), kDefaultAllowed).media_type == "text/plain");
}

TEST_CASE("accepted: a matplotlib SVG and an HTML page when the policy allows markup") {
  CHECK(decide("plot.svg", kMatplotlibSvg, sniffer(), kAllowedWithMarkup).media_type == "image/svg+xml");
  CHECK(decide("page.html", "<!DOCTYPE html><html><body><p>hi</p></body></html>", sniffer(), kAllowedWithMarkup)
            .media_type == "text/html");
  // A fragment without <html> sniffs as text/plain; it is still served as HTML.
  CHECK(decide("frag.html", "<p>hi</p>", sniffer(), kAllowedWithMarkup).media_type == "text/html");
}

TEST_CASE("executable disguised as an image: ELF named chart.png is rejected") {
  Decision d = decide("chart.png", kElf, sniffer(), kDefaultAllowed);
  CHECK_FALSE(d.ok);
  CHECK(d.media_type == "");
  CHECK(d.reason.find("declared image/png by extension but content is application/x-executable (ELF 64-bit") == 0);
}

TEST_CASE("archive disguised as an image: ZIP named chart.png is rejected") {
  Decision d = decide("chart.png", kZip, sniffer(), kDefaultAllowed);
  CHECK_FALSE(d.ok);
  CHECK(d.reason.find("declared image/png by extension but content is application/zip (Zip archive") == 0);
}

TEST_CASE("image disguised as text: a PNG named notes.txt is rejected") {
  Decision d = decide("notes.txt", kPng, sniffer(), kDefaultAllowed);
  CHECK_FALSE(d.ok);
  CHECK(d.reason.find("declared text/plain by extension but content is image/png (PNG image data") == 0);
}

TEST_CASE("format swap: a PDF named chart.png and a GIF named photo.jpg are rejected") {
  CHECK(decide("chart.png", kPdf, sniffer(), kDefaultAllowed)
            .reason.find("declared image/png by extension but content is application/pdf") == 0);
  CHECK(decide("photo.jpg", kGif, sniffer(), kDefaultAllowed)
            .reason.find("declared image/jpeg by extension but content is image/gif") == 0);
}

TEST_CASE("truncated image: the PNG signature without IHDR is not a PNG") {
  Decision d = decide("chart.png", "\x89PNG\r\n\x1a\n"s, sniffer(), kDefaultAllowed);
  CHECK_FALSE(d.ok);
  CHECK(d.reason == "declared image/png by extension but content is application/octet-stream (data)");
}

TEST_CASE("invalid UTF-8: Latin-1 named notes.txt is rejected") {
  Decision d = decide("notes.txt", "caf\xe9 au lait\n", sniffer(), kDefaultAllowed);
  CHECK_FALSE(d.ok);
  CHECK(d.reason == "text/plain content is not valid UTF-8 (ISO-8859 text)");
}

TEST_CASE("invalid UTF-8: overlong and truncated sequences in CSV and JSON are rejected") {
  CHECK_FALSE(decide("data.csv", "a,b\n\xc0\xaf,1\n", sniffer(), kDefaultAllowed).ok);
  CHECK_FALSE(decide("x.json", "{\"a\": \"\xe2\x82\"}", sniffer(), kDefaultAllowed).ok);
}

TEST_CASE("NUL bytes: text with an embedded NUL is rejected") {
  // libmagic already calls a short text with a NUL binary...
  Decision d = decide("notes.txt", "hello\0world\n"s, sniffer(), kDefaultAllowed);
  CHECK_FALSE(d.ok);
  CHECK(d.reason == "declared text/plain by extension but content is application/octet-stream (data)");
  // ...but it only sniffs a prefix, so a NUL past it is caught by the text check.
  std::string text(artifacts::types::kSniffMaxBytes, 'a');
  text += "\0tail"s;
  Decision late = decide("notes.txt", text, sniffer(), kDefaultAllowed);
  CHECK_FALSE(late.ok);
  CHECK(late.reason ==
        "text/plain content has a NUL byte at offset " + std::to_string(artifacts::types::kSniffMaxBytes));
}

TEST_CASE("UTF-16 markup: an SVG in UTF-16 is rejected so the byte scanner is not blind") {
  std::string utf16 = "\xff\xfe"s;
  for (char c : std::string("<svg xmlns=\"http://www.w3.org/2000/svg\"><script>alert(1)</script></svg>")) {
    utf16 += c;
    utf16 += '\0';
  }
  CHECK_FALSE(decide("plot.svg", utf16, sniffer(), kAllowedWithMarkup).ok);
}

TEST_CASE("markup mismatch: a PNG named page.html is rejected") {
  Decision d = decide("page.html", kPng, sniffer(), kAllowedWithMarkup);
  CHECK_FALSE(d.ok);
  CHECK(d.reason.find("declared text/html by extension but content is image/png") == 0);
}

TEST_CASE("unknown extension: binary content named tool.exe is not allowed") {
  Decision d = decide("tool.exe", kElf, sniffer(), kDefaultAllowed);
  CHECK_FALSE(d.ok);
  CHECK(d.reason ==
        "media type application/x-executable is not allowed by the policy "
        "(sniffed from content; the extension is unknown)");
  Decision opaque = decide("blob.bin", "\x01\x02\x03\xff\xfe"s, sniffer(), kDefaultAllowed);
  CHECK_FALSE(opaque.ok);
  CHECK(opaque.reason.find("media type application/octet-stream is not allowed by the policy") == 0);
}

TEST_CASE("unknown extension: content in the allowlist is accepted under its sniffed type") {
  Decision png = decide("chart", kPng, sniffer(), kDefaultAllowed);
  CHECK(png.ok);
  CHECK(png.media_type == "image/png");
  Decision text = decide("RESULTS", "all 12 tests passed\n", sniffer(), kDefaultAllowed);
  CHECK(text.ok);
  CHECK(text.media_type == "text/plain");
  Decision csv = decide("out.dat", kCsv, sniffer(), kDefaultAllowed);
  CHECK(csv.ok);
  CHECK(csv.media_type == "text/csv");
}

TEST_CASE("unknown extension: Latin-1 text sniffed as text/plain still has to be UTF-8") {
  Decision d = decide("RESULTS", "caf\xe9\n", sniffer(), kDefaultAllowed);
  CHECK_FALSE(d.ok);
  CHECK(d.reason == "text/plain content is not valid UTF-8 (ISO-8859 text)");
}

TEST_CASE("policy: a type not in the allowlist is rejected before sniffing") {
  Decision d = decide("index.html", "<!DOCTYPE html><html></html>", sniffer(), kDefaultAllowed);
  CHECK_FALSE(d.ok);
  CHECK(d.reason == "media type text/html is not allowed by the policy");
  CHECK(decide("plot.svg", kMatplotlibSvg, sniffer(), kDefaultAllowed).reason ==
        "media type image/svg+xml is not allowed by the policy");
  CHECK(decide("chart.png", kPng, sniffer(), {"text/plain"}).reason ==
        "media type image/png is not allowed by the policy");
  CHECK(decide("chart.png", kPng, sniffer(), {}).reason == "media type image/png is not allowed by the policy");
}

TEST_CASE("policy: allowlist entries match case-insensitively") {
  CHECK(decide("chart.png", kPng, sniffer(), {"IMAGE/PNG"}).ok);
}

TEST_CASE("large input: only a prefix is sniffed, the whole is UTF-8 checked") {
  std::string big(artifacts::types::kSniffMaxBytes + 10, 'a');
  big += "\xff";
  Decision d = decide("big.txt", big, sniffer(), kDefaultAllowed);
  CHECK_FALSE(d.ok);
  CHECK(d.reason.find("text/plain content is not valid UTF-8") == 0);
  big.pop_back();
  CHECK(decide("big.txt", big, sniffer(), kDefaultAllowed).ok);
}

TEST_CASE("reasons quote at most a bounded libmagic description") {
  // A JPEG comment lands in libmagic's description; the reason stays short.
  std::string jpeg = "\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"s;
  std::string comment(2000, 'C');
  size_t len = comment.size() + 2;
  jpeg += "\xff\xfe"s;
  jpeg += static_cast<char>(len >> 8);
  jpeg += static_cast<char>(len & 0xff);
  jpeg += comment;
  Decision d = decide("notes.txt", jpeg, sniffer(), kDefaultAllowed);
  CHECK_FALSE(d.ok);
  CHECK(d.reason.size() < 300);
}
