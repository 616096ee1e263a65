// Active content in Markdown artifacts, judged on the tree CommonMark's
// reference parser (libcmark) builds: what cmark, GitHub and other CommonMark
// renderers turn into links and HTML. Pure; any server thread.
//
// Stops: a link, image or autolink whose URL (as cmark decoded it, then as a
// browser's URL parser reads it) has a scheme other than http, https or mailto
// (javascript:, vbscript:, data:, file:, ms-msdt:, ...); a link reference
// definition to such a URL, used or not (another renderer may match labels or
// accept definitions cmark does not); raw HTML (HTML blocks and inline HTML)
// that active::scan_markup finds active alone, or read together with the rest
// of the document's raw HTML and text; raw HTML that ends inside a tag in
// any of scan_markup's readings (the Markdown after it would become that
// tag's attributes); and, failing closed, a document too large or too deeply
// nested for cmark 0.30 to parse in bounded time and memory.
// Does not stop: renderers that do not follow CommonMark (Markdown.pl,
// Python-Markdown: fenced code is raw HTML to them, "[x] (url)" a link), GFM
// extensions (tables, autolinked bare URLs: those are http/https/mailto only),
// and what a link's target serves. Code spans and code blocks render as text,
// so "javascript:" in them is accepted.
#pragma once
#include <cstddef>
#include <string_view>

#include "server/artifacts/active_content.h"

namespace artifacts::markdown {

// Larger documents are a finding, not parsed: the gate's default file cap.
constexpr size_t kTextMaxBytes = size_t{16} << 20;

// utf8_text should be valid UTF-8 (artifacts::types::decide insists). The
// finding on the earliest line is reported: "script URL (javascript:) in a
// Markdown link at line 3".
active::Finding scan(std::string_view utf8_text);

}  // namespace artifacts::markdown
