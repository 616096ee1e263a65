// Detection of active content (script, event handlers, script URLs, frames,
// redirects) in HTML, XHTML and SVG artifacts. Pure; any server thread.
// Detection only: it never rewrites markup, and prefers a false alarm to a miss.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace artifacts::active {

struct Finding {
  bool active = false;
  std::string reason;  // what was found and where: "<script> element at line 3, byte 41"
};

// text should be UTF-8 (artifacts::types::decide insists); other bytes are
// scanned as they are. The earliest finding in the document is reported.
Finding scan_markup(std::string_view text);

// scan_markup's finding in parts, for a caller that places it in a larger
// document (a Markdown file's raw HTML): reason is what + " at line L, byte B".
struct FindingAt {
  bool active = false;
  std::string what;  // "<script> element"
  size_t line = 0;   // 1-based; 0 when nothing was found
  size_t byte = 0;
};
FindingAt find_markup(std::string_view text);

// Whether text, in any reading scan_markup makes of it (the HTML tokenizer's
// from its data state, XML's, every '<' a tag, quote-unaware), ends inside a
// tag (its name, an attribute or a quoted value): whatever a renderer writes
// after it (a Markdown HTML block's) becomes more of that tag.
bool ends_inside_tag(std::string_view text);

// An attribute value as a browser decodes its character references (numeric
// with or without ';', and the named ones that spell URL syntax), lowercased:
// enough to read a URL scheme the way the browser will.
std::string decode_attribute_value(std::string_view value);

}  // namespace artifacts::active
