// Active content in HTML, XHTML and SVG artifacts: OWASP XSS filter-evasion
// vectors must be detected, ordinary reports and matplotlib plots must not.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "server/artifacts/active_content.h"
#include "tests/unit/gate_corpus.h"

using namespace std::string_literals;
using artifacts::active::Finding;
using artifacts::active::scan_markup;

namespace {

void check_all_detected(const std::vector<std::string>& payloads) {
  for (const std::string& payload : payloads) {
    Finding f = scan_markup(payload);
    CHECK_MESSAGE(f.active, "missed: " << payload);
    CHECK_MESSAGE(!f.reason.empty(), "no reason for: " << payload);
  }
}

void check_all_benign(const std::vector<std::string>& documents) {
  for (const std::string& document : documents) {
    Finding f = scan_markup(document);
    CHECK_MESSAGE(!f.active, "false alarm (" << f.reason << "): " << document);
  }
}

// What matplotlib 3.8 writes for a small line plot (abridged: fewer ticks and glyphs).
const std::string kMatplotlibSvg = R"svg(<?xml version="1.0" encoding="utf-8" standalone="no"?>
<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN"
  "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">
<svg xmlns:xlink="http://www.w3.org/1999/xlink" width="460.8pt" height="345.6pt" viewBox="0 0 460.8 345.6" xmlns="http://www.w3.org/2000/svg" version="1.1">
 <metadata>
  <rdf:RDF xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:cc="http://creativecommons.org/ns#" xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">
   <cc:Work>
    <dc:type rdf:resource="http://purl.org/dc/dcmitype/StillImage"/>
    <dc:date>2024-05-01T10:00:00.000000</dc:date>
    <dc:format>image/svg+xml</dc:format>
    <dc:creator>
     <cc:Agent>
      <dc:title>Matplotlib v3.8.4, https://matplotlib.org/</dc:title>
     </cc:Agent>
    </dc:creator>
   </cc:Work>
  </rdf:RDF>
 </metadata>
 <defs>
  <style type="text/css">*{stroke-linejoin: round; stroke-linecap: butt}</style>
 </defs>
 <g id="figure_1">
  <g id="patch_1">
   <path d="M 0 345.6 
L 460.8 345.6 
L 460.8 0 
L 0 0 
z
" style="fill: #ffffff"/>
  </g>
  <g id="axes_1">
   <g id="matplotlib.axis_1">
    <g id="xtick_1">
     <g id="line2d_1">
      <defs>
       <path id="m0c8a3b1e2d" d="M 0 0 
L 0 3.5 
" style="stroke: #000000; stroke-width: 0.8"/>
      </defs>
      <g>
       <use xlink:href="#m0c8a3b1e2d" x="73.832727" y="307.584" style="stroke: #000000; stroke-width: 0.8"/>
      </g>
     </g>
     <g id="text_1">
      <!-- 0 -->
      <g transform="translate(70.651477 322.182437) scale(0.1 -0.1)">
       <defs>
        <path id="DejaVuSans-30" d="M 2034 4250 
Q 1547 4250 1301 3770 
z
" transform="scale(0.015625)"/>
       </defs>
       <use xlink:href="#DejaVuSans-30"/>
      </g>
     </g>
    </g>
   </g>
   <g id="line2d_2">
    <path d="M 73.832727 292.32 
L 387.010909 32.832 
" clip-path="url(#p3f1c2a9b7e)" style="fill: none; stroke: #1f77b4; stroke-width: 1.5; stroke-linecap: square"/>
   </g>
   <g id="image_1">
    <image xlink:href="data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgAAIAAAUAAQ0KLbQAAAAASUVORK5CYII=" width="10" height="10"/>
   </g>
  </g>
 </g>
 <defs>
  <clipPath id="p3f1c2a9b7e">
   <rect x="57.6" y="41.472" width="357.12" height="266.112"/>
  </clipPath>
 </defs>
</svg>
)svg";

const std::string kPandasReport = R"html(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Run summary</title>
<style>
  body { font-family: sans-serif; margin: 2em; }
  table.dataframe td, table.dataframe th { border: 1px solid #ccc; padding: 4px; }
  tr:nth-child(even) { background: #f8f8f8; }
</style>
</head>
<body>
<h1>Run summary</h1>
<p>Generated from <a href="https://example.org/data.csv" title="source">data.csv</a>; see
<a href="#totals">totals</a> and <a href="report.pdf">the PDF</a>.</p>
<table border="1" class="dataframe">
  <thead><tr style="text-align: right;"><th></th><th>city</th><th>population</th></tr></thead>
  <tbody>
    <tr><th>0</th><td>Oslo</td><td>709037</td></tr>
    <tr><th>1</th><td>Bergen</td><td>289330</td></tr>
  </tbody>
</table>
<h2 id="totals">Totals</h2>
<ul><li>rows: 2</li><li>ratio: 1 &lt; 2 &amp;&amp; 3 &gt; 2</li></ul>
<img src="chart.png" alt="population chart" width="400">
<details open><summary>Notes</summary><p>Only ASCII here.</p></details>
<form><input type="checkbox" checked disabled> done</form>
</body>
</html>
)html";

}  // namespace

TEST_CASE("benign: a typical matplotlib SVG passes") {
  Finding f = scan_markup(kMatplotlibSvg);
  CHECK_MESSAGE(!f.active, f.reason);
}

TEST_CASE("benign: a pandas-style HTML report with links, tables and inline style passes") {
  Finding f = scan_markup(kPandasReport);
  CHECK_MESSAGE(!f.active, f.reason);
}

TEST_CASE("benign: plain markup, SVG shapes and text that only mentions handlers") {
  check_all_benign({
      "",
      "just text, no markup at all",
      "<h1>Title</h1><h2>Sub</h2><p>Para <b>bold</b> <i>it</i> <code>x = 1</code></p>",
      "<table><tr><td colspan=2>a</td></tr></table>",
      "<a href=\"https://example.com/page?x=1&amp;y=2\">link</a>",
      "<a href='http://example.com'>http</a> <a href=mailto:me@example.com>mail</a>",
      "<a href=\"/relative/path\">rel</a> <a href=\"#anchor\">anchor</a>",
      "<p style=\"color: red; background: url(img.png); margin: 0 auto\">styled</p>",
      "<svg xmlns=\"http://www.w3.org/2000/svg\"><title>Chart</title><desc>A circle</desc>"
      "<circle cx=\"5\" cy=\"5\" r=\"4\" fill=\"blue\"/><rect width=\"3\" height=\"3\"/>"
      "<line x1=\"0\" y1=\"0\" x2=\"1\" y2=\"1\" stroke=\"black\"/><text x=\"1\" y=\"2\">label</text></svg>",
      "<svg><animate attributeName=\"opacity\" from=\"0\" to=\"1\" dur=\"1s\"/></svg>",
      "<p>Set the onload attribute to run code when the page loads.</p>",
      "<p>Write onload=init() in your body tag, or onclick = go()</p>",
      "<pre>&lt;body onload=\"init()\"&gt; and &lt;script&gt;alert(1)&lt;/script&gt;</pre>",
      "<p>if a < b and c > d then onerror=retry</p>",
      "<p>Schemes such as javascript: are blocked by the gate.</p>",
      "<img src=\"data:image/png;base64,iVBORw0KGgo=\" alt=\"inline\">",
      "<img src=\"data:image/jpeg;base64,/9j/4AAQ\" alt=\"inline jpeg\">",
      "<!-- a comment mentioning nothing active -->",
      "<p class=\"online\" data-onload=\"x\" id=\"one\">classes and data attributes</p>",
      "<meta charset=\"utf-8\"><meta name=\"description\" content=\"report\">",
      "<link rel=\"stylesheet\" href=\"style.css\">",
  });
}

TEST_CASE("script elements: plain, cased, namespaced, self-closing and split by NUL") {
  check_all_detected({
      "<script>alert('XSS')</script>",
      "<SCRIPT SRC=https://cdn.example/xss.js></SCRIPT>",
      "<ScRiPt>alert(1)</sCrIpT>",
      "<SCRIPT/XSS SRC=\"http://xss.rocks/xss.js\"></SCRIPT>",
      "<SCRIPT/SRC=\"http://xss.rocks/xss.js\"></SCRIPT>",
      "<<SCRIPT>alert(\"XSS\");//\\<</SCRIPT>",
      "<SCRIPT SRC=http://xss.rocks/xss.js?< B >",
      "<script\n>alert(1)</script>",
      "<svg:script xmlns:svg=\"http://www.w3.org/2000/svg\">alert(1)</svg:script>",
      "<svg><script href=\"data:,alert(1)\"/></svg>",
      "<x:script xmlns:x=\"http://www.w3.org/1999/xhtml\">alert(1)</x:script>",
      "<scr\0ipt>alert(1)</scr\0ipt>"s,
      "<IMG \"\"\"><SCRIPT>alert(\"XSS\")</SCRIPT>\">",
      "\"><script>alert(document.cookie)</script>",
      "<svg><![CDATA[<script>alert(1)</script>]]></svg>",
  });
}

TEST_CASE("event handlers: every on* attribute, any case, any separator") {
  check_all_detected({
      "<body onload=alert('XSS')>",
      "<BODY ONLOAD=alert('XSS')>",
      "<img src=x onerror=alert(1)>",
      "<IMG SRC=/ onerror=\"alert(String.fromCharCode(88,83,83))\"></img>",
      "<IMG SRC=# onmouseover=\"alert('xxs')\">",
      "<IMG onmouseover=\"alert('xxs')\">",
      "<div ONCLICK =\"go()\">x</div>",
      "<svg/onload=alert(1)>",
      "<svg onload=alert(1)//",
      "<img src=x\nonerror\n=\nalert(1)>",
      "<img src=x\tonerror=alert(1)>",
      "<a href=\"x\"onclick=\"alert(1)\">no space after the quote</a>",
      "<BODY onload!#$%&()*~+-_.,:;?@[/|\\]^`=alert(\"XSS\")>",
      "<details open ontoggle=alert(1)>",
      "<input autofocus onfocus=alert(1)>",
      "<video><source onerror=\"alert(1)\"></video>",
      "<marquee onstart=alert(1)>x</marquee>",
      "<svg><rect width=\"10\" height=\"10\" onmouseover=\"alert(1)\"/></svg>",
      "<x onclick=alert(1)>click me</x>",
      "<img src=x on\0error=alert(1)>"s,
      "<svg><g xlink:onclick=\"alert(1)\"/></svg>",
  });
}

TEST_CASE("script URLs: javascript: and vbscript: in any URL-bearing attribute") {
  check_all_detected({
      "<a href=\"javascript:alert(1)\">x</a>",
      "<IMG SRC=javascript:alert('XSS')>",
      "<IMG SRC=JaVaScRiPt:alert('XSS')>",
      "<IMG SRC=`javascript:alert(\"RSnake says, 'XSS'\")`>",
      "<a href=\"  javascript:alert(1)\">leading spaces</a>",
      "<BODY BACKGROUND=\"javascript:alert('XSS')\">",
      "<IMG DYNSRC=\"javascript:alert('XSS')\">",
      "<IMG LOWSRC=\"javascript:alert('XSS')\">",
      "<TABLE BACKGROUND=\"javascript:alert('XSS')\">",
      "<form action=\"javascript:alert(1)\"><input type=submit></form>",
      "<form><button formaction=javascript:alert(1)>go</button></form>",
      "<math href=\"javascript:alert(1)\">click</math>",
      "<svg><a xlink:href=\"javascript:alert(1)\"><text y=\"20\">x</text></a></svg>",
      "<LINK REL=\"stylesheet\" HREF=\"javascript:alert('XSS');\">",
      "<a href=\"vbscript:msgbox(1)\">vb</a>",
  });
}

TEST_CASE("script URLs: entity-encoded, control-split and NUL-split schemes") {
  check_all_detected({
      "<a href=\"jav&#x61;script:alert(1)\">x</a>",
      "<a href=\"java&#09;script:alert(1)\">x</a>",
      "<IMG SRC=\"jav\tascript:alert('XSS');\">",
      "<IMG SRC=\"jav&#x09;ascript:alert('XSS');\">",
      "<IMG SRC=\"jav&#x0A;ascript:alert('XSS');\">",
      "<IMG SRC=\"jav&#x0D;ascript:alert('XSS');\">",
      "<IMG SRC=\" &#14;  javascript:alert('XSS');\">",
      "<IMG "
      "SRC=&#106;&#97;&#118;&#97;&#115;&#99;&#114;&#105;&#112;&#116;&#58;&#97;&#108;&#101;&#114;&#116;&#40;&#39;&#88;&#"
      "83;&#83;&#39;&#41;>",
      "<IMG "
      "SRC=&#0000106&#0000097&#0000118&#0000097&#0000115&#0000099&#0000114&#0000105&#0000112&#0000116&#0000058&#"
      "0000097>",
      "<IMG SRC=&#x6A&#x61&#x76&#x61&#x73&#x63&#x72&#x69&#x70&#x74&#x3A&#x61&#x6C&#x65&#x72&#x74>",
      "<a href=\"javascript&colon;alert(1)\">named colon</a>",
      "<a href=\"java&Tab;script:alert(1)\">named tab</a>",
      "<a href=\"java&NewLine;script:alert(1)\">named newline</a>",
      "<a href=\"&#X6A;avascript:alert(1)\">upper X</a>",
      "<a href=\"javas\0cript:alert(1)\">NUL</a>"s,
  });
}

TEST_CASE("data: URLs that carry documents: text/html, SVG, XHTML") {
  check_all_detected({
      "<a href=\"data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==\">x</a>",
      "<a href=\"data:text/html,<script>alert(1)</script>\">x</a>",
      "<a href=\" DATA:TEXT/HTML,x\">x</a>",
      "<svg><use href=\"data:image/svg+xml;base64,PHN2ZyBpZD0neCc+PC9zdmc+#x\"/></svg>",
      "<a href=\"data:application/xhtml+xml,x\">x</a>",
      "<a href=\"d&#x61;ta:text/html,x\">encoded</a>",
  });
}

TEST_CASE("frames and plugins: iframe, frame, object, embed, applet") {
  check_all_detected({
      "<IFRAME SRC=\"javascript:alert('XSS');\"></IFRAME>",
      "<iframe src=\"https://example.com/\"></iframe>",
      "<iframe srcdoc=\"&lt;script&gt;alert(1)&lt;/script&gt;\"></iframe>",
      "<FRAMESET><FRAME SRC=\"javascript:alert('XSS');\"></FRAMESET>",
      "<OBJECT TYPE=\"text/x-scriptlet\" DATA=\"http://xss.rocks/scriptlet.html\"></OBJECT>",
      "<object data=\"javascript:alert(1)\">",
      "<EMBED SRC=\"data:image/svg+xml;base64,PHN2Zz48L3N2Zz4=\" type=\"image/svg+xml\">",
      "<embed src=\"movie.swf\">",
      "<applet code=\"X.class\"></applet>",
  });
}

TEST_CASE("SVG: foreignObject, href animation, handler elements") {
  check_all_detected({
      "<svg><foreignObject><div>html inside svg</div></foreignObject></svg>",
      "<svg><foreignobject width=\"10\" height=\"10\"><body/></foreignobject></svg>",
      "<svg><a><animate attributeName=\"href\" values=\"javascript:alert(1)\"/><text y=\"20\">x</text></a></svg>",
      "<svg><a><set attributeName=\"href\" to=\"javascript:alert(1)\"/><text y=\"20\">x</text></a></svg>",
      "<svg><a><set attributeName=\"xlink:href\" to=\"https://example.com;javascript:alert(1)\"/></a></svg>",
      "<svg><a><animate attributeName=\"href\" values=\"https://example.com;j&#x61;vascript:alert(1)\"/></a></svg>",
      "<svg><handler type=\"application/ecmascript\">alert(1)</handler></svg>",
  });
}

TEST_CASE("redirects and URL rewriting: meta refresh, base href, link import") {
  check_all_detected({
      "<META HTTP-EQUIV=\"refresh\" CONTENT=\"0;url=javascript:alert('XSS');\">",
      "<meta http-equiv=\"refresh\" content=\"0; url=https://evil.example/\">",
      "<META HTTP-EQUIV=\"refresh\" CONTENT=\"0;url=data:text/html base64,PHNjcmlwdD5hbGVydCgnWFNTJyk8L3NjcmlwdD4K\">",
      "<meta http-equiv=\" Refresh \" content=\"5\">",
      "<meta http-equiv=\"re&#x66;resh\" content=\"0;url=https://evil.example/\">",
      "<BASE HREF=\"javascript:alert('XSS');//\">",
      "<base href=\"https://evil.example/\">",
      "<link rel=\"import\" href=\"https://evil.example/x.html\">",
      "<link rel=\"stylesheet import\" href=\"x.html\">",
      "<meta http-equiv=\"Content-Type\" content=\"text/html; charset=UTF-7\">",
  });
}

TEST_CASE("CSS: expression(), script URLs, behaviors and bindings") {
  check_all_detected({
      "<DIV STYLE=\"width: expression(alert('XSS'));\">",
      "<IMG STYLE=\"xss:expr/*XSS*/ession(alert('XSS'))\">",
      "<DIV STYLE=\"background-image: url(javascript:alert('XSS'))\">",
      "<DIV STYLE=\"background-image:\\0075\\0072\\006C\\0028'\\006a\\0061\\0076\\0061\\0073\\0063\\0072\\0069\\0070"
      "\\0074\\003a\\0061\\006c\\0065\\0072\\0074\\0028.1027\\0058.1053\\0053\\0027\\0029'\\0029\">",
      "<STYLE>li {list-style-image: url(\"javascript:alert('XSS')\");}</STYLE><UL><LI>XSS</br>",
      "<STYLE>.XSS{background-image:url(\"javascript:alert('XSS')\");}</STYLE><A CLASS=XSS></A>",
      "<XSS STYLE=\"behavior: url(xss.htc);\">",
      "<STYLE>BODY{-moz-binding:url(\"http://xss.rocks/xssmoz.xml#xss\")}</STYLE>",
      "<svg><style><![CDATA[ rect { width: expression(alert(1)) } ]]></style></svg>",
  });
}

TEST_CASE("XML tricks: internal entities, attribute defaults and XSLT") {
  check_all_detected({
      "<!DOCTYPE svg [<!ENTITY x \"javascript:alert(1)\">]><svg><a href=\"&x;\">x</a></svg>",
      "<!DOCTYPE svg [<!ATTLIST svg onload CDATA \"alert(1)\">]><svg/>",
      "<?xml-stylesheet type=\"text/xsl\" href=\"evil.xsl\"?><svg/>",
  });
}

TEST_CASE("parser desync: a quote hidden in a comment or raw text does not hide the next tag") {
  check_all_detected({
      // The HTML reading skips the comment; the every-tag reading would swallow the meta.
      "<!-- <a title=\" -->\n<meta http-equiv=\"refresh\" content=\"0;url=https://evil/>\">\n<!-- \" -->",
      // The textarea holds a fake quote; browsers end it at </textarea>.
      "<textarea><a title=\"</textarea><base href=\"https://evil/>x\">\"",
      // Outside <svg> the HTML reading ends this CDATA at the first '>'; XML at "]]>".
      "<![CDATA[ 1 > 0 <a title=\" ]]><set attributeName='href' to='https://evil/'/><!-- \" -->",
      // <mi> is an HTML integration point: browsers end this CDATA at the first '>', and
      // only the every-tag reading, which skips nothing, sees the meta.
      "<math><mi><![CDATA[ > <meta http-equiv=refresh content=0;url=https://evil/> ]]></mi></math>",
      // A '>' inside a quoted value ends the quote-unaware span early; the tokenizers see on.
      "<a title=\"x>y\" onclick=\"alert(1)\">z</a>",
  });
}

TEST_CASE("reasons name what was found and where") {
  CHECK(scan_markup("<p>hi</p>\n<script>alert(1)</script>").reason == "<script> element at line 2, byte 10");
  CHECK(scan_markup("<svg/onload=alert(1)>").reason == "event handler attribute \"onload\" of <svg> at line 1, byte 0");
  CHECK(scan_markup("<p>x</p><a href=\"jav&#x61;script:alert(1)\">x</a>").reason ==
        "javascript: URL in attribute \"href\" of <a> at line 1, byte 8");
  CHECK(scan_markup("<meta http-equiv=\"refresh\" content=\"0;url=https://evil/\">").reason ==
        "<meta http-equiv=\"refresh\"> redirect at line 1, byte 0");
  CHECK(scan_markup("<svg>\n\n  <foreignObject/></svg>").reason == "<foreignobject> element at line 3, byte 9");
  // Offsets count the original bytes, NULs included.
  CHECK(scan_markup("\0\0<script>"s).reason == "<script> element at line 1, byte 2");
  // The earliest finding wins.
  CHECK(scan_markup("<img onerror=x>\n<script></script>").reason ==
        "event handler attribute \"onerror\" of <img> at line 1, byte 0");
}

// Every pass is linear; a quadratic one would take minutes on a megabyte, so
// the generous bound holds even in sanitizer builds.
TEST_CASE("hostile shapes: unterminated tags, quotes and comments do not hang or throw") {
  using Clock = std::chrono::steady_clock;
  const std::vector<std::string> shapes{"<a title=\"",  "<<<<",       "<!--",          "<a ",       "<style>", "&#",
                                        "<svg><style>", "<textarea>", "<!doctype x [", "<![cdata[", "on",      "<a onx",
                                        "<x y='1'",     "</"};
  for (const std::string& unit : shapes) {
    std::string big;
    while (big.size() < 1'000'000) big += unit;
    auto start = Clock::now();
    Finding f = scan_markup(big);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    CHECK_MESSAGE(ms < 10000, unit << " took " << ms << " ms");
    (void)f;
  }
  CHECK_FALSE(scan_markup("<a title=\"unterminated").active);
  CHECK(scan_markup("<img src=x onerror=alert(1)").active);  // no closing '>'
  CHECK(scan_markup("<a href=\"javascript:alert(1)").active);
}

// Found building tests/gate_corpus/html from the OWASP cheat sheet:
// the scanner accepted each of these before.
TEST_CASE("OWASP entries once missed: Netscape entities and JSSS, CSS strings and comments, IE data islands") {
  check_all_detected({
      "<BR SIZE=\"&{alert('XSS')}\">",
      // IE skipped "/*" inside a CSS string, so the comment-stripping reading joined the wrong halves.
      "<A STYLE='no\\xss:noxss(\"*//*\");xss:ex/*XSS*//*/*/pression(alert(\"XSS\"))'>",
      // "/*" with no "*/" hid the expression from the comment-stripping reading.
      "<style>//*{x:expression(alert(/xss/))}//<style></style>",
      "<STYLE TYPE=\"text/javascript\">alert('XSS');</STYLE>",
      "<XML ID=\"xss\"><I><B><IMG SRC=\"javas<!-- -->cript:alert('XSS')\"></B></I></XML>",
      "<SPAN DATASRC=#I DATAFLD=C DATAFORMATAS=HTML></SPAN>",
      "<t:set attributeName=\"innerHTML\" to=\"XSS\">",
      "<svg><set attributeName=\"onmouseover\" to=\"alert(1)\"/></svg>",
  });
  CHECK(scan_markup("<BR SIZE=\"&{alert('XSS')}\">").reason ==
        "JavaScript entity (&{...}) in attribute \"size\" of <br> at line 1, byte 0");
  CHECK(scan_markup("<STYLE TYPE=\"text/javascript\">x</STYLE>").reason ==
        "<style> of type \"text/javascript\" at line 1, byte 0");
  check_all_benign({"<style type=\"text/css\">p { color: red }</style><style type=\"\">b{}</style>",
                    "<style>a { content: \"/* not a comment */\" }</style>",
                    "<p title=\"a & {b}\">ampersand, then a brace</p>"});
}

TEST_CASE("find_markup gives scan_markup's finding in parts") {
  artifacts::active::FindingAt f = artifacts::active::find_markup("<p>hi</p>\n<script>alert(1)</script>");
  CHECK(f.active);
  CHECK(f.what == "<script> element");
  CHECK(f.line == 2);
  CHECK(f.byte == 10);
  CHECK_FALSE(artifacts::active::find_markup("<p>hi</p>").active);
}

TEST_CASE("ends_inside_tag: text after a fragment that leaves a tag open becomes its attributes") {
  using artifacts::active::ends_inside_tag;
  for (const char* open : {"<div title='x", "<div title=\"x\n", "<div", "<div class=x", "<a href=x ", "</div x='",
                           "<p>ok</p><img src=\"a.png\" alt=\"", "<!-- c --> <b title='",
                           // Only to the XML and every-tag readings: the HTML one ends the PI at '>'.
                           "<? a > <b title='x ?>", "<?x a <b y='?>",
                           // Only to the quote-unaware reading.
                           "<a title=\"x>\" <b",
                           // The tag open state: the next letter starts a tag name.
                           "<? x ?> <", "a </"})
    CHECK_MESSAGE(ends_inside_tag(open), open);
  for (const char* closed :
       {"", "text", "<div>", "<div title='x'>\n", "<img src=a.png/>", "<!-- <a b -->",
        "<textarea><a title=x></textarea>", "<!-- unterminated comment", "a < b", "<? x ?>", "a <= b"})
    CHECK_MESSAGE(!ends_inside_tag(closed), closed);
}

TEST_CASE("decode_attribute_value reads references as a browser does, lowercased") {
  using artifacts::active::decode_attribute_value;
  CHECK(decode_attribute_value("&#106avascript&colon;X") == "javascript:x");
  CHECK(decode_attribute_value("java&Tab;script&#x3A;") == "java\tscript:");
  CHECK(decode_attribute_value("&#0000106;&#X61;") == "ja");
  CHECK(decode_attribute_value("a&b &unknown; &#;") == "a&b &unknown; &#;");
}

TEST_CASE("corpus: tests/gate_corpus/html (the OWASP cheat sheet's file vectors) through scan_markup") {
  size_t n = gate_corpus::check_corpus(gate_corpus::kRoot / "html", [](const std::string&, const std::string& html) {
    Finding f = scan_markup(html);
    return gate_corpus::Judged{f.active ? "rejected" : "accepted", f.reason};
  });
  CHECK(n >= 120);
}
