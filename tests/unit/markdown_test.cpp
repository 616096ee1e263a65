// Markdown artifacts judged on libcmark's tree (artifacts::markdown::scan):
// disallowed URLs however CommonMark spells them, link reference definitions,
// raw HTML alone and read together, the parse bounds, and the table-driven
// corpus tests/gate_corpus/markdown.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "server/artifacts/active_content.h"
#include "server/artifacts/markdown.h"
#include "tests/unit/gate_corpus.h"

using namespace std::string_literals;
using artifacts::active::Finding;
using artifacts::markdown::scan;

namespace {

std::string reason_of(const std::string& md) {
  Finding f = scan(md);
  CHECK_MESSAGE(f.active == !f.reason.empty(), md);
  return f.reason;
}

void check_all_rejected(const std::vector<std::string>& documents, const std::string& reason_part) {
  for (const std::string& md : documents) {
    Finding f = scan(md);
    CHECK_MESSAGE(f.active, "accepted: " << md);
    CHECK_MESSAGE(f.reason.find(reason_part) != std::string::npos, md << " -> " << f.reason);
  }
}

void check_all_accepted(const std::vector<std::string>& documents) {
  for (const std::string& md : documents) {
    Finding f = scan(md);
    CHECK_MESSAGE(!f.active, "rejected (" << f.reason << "): " << md);
  }
}

}  // namespace

TEST_CASE("the raw-text pattern's bypasses: named references in the scheme (cmark decodes them)") {
  CHECK(reason_of("# Notes\n\n[x](javascript&colon;alert(document.domain))\n") ==
        "script URL (javascript:) in a Markdown link at line 3");
  CHECK(reason_of("[x](data&colon;text/html;base64,PHNjcmlwdD4=)\n") ==
        "disallowed URL scheme (data:) in a Markdown link at line 1");
}

TEST_CASE("character references, controls, escapes and case inside the scheme") {
  check_all_rejected(
      {"[x](java&Tab;script:alert(1))", "[x](java&NewLine;script:alert(1))", "[x](&#106;avascript:alert(1))",
       "[x](&#0000106;avascript:alert(1))", "[x](&#x6A;avascript:alert(1))", "[x](&#X6a;avascript:alert(1))",
       // cmark leaves these alone; a renderer copying '&' lets the browser decode them.
       "[x](&#106avascript:alert(1))", "[x](&#x6A&#x61vascript:alert(1))", "[x](javascript&colonalert(1))",
       "[x](JaVaScRiPt:alert(1))", "[x](<java\tscript:alert(1)>)", "[x](java&#10;scr&#13;ipt:x)",
       "[x](<   javascript:alert(1)>)", "[x](&#1;&#14;&#32;javascript:alert(1))", "[x](java&#0;script:alert(1))",
       "[x](javascript\\:alert(1))", "[x]( <JaVaScRiPt:alert(1)>)"},
      "script URL (javascript:) in a Markdown link at line 1");
  CHECK(reason_of("[x](vbscript:msgbox(1))") == "script URL (vbscript:) in a Markdown link at line 1");
}

TEST_CASE("only http, https, mailto and relative URLs are allowed") {
  CHECK(reason_of("[x](file:///etc/passwd)") == "disallowed URL scheme (file:) in a Markdown link at line 1");
  CHECK(reason_of("a\n\n[x](ms-msdt:/id%20PCWDiagnostic)") ==
        "disallowed URL scheme (ms-msdt:) in a Markdown link at line 3");
  CHECK(reason_of("[x](C:\\Users\\me\\run.bat)") == "disallowed URL scheme (c:) in a Markdown link at line 1");
  std::string long_scheme(100, 'a');
  CHECK(reason_of("[x](" + long_scheme + ":x)") ==
        "disallowed URL scheme (" + long_scheme.substr(0, 40) + "...:) in a Markdown link at line 1");
  check_all_accepted({"[a](https://example.org/a_(b)) [b](http://x.org) [c](mailto:me@example.org)",
                      "[d](docs/page.md) [e](#usage) [f](/path?q=1) [g](?q=2) [h](//cdn.example.org/x) [i]()",
                      "[j](HTTPS://EXAMPLE.ORG/) <https://example.org/auto> <me@example.org>",
                      // A browser never decodes a percent-encoded scheme, and cmark keeps %XX.
                      "[k](java%73cript:alert(1)) [l](%6Aavascript:alert(1)) [m](javascript%3Aalert(1))",
                      // The scheme ends at the first ':' before any '/', '?' or '#'.
                      "[n](https://example.org/javascript:guide) [o](guide/javascript:x) [p](#javascript:x)",
                      "[q](a b:c) [r](<java script:x>)"});
}

TEST_CASE("autolinks and images") {
  CHECK(reason_of("<javascript:alert(1)>") == "script URL (javascript:) in a Markdown link at line 1");
  CHECK(reason_of("x\n<JAVASCRIPT:alert(1)>") == "script URL (javascript:) in a Markdown link at line 2");
  CHECK(reason_of("![x](javascript:alert(1))") == "script URL (javascript:) in a Markdown image at line 1");
  CHECK(reason_of("![x](data:image/png;base64,iVBORw0KGgo=)") ==
        "disallowed URL scheme (data:) in a Markdown image at line 1");
  CHECK(reason_of("> - *[x](javascript:alert(1))*") == "script URL (javascript:) in a Markdown link at line 1");
}

TEST_CASE("code spans and code blocks render as text: javascript: in them is accepted") {
  check_all_accepted({"Use `javascript:alert(1)` and `[x](javascript:alert(1))` and `<script>`.",
                      "```md\n[x](javascript:alert(1))\n[a]: javascript:alert(1)\n<script>alert(1)</script>\n```\n",
                      "Example:\n\n    <img src=x onerror=alert(1)>\n    [a]: javascript:x\n",
                      "\\[x](javascript:alert(1)) \\[a]: javascript:x", "[x] (javascript:alert(1))",
                      "Schemes such as javascript: and data:text/html are blocked.",
                      "&lt;script&gt;alert(1)&lt;/script&gt; &#60;img onerror=x&#62;",
                      "[a](https://example.org \"onclick=alert(1)\") ![x onerror=alert(1)](chart.png)"});
}

TEST_CASE("link reference definitions are rejected at their line, used or not") {
  // Used: cmark resolves the link, found at its own line first.
  CHECK(reason_of("[click][a]\n\n[a]: javascript:alert(1)\n") ==
        "script URL (javascript:) in a Markdown link at line 1");
  // Unused: cmark renders nothing, but another renderer may match the label.
  CHECK(reason_of("# Notes\n\n[a]: javascript:alert(1)\n") ==
        "script URL (javascript:) in a Markdown link reference definition at line 3");
  CHECK(reason_of("[r]:\n  &#x6a;avascript:alert(1)\n") ==
        "script URL (javascript:) in a Markdown link reference definition at line 1");
  CHECK(reason_of("text\n\n> - [a]: <data&colon;text/html,x>\n") ==
        "disallowed URL scheme (data:) in a Markdown link reference definition at line 3");
  CHECK(reason_of("[a\nb]: javascript:alert(1)\n") ==
        "script URL (javascript:) in a Markdown link reference definition at line 2");
  // A title begins: not a definition to cmark (junk after it), checked all the same.
  CHECK(reason_of("[a]: javascript:x \"t\" junk\n\n[a]\n") ==
        "script URL (javascript:) in a Markdown link reference definition at line 1");
  CHECK(reason_of("[a]: <javascript:x> 'multi\nline title'\n") ==
        "script URL (javascript:) in a Markdown link reference definition at line 1");
  // Safe definitions, definition-shaped lines in code, prose after a colon and
  // GFM footnotes are fine.
  check_all_accepted({"[a]: https://example.org \"t\"\n[b]: <./a b.md>\n[c]:\n  mailto:x@example.org\n\n[a] [b] [c]\n",
                      "```\n[a]: javascript:alert(1)\n```\n", "<div>\n[a]: javascript:alert(1)\n</div>\n",
                      "d[k]: javascript:x", "a[0]: javascript:x", "[TODO]: fix: the parser\n",
                      "Text[^1].\n\n[^1]: Source: Wikipedia\n[^2]: Note: see https://example.org\n"});
}

TEST_CASE("raw HTML alone: the reason names the fragment and its line in the document") {
  CHECK(reason_of("# Notes\n\nSome *text*.\n\n<script>alert(document.domain)</script>\n") ==
        "<script> element in a Markdown HTML block at line 5");
  CHECK(reason_of("para\n\n<div>\nok\n<iframe src=x></iframe>\n</div>\n") ==
        "<iframe> element in a Markdown HTML block at line 5");
  CHECK(reason_of("one\ntwo <img src=x\nonerror=alert(1)> three") ==
        "event handler attribute \"onerror\" of <img> in Markdown inline HTML at line 2");
  CHECK(reason_of("<a href=\"javascript:alert(1)\">click</a> here") ==
        "javascript: URL in attribute \"href\" of <a> in Markdown inline HTML at line 1");
  CHECK(reason_of("x\n\n<meta http-equiv=\"refresh\" content=\"0;url=https://evil/\">") ==
        "<meta http-equiv=\"refresh\"> redirect in a Markdown HTML block at line 3");
  // One node to cmark (a processing instruction ends at "?>"); a bogus comment
  // ending at the first '>' to browsers, which then see the <img>.
  CHECK(reason_of("a <? x > <img src=x onerror=alert(1)> ?> b") ==
        "event handler attribute \"onerror\" of <img> in Markdown inline HTML at line 1");
  // cmark writes U+FFFD for the NUL; it is read as the NUL old parsers skipped,
  // and as written (found by the fuzzer: "<\uFFFD" opens a tag to an XML reading).
  CHECK(reason_of("<div>\n<scr\0ipt>alert(1)</scr\0ipt>\n</div>\n"s) ==
        "<script> element in a Markdown HTML block at line 2");
  CHECK(reason_of("<div>\n<\0?p vbscript:x?>\n</div>\n"s) ==
        "vbscript: URL inside a tag in a Markdown HTML block at line 2");
  check_all_accepted({"<details>\n<summary>More</summary>\n\n*text* [x](https://example.org)\n\n</details>\n",
                      "<img src=\"chart.png\" width=\"400\"> <br> <kbd>Ctrl</kbd> <!-- note -->",
                      // Not HTML to CommonMark ('/' before an attribute): cmark escapes it.
                      "Text: <svg/onload=alert(1)>"});
}

TEST_CASE("raw HTML read together: quotes and elements split across fragments") {
  // The block ends inside a quote; the paragraph's "'" (cmark leaves it) closes it
  // and "</p>" ends the tag: <div title='x\n<p>' onclick='alert(1)' data-x=</p>.
  CHECK(reason_of("<div title='x\n\n' onclick='alert(1)' data-x=\n") ==
        "Markdown HTML block ending inside a tag (the Markdown after it would be read as that tag's attributes) at "
        "line 1");
  // The renderer's href="..." closes the quote; the URL becomes an onclick attribute.
  CHECK(reason_of("text\n\n<div title=\"x\n\n[a](x/onclick=alert(1)//)\n")
            .find("Markdown HTML block ending inside a tag") != std::string::npos);
  // One processing instruction to cmark, but a browser's bogus comment ends at
  // the first '>' and leaves <div title=' open (found by fuzzing).
  CHECK(reason_of("a <? x > <div title='y ?> b\n\n' onclick='alert(1)' x=\n") ==
        "Markdown inline HTML ending inside a tag (the Markdown after it would be read as that tag's attributes) at "
        "line 1");
  // The CSS is a Markdown text node between two inline HTML nodes.
  CHECK(reason_of("Look\nat <style>body{behavior:url(x.htc)}</style> here\n") ==
        "CSS behavior: in <style> in the Markdown's raw HTML read together at line 2");
  check_all_accepted({"<b>bold</b> and <i>it</i>\n\n<div class=\"note\">\n\nText 'quoted' onload=x.\n\n</div>\n"});
}

TEST_CASE("the finding on the earliest line is reported") {
  CHECK(reason_of("[a](https://x.org)\n\n<script>x</script>\n\n[b](javascript:1)\n") ==
        "<script> element in a Markdown HTML block at line 3");
  CHECK(reason_of("[b][r]\n\n<iframe></iframe>\n\n[r]: javascript:1\n") ==
        "script URL (javascript:) in a Markdown link at line 1");
}

TEST_CASE("bounds: too large, too many nodes and cmark 0.30's quadratic shapes are refused, quickly") {
  using Clock = std::chrono::steady_clock;
  CHECK(reason_of(std::string(artifacts::markdown::kTextMaxBytes + 1, 'a')) ==
        "Markdown not parsed: larger than 16777216 bytes");
  CHECK(!scan(std::string(artifacts::markdown::kTextMaxBytes, 'a')).active);
  auto repeat = [](const std::string& unit, size_t times) {
    std::string s;
    for (size_t i = 0; i < times; ++i) s += unit;
    return s;
  };
  struct Shape {
    std::string md;
    std::string reason;
  };
  const std::vector<Shape> refused{
      {repeat("*_", 2'000'000), "nodes, more than the 3000000 it may build"},
      {repeat("> ", 2'000'000) + "a", "nodes, more than"},
      // CVE-2023-22486 (fixed in cmark 0.30.3): each link walks back over the open "![".
      {repeat("![[]()", 100'000), "that make cmark 0.30 quadratic"},
      // check_open_blocks and S_insert_emph (fixed in cmark 0.31.0).
      {repeat("- ", 30'000) + "x" + std::string(30'000, '\n'), "that make cmark 0.30 quadratic"},
      {"> " + repeat("- ", 30'000) + "x\n" + repeat(">\n", 30'000), "that make cmark 0.30 quadratic"},
      {std::string(100'000, '>') + repeat("a*", 100'000), "that make cmark 0.30 quadratic"},
  };
  for (const Shape& shape : refused) {
    auto start = Clock::now();
    Finding f = scan(shape.md);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    CHECK_MESSAGE(f.reason.find("Markdown not parsed: ") == 0, f.reason);
    CHECK_MESSAGE(f.reason.find(shape.reason) != std::string::npos, f.reason);
    CHECK_MESSAGE(ms < 2000, shape.md.substr(0, 20) << " took " << ms << " ms");
  }
  // Shapes cmark parses in linear time are parsed, in bounded time.
  const std::vector<std::string> parsed{repeat("*a **a ", 30'000) + "b" + repeat(" a** a*", 30'000),
                                        repeat("[a](<b", 100'000),
                                        repeat("[", 500'000),
                                        repeat("<!--", 200'000),
                                        repeat("<a href=", 100'000),
                                        repeat("&#", 500'000),
                                        repeat("[a]: b\n", 200'000),
                                        repeat("<div title='x\n\n", 10'000),
                                        repeat("- a\n  ", 200'000),
                                        repeat("![x](y) ", 100'000),
                                        repeat("\\", 1'000'000),
                                        std::string(1'000'000, '\n'),
                                        std::string(100'000, '>') + "a"};
  for (const std::string& md : parsed) {
    auto start = Clock::now();
    Finding f = scan(md);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    CHECK_MESSAGE(f.reason.find("Markdown not parsed") == std::string::npos, md.substr(0, 20) << ": " << f.reason);
    CHECK_MESSAGE(ms < 10000, md.substr(0, 20) << " took " << ms << " ms");
  }
}

TEST_CASE("corpus: tests/gate_corpus/markdown through markdown::scan") {
  size_t n = gate_corpus::check_corpus(gate_corpus::kRoot / "markdown", [](const std::string&, const std::string& md) {
    Finding f = scan(md);
    return gate_corpus::Judged{f.active ? "rejected" : "accepted", f.reason};
  });
  CHECK(n >= 60);
}
