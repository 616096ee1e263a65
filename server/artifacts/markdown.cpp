// Markdown artifacts judged on libcmark's tree: link, image and definition
// URLs, and raw HTML through active::scan_markup. Pure; server threads. Never
// renders; refuses (as a finding) input that would make cmark 0.30 slow or huge.
#include "server/artifacts/markdown.h"

#include <cmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace artifacts::markdown {
namespace {

constexpr size_t kNpos = std::string_view::npos;
constexpr size_t kSchemeInReasonMaxBytes = 40;

// ---- Bounds. cmark is linear on most input, but the 0.30.2 that Debian 12
// ships is quadratic in three shapes fixed upstream later, and holds about
// 150-300 bytes per node. Both are estimated from the bytes before parsing.

// cmark's inline parser splits text at these (and line breaks): each can
// become a node of its own, and the text between them one more.
bool is_inline_special(char c) {
  switch (c) {
    case '\\':
    case '`':
    case '&':
    case '_':
    case '*':
    case '[':
    case ']':
    case '<':
    case '!':
      return true;
    default:
      return false;
  }
}

// Measured at 100-160 bytes per node counted here (a container marker counts
// two: its node and a paragraph): about half a GB at the worst. A 16 MiB table
// of short lines (a text node and a line break a line) counts 2 million.
constexpr uint64_t kNodesMax = 3'000'000;
// Each step costs cmark 2-25 ns: this keeps a parse under about a second.
constexpr uint64_t kStepsMax = 50'000'000;
// A blank line inside nested list items visits every open item
// (check_open_blocks, fixed in cmark 0.31.0), at about ten times a step.
constexpr uint64_t kBlankLineStepWeight = 10;

// Calls f(line_number, line) for each line as cmark counts them (LF, CR or CRLF).
template <typename F>
void for_each_line(std::string_view text, F&& f) {
  size_t line = 1;
  for (size_t i = 0; i <= text.size();) {
    size_t end = text.find_first_of("\r\n", i);
    if (end == kNpos) {
      if (i < text.size()) f(line, text.substr(i));
      return;
    }
    f(line++, text.substr(i, end - i));
    i = end + ((text[end] == '\r' && end + 1 < text.size() && text[end + 1] == '\n') ? 2 : 1);
  }
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Length of a list marker ("-", "+", "*", "1." .. "123456789)") at s[i], if
// one is there followed by a space, a tab or the end of the line; else 0.
size_t list_marker_length(std::string_view s, size_t i) {
  size_t j = i;
  if (j < s.size() && (s[j] == '-' || s[j] == '+' || s[j] == '*')) {
    ++j;
  } else {
    while (j < s.size() && j - i < 9 && is_digit(s[j])) ++j;
    if (j == i || j >= s.size() || (s[j] != '.' && s[j] != ')')) return 0;
    ++j;
  }
  return (j == s.size() || s[j] == ' ' || s[j] == '\t') ? j - i : 0;
}

struct ParseCost {
  uint64_t nodes = 0;
  uint64_t steps = 0;
};

uint64_t saturating_multiply(uint64_t a, uint64_t b) { return (b != 0 && a > UINT64_MAX / b) ? UINT64_MAX : a * b; }

// An upper bound of cmark 0.30.2's work on text. Container depth on a line is
// at most its '>' and list markers plus half its indentation (a nested item's
// content is indented past its parent's marker); a lazy line keeps the depth
// of the line before it. The three quadratic paths it charges:
//  - a blank line in nested list items visits each of them;
//  - each emphasis built checks the paragraph's ancestors (S_insert_emph,
//    fixed in cmark 0.31.0);
//  - each link closed walks back over every "![" still open below its "["
//    (CVE-2023-22486, fixed in cmark 0.30.3): each "[" is charged every "!["
//    before it, closed or not, since the last blank line (a paragraph never
//    crosses one).
ParseCost estimate_parse_cost(std::string_view text) {
  ParseCost cost;
  uint64_t depth_open = 0;
  bool previous_blank = true;
  uint64_t images_before = 0;  // "![" since the last blank line
  auto add = [&](uint64_t steps) { cost.steps = std::min(UINT64_MAX - steps, cost.steps) + steps; };
  for_each_line(text, [&](size_t, std::string_view s) {
    uint64_t markers = 0, indent_columns = 0;
    size_t i = 0;
    bool only_quote_markers = true;
    while (i < s.size()) {
      if (s[i] == ' ') {
        ++indent_columns;
        ++i;
      } else if (s[i] == '\t') {
        indent_columns += 4;
        ++i;
      } else if (s[i] == '>') {
        ++markers;
        ++i;
      } else if (size_t m = list_marker_length(s, i); m > 0) {
        ++markers;
        only_quote_markers = false;
        i += m;
      } else {
        break;
      }
    }
    uint64_t depth_line = markers + indent_columns / 2;
    bool blank = i == s.size() && only_quote_markers;
    uint64_t specials = 0, emphasis = 0, link_openers_cost = 0;
    for (size_t k = i; k < s.size(); ++k) {
      if (!is_inline_special(s[k])) continue;
      ++specials;
      if (s[k] == '*' || s[k] == '_') ++emphasis;
      if (s[k] == '!' && k + 1 < s.size() && s[k + 1] == '[') {
        ++images_before;
        ++k;  // that '[' opens an image
        ++specials;
      } else if (s[k] == '[') {
        link_openers_cost = std::min(UINT64_MAX - images_before, link_openers_cost) + images_before;
      }
    }
    cost.nodes += 2 * specials + 2 + 2 * markers;
    if (blank) {
      add(saturating_multiply(kBlankLineStepWeight, depth_open));
      images_before = 0;
    } else {
      depth_open = previous_blank ? depth_line : std::max(depth_open, depth_line);
      add(saturating_multiply(emphasis, depth_open));
      add(link_openers_cost);
    }
    previous_blank = blank;
  });
  return cost;
}

// ---- URLs: a scheme as the WHATWG URL parser finds it, and which are allowed.

char to_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// "javascript" for " JavaScript:alert(1)"; "" for "#top", "/a:b", "a b:c" and
// "%6Aavascript:x" (a browser never decodes a percent-encoded scheme). The
// parser strips leading C0 controls and spaces and removes every TAB, LF and
// CR; U+FFFD, which cmark writes for NUL, is dropped as old parsers dropped NUL.
std::string url_scheme(std::string_view url) {
  std::string scheme;
  bool leading = true;
  for (size_t i = 0; i < url.size(); ++i) {
    char c = url[i];
    if (c == '\t' || c == '\n' || c == '\r') continue;
    if (url.substr(i, 3) == "\xEF\xBF\xBD") {
      i += 2;
      continue;
    }
    if (leading && static_cast<unsigned char>(c) <= 0x20) continue;
    leading = false;
    if (c == ':') return scheme;
    // RFC 3986: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )
    bool in_scheme = is_alpha(c) || (!scheme.empty() && (is_digit(c) || c == '+' || c == '-' || c == '.'));
    if (!in_scheme) return "";
    scheme += to_lower(c);
  }
  return "";
}

bool is_allowed_scheme(std::string_view scheme) {
  return scheme.empty() || scheme == "http" || scheme == "https" || scheme == "mailto";
}

bool is_script_scheme(std::string_view scheme) {
  return scheme == "javascript" || scheme == "vbscript" || scheme == "livescript";
}

// The first disallowed scheme of url as cmark decoded it, or of url decoded
// once more as an attribute value: cmark leaves "&#106avascript:" (no ';')
// alone and escapes its '&', but a renderer that copies '&' into the href lets
// the browser decode it.
std::string disallowed_scheme(std::string_view url) {
  std::string scheme = url_scheme(url);
  if (!is_allowed_scheme(scheme)) return scheme;
  if (url.find('&') == kNpos) return "";
  scheme = url_scheme(active::decode_attribute_value(url));
  return is_allowed_scheme(scheme) ? "" : scheme;
}

std::string describe_scheme(const std::string& scheme, std::string_view where) {
  std::string shown = scheme.substr(0, kSchemeInReasonMaxBytes);
  if (scheme.size() > kSchemeInReasonMaxBytes) shown += "...";
  return (is_script_scheme(scheme) ? "script URL (" : "disallowed URL scheme (") + shown + ":) in " +
         std::string(where);
}

// ---- Findings: the one on the earliest line wins; at equal lines, the first.

class Earliest {
 public:
  void add(size_t line, std::string what) {
    if (line < line_) {
      line_ = line;
      what_ = std::move(what);
    }
  }
  active::Finding result() const {
    if (what_.empty()) return active::Finding{false, ""};
    return active::Finding{true, what_ + " at line " + std::to_string(line_)};
  }

 private:
  size_t line_ = SIZE_MAX;
  std::string what_;
};

active::Finding not_parsed(std::string why) { return active::Finding{true, "Markdown not parsed: " + why}; }

// ---- The tree.

struct NodeFree {
  void operator()(cmark_node* node) const { cmark_node_free(node); }
};
struct IterFree {
  void operator()(cmark_iter* iter) const { cmark_iter_free(iter); }
};

std::string_view literal_of(cmark_node* node) {
  const char* literal = cmark_node_get_literal(node);
  return literal == nullptr ? std::string_view() : std::string_view(literal);
}

size_t line_of(int line) { return line > 0 ? static_cast<size_t>(line) : 1; }

constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";

// cmark writes U+FFFD for NUL. Raw HTML is read as a browser gets it, U+FFFD
// and all, and where there is one also with NUL in its place, which the
// scanner drops as old parsers did: "<scr\0ipt>" ran in those.
std::string with_nul_for_replacement(std::string_view html, std::vector<size_t>* nul_at) {
  std::string with_nul;
  with_nul.reserve(html.size());
  for (size_t i = 0; i < html.size(); ++i) {
    if (html.substr(i, kReplacementCharacter.size()) == kReplacementCharacter) {
      if (nul_at != nullptr) nul_at->push_back(with_nul.size());
      with_nul += '\0';
      i += kReplacementCharacter.size() - 1;
    } else {
      with_nul += html[i];
    }
  }
  return with_nul;
}

bool has_replacement(std::string_view html) { return html.find(kReplacementCharacter) != kNpos; }

// The finding on the earlier line of the two readings.
active::FindingAt find_markup_both_ways(std::string_view html) {
  active::FindingAt as_written = active::find_markup(html);
  if (!has_replacement(html)) return as_written;
  std::vector<size_t> nul_at;  // where in with_nul each U+FFFD became a NUL
  std::string with_nul = with_nul_for_replacement(html, &nul_at);
  active::FindingAt nul_dropped = active::find_markup(with_nul);
  if (!nul_dropped.active || (as_written.active && as_written.line <= nul_dropped.line)) return as_written;
  auto nuls_before =
      static_cast<size_t>(std::lower_bound(nul_at.begin(), nul_at.end(), nul_dropped.byte) - nul_at.begin());
  nul_dropped.byte += nuls_before * (kReplacementCharacter.size() - 1);  // back to an offset in html
  return nul_dropped;
}

void append_escaped(std::string& out, std::string_view text) {
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
}

struct LineRange {
  size_t first = 0;
  size_t last = 0;
};

// The document as a browser receives it from a renderer, minus the renderer's
// own tags: raw HTML as written, everything else as escaped text. An element
// or a quote opened in one raw fragment and closed in another, or a <style>
// whose body is Markdown text, is read here as it will be. It starts at the
// first raw fragment: escaped text before it is inert whatever follows.
class RawStream {
 public:
  void raw(std::string_view html, size_t line) {
    started_ = true;
    mark(line);
    text_ += html;
  }
  void text(std::string_view text, size_t line) {
    if (!started_) return;
    mark(line);
    append_escaped(text_, text);
  }
  void line_break() {
    if (started_) text_ += '\n';
  }
  bool started() const { return started_; }
  const std::string& str() const { return text_; }
  // The source line of a byte of str(): its piece's line plus the line breaks since.
  size_t source_line(size_t byte) const {
    auto piece =
        std::upper_bound(pieces_.begin(), pieces_.end(), byte, [](size_t b, const Piece& p) { return b < p.offset; });
    if (piece == pieces_.begin()) return 1;
    --piece;
    size_t end = std::min(byte, text_.size());
    return piece->line + static_cast<size_t>(std::count(text_.begin() + static_cast<std::ptrdiff_t>(piece->offset),
                                                        text_.begin() + static_cast<std::ptrdiff_t>(end), '\n'));
  }

 private:
  struct Piece {
    size_t offset;
    size_t line;
  };
  void mark(size_t line) { pieces_.push_back(Piece{text_.size(), line}); }
  std::string text_;
  std::vector<Piece> pieces_;
  bool started_ = false;
};

// One raw HTML fragment, alone, spanning first_line..last_line of the document.
void check_fragment(std::string_view html, bool is_block, size_t first_line, size_t last_line, Earliest& findings) {
  std::string_view where = is_block ? " in a Markdown HTML block" : " in Markdown inline HTML";
  active::FindingAt f = find_markup_both_ways(html);
  if (f.active) findings.add(first_line + f.line - 1, f.what + std::string(where));
  // An HTML block ends at a blank line wherever its tags stand. Inline HTML is
  // a complete tag to cmark, but "<? x > <div title='y ?>" is one processing
  // instruction to cmark and a bogus comment ending at the first '>' to a
  // browser, which then reads an open <div>.
  if (active::ends_inside_tag(html) ||
      (has_replacement(html) && active::ends_inside_tag(with_nul_for_replacement(html, nullptr))))
    findings.add(last_line, (is_block ? "Markdown HTML block" : "Markdown inline HTML") +
                                std::string(" ending inside a tag (the Markdown after it would be read as that "
                                            "tag's attributes)"));
}

struct Walked {
  RawStream stream;
  std::vector<LineRange> verbatim;  // code and HTML blocks: no definitions inside
};

void walk(cmark_node* document, Earliest& findings, Walked& walked) {
  std::unique_ptr<cmark_iter, IterFree> iter(cmark_iter_new(document));
  // The iterator keeps its own place: no recursion, however deep the nesting.
  for (cmark_event_type event; (event = cmark_iter_next(iter.get())) != CMARK_EVENT_DONE;) {
    if (event != CMARK_EVENT_ENTER) continue;
    cmark_node* node = cmark_iter_get_node(iter.get());
    cmark_node_type type = cmark_node_get_type(node);
    size_t line = line_of(cmark_node_get_start_line(node));
    size_t last_line = std::max(line, line_of(cmark_node_get_end_line(node)));
    if (type >= CMARK_NODE_FIRST_BLOCK && type <= CMARK_NODE_LAST_BLOCK) walked.stream.line_break();
    switch (type) {
      case CMARK_NODE_LINK:
      case CMARK_NODE_IMAGE: {
        // cmark has decoded character references and backslash escapes, and
        // resolved reference links and autolinks, into this URL.
        const char* url = cmark_node_get_url(node);
        std::string_view u = url == nullptr ? std::string_view() : std::string_view(url);
        if (std::string scheme = disallowed_scheme(u); !scheme.empty())
          findings.add(line, describe_scheme(scheme, type == CMARK_NODE_LINK ? "a Markdown link" : "a Markdown image"));
        const char* title = cmark_node_get_title(node);
        walked.stream.text(u, line);
        walked.stream.text(title == nullptr ? "" : title, line);
        break;
      }
      case CMARK_NODE_HTML_BLOCK:
        check_fragment(literal_of(node), true, line, last_line, findings);
        walked.stream.raw(literal_of(node), line);
        walked.verbatim.push_back(LineRange{line, last_line});
        break;
      case CMARK_NODE_HTML_INLINE:
        check_fragment(literal_of(node), false, line, last_line, findings);
        walked.stream.raw(literal_of(node), line);
        break;
      case CMARK_NODE_CODE_BLOCK:
        walked.verbatim.push_back(LineRange{line, last_line});
        if (walked.stream.started()) walked.stream.text(literal_of(node), line);
        break;
      case CMARK_NODE_TEXT:
      case CMARK_NODE_CODE:
        if (walked.stream.started()) walked.stream.text(literal_of(node), line);
        break;
      case CMARK_NODE_SOFTBREAK:
      case CMARK_NODE_LINEBREAK:
        walked.stream.line_break();
        break;
      default:
        break;
    }
  }
}

// ---- Link reference definitions, used or not. cmark keeps no node for a
// definition; its uses are links above. These lines are read as definitions
// by any renderer that accepts them: "[label]: dest" after container markers,
// or "...]: dest" closing a label begun on an earlier line, the destination
// followed by nothing or by what may begin a title. "[^1]: ..." is a GFM
// footnote, text wherever it is not a definition (and a link above where
// cmark uses it as one).

std::string unescape_backslashes(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    auto next = i + 1 < s.size() ? static_cast<unsigned char>(s[i + 1]) : 0;
    bool punctuation = (next >= 0x21 && next <= 0x2F) || (next >= 0x3A && next <= 0x40) ||
                       (next >= 0x5B && next <= 0x60) || (next >= 0x7B && next <= 0x7E);
    if (s[i] == '\\' && punctuation) ++i;
    out += s[i];
  }
  return out;
}

// Index just past "]:" when line is definition-shaped, else npos.
size_t definition_colon(std::string_view s) {
  size_t i = 0;
  for (;;) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    if (i < s.size() && s[i] == '>') {
      ++i;
    } else if (size_t m = list_marker_length(s, i); m > 0) {
      i += m;
    } else {
      break;
    }
  }
  bool opened = i < s.size() && s[i] == '[';
  if (opened && i + 1 < s.size() && s[i + 1] == '^') return kNpos;
  for (size_t k = opened ? i + 1 : i; k < s.size(); ++k) {
    if (s[k] == '\\') {
      ++k;
      continue;
    }
    if (s[k] == '[') return kNpos;  // labels hold no unescaped brackets
    if (s[k] == ']') return (k + 1 < s.size() && s[k + 1] == ':') ? k + 2 : kNpos;
  }
  return kNpos;
}

// The destination at the start of s: "<...>" or a run without spaces, read by
// the lenient decoder (a superset of cmark's references for URL syntax).
void check_destination(std::string_view s, size_t line, Earliest& findings) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  s.remove_prefix(i);
  if (s.empty()) return;
  std::string_view destination;
  size_t end = 0;
  if (s[0] == '<') {
    end = s.find('>', 1);
    destination = s.substr(1, end == kNpos ? kNpos : end - 1);
    end = end == kNpos ? s.size() : end + 1;
  } else {
    while (end < s.size() && static_cast<unsigned char>(s[end]) > 0x20) ++end;
    destination = s.substr(0, end);
  }
  // "[TODO]: fix: this" is prose to every renderer: after the destination
  // comes nothing, or a title ("...", '...' or (...), perhaps unfinished).
  size_t rest = s.find_first_not_of(" \t", end);
  if (rest != kNpos && s[rest] != '"' && s[rest] != '\'' && s[rest] != '(') return;
  std::string url = unescape_backslashes(destination);
  if (std::string scheme = disallowed_scheme(url); !scheme.empty())
    findings.add(line, describe_scheme(scheme, "a Markdown link reference definition"));
}

void scan_definitions(std::string_view text, const std::vector<LineRange>& verbatim, Earliest& findings) {
  size_t range = 0;
  bool destination_on_this_line = false;  // "[a]:" ended the line before
  size_t definition_line = 0;
  for_each_line(text, [&](size_t line, std::string_view s) {
    while (range < verbatim.size() && verbatim[range].last < line) ++range;
    bool in_verbatim = range < verbatim.size() && verbatim[range].first <= line;
    if (destination_on_this_line && !in_verbatim) {
      size_t i = 0;
      while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '>')) ++i;
      check_destination(s.substr(i), definition_line, findings);
    }
    destination_on_this_line = false;
    if (in_verbatim) return;
    size_t after = definition_colon(s);
    if (after == kNpos) return;
    std::string_view rest = s.substr(after);
    if (rest.find_first_not_of(" \t") == kNpos) {
      destination_on_this_line = true;
      definition_line = line;
      return;
    }
    check_destination(rest, line, findings);
  });
}

}  // namespace

active::Finding scan(std::string_view utf8_text) {
  if (utf8_text.size() > kTextMaxBytes) return not_parsed("larger than " + std::to_string(kTextMaxBytes) + " bytes");
  ParseCost cost = estimate_parse_cost(utf8_text);
  if (cost.nodes > kNodesMax)
    return not_parsed("about " + std::to_string(cost.nodes) + " nodes, more than the " + std::to_string(kNodesMax) +
                      " it may build");
  if (cost.steps > kStepsMax)
    return not_parsed("nesting, blank lines and brackets that make cmark 0.30 quadratic (about " +
                      std::to_string(cost.steps) + " steps, more than " + std::to_string(kStepsMax) + ")");

  std::unique_ptr<cmark_node, NodeFree> document(
      cmark_parse_document(utf8_text.data(), utf8_text.size(), CMARK_OPT_DEFAULT));
  if (document == nullptr) return not_parsed("cmark_parse_document failed");

  Earliest findings;
  Walked walked;
  walk(document.get(), findings, walked);
  document.reset();  // the tree is no longer needed: give its memory back before the scans below
  if (walked.stream.started()) {
    active::FindingAt f = find_markup_both_ways(walked.stream.str());
    if (f.active) findings.add(walked.stream.source_line(f.byte), f.what + " in the Markdown's raw HTML read together");
  }
  scan_definitions(utf8_text, walked.verbatim, findings);
  return findings.result();
}

}  // namespace artifacts::markdown
