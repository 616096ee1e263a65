// Detection of active content (script, event handlers, script URLs, frames,
// redirects) in HTML, XHTML and SVG artifacts. Pure; any server thread.
// Detection only: it never rewrites markup, and prefers a false alarm to a miss.
#pragma once
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

}  // namespace artifacts::active
