// Active-content detection for HTML, XHTML and SVG artifacts. Pure; server
// threads. Four linear passes read the same text (quote-unaware spans, and tags
// as HTML, as XML and with every '<' a tag) so a construct one reading gets
// wrong, a comment or raw text hiding a quote, another still catches.
#include "server/artifacts/active_content.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace artifacts::active {
namespace {

constexpr size_t kNpos = std::string_view::npos;
// Untrusted names quoted in a reason are cut to this length.
constexpr size_t kNameInReasonMaxBytes = 40;

char to_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }
bool is_letter(char c) { return c >= 'a' && c <= 'z'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
// HTML separates with tab, LF, FF, CR and space. Treating every control as a
// separator only ever exposes more attributes, never hides one.
bool is_space(char c) {
  auto u = static_cast<unsigned char>(c);
  return u <= 0x20 || u == 0x7F;
}
// Letters in HTML; XML names may also start with '_', ':' or non-ASCII.
bool is_name_start(char c) { return is_letter(c) || c == '_' || c == ':' || static_cast<unsigned char>(c) >= 0x80; }

bool starts_at(std::string_view s, size_t i, std::string_view prefix) {
  return i <= s.size() && s.size() - i >= prefix.size() && s.substr(i, prefix.size()) == prefix;
}
bool contains(std::string_view s, std::string_view needle) { return s.find(needle) != kNpos; }

// "svg:script" -> "script": a namespace prefix does not stop an XHTML or SVG
// script element from running.
std::string_view local_name(std::string_view name) {
  size_t colon = name.rfind(':');
  return colon == kNpos ? name : name.substr(colon + 1);
}

std::string printable(std::string_view name) {
  std::string out;
  for (char c : name.substr(0, kNameInReasonMaxBytes)) {
    auto u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u >= 0x7F || c == '"') ? '?' : c;
  }
  if (name.size() > kNameInReasonMaxBytes) out += "...";
  return out;
}

// The document lowercased (HTML names and URL schemes are case-insensitive;
// matching entity names loosely only adds findings) with NUL bytes dropped (old
// parsers skipped them, so "<scr\0ipt>" ran). Offsets map back to the original.
struct Doc {
  std::string s;
  std::vector<size_t> nul_removed_at;  // index in s where each dropped NUL stood
  size_t original_offset(size_t i) const {
    return i + static_cast<size_t>(std::upper_bound(nul_removed_at.begin(), nul_removed_at.end(), i) -
                                   nul_removed_at.begin());
  }
};

Doc normalize(std::string_view text) {
  Doc doc;
  doc.s.reserve(text.size());
  for (char c : text) {
    if (c == '\0')
      doc.nul_removed_at.push_back(doc.s.size());
    else
      doc.s.push_back(to_lower(c));
  }
  return doc;
}

// Keeps the earliest finding; at equal offsets the first one reported wins.
class Findings {
 public:
  // False once something at or before this index is known: the caller can
  // skip building reasons that would lose anyway.
  bool could_improve(size_t at) const { return at < at_; }
  void add(size_t at, std::string what) {
    if (at < at_) {
      at_ = at;
      what_ = std::move(what);
    }
  }
  FindingAt result(const Doc& doc, std::string_view original) const {
    if (at_ == kNpos) return FindingAt{};
    size_t byte = doc.original_offset(at_);
    size_t line = 1 + static_cast<size_t>(
                          std::count(original.begin(), original.begin() + static_cast<std::ptrdiff_t>(byte), '\n'));
    return FindingAt{true, what_, line, byte};
  }

 private:
  size_t at_ = kNpos;
  std::string what_;
};

// ---- Character references: browsers decode them in attribute values before
// the URL parser sees them, so "jav&#x61;script:" and "java&Tab;script:" run.

struct NamedReference {
  std::string_view name;  // lowercase; matched case-insensitively (false alarms only)
  std::string_view text;
};
constexpr std::array kNamedReferences{
    NamedReference{"tab", "\t"},   NamedReference{"newline", "\n"},    NamedReference{"colon", ":"},
    NamedReference{"semi", ";"},   NamedReference{"lpar", "("},        NamedReference{"rpar", ")"},
    NamedReference{"sol", "/"},    NamedReference{"bsol", "\\"},       NamedReference{"amp", "&"},
    NamedReference{"lt", "<"},     NamedReference{"gt", ">"},          NamedReference{"quot", "\""},
    NamedReference{"apos", "'"},   NamedReference{"period", "."},      NamedReference{"comma", ","},
    NamedReference{"excl", "!"},   NamedReference{"num", "#"},         NamedReference{"percnt", "%"},
    NamedReference{"equals", "="}, NamedReference{"plus", "+"},        NamedReference{"lowbar", "_"},
    NamedReference{"quest", "?"},  NamedReference{"commat", "@"},      NamedReference{"lsqb", "["},
    NamedReference{"rsqb", "]"},   NamedReference{"lbrack", "["},      NamedReference{"rbrack", "]"},
    NamedReference{"lcub", "{"},   NamedReference{"rcub", "}"},        NamedReference{"lbrace", "{"},
    NamedReference{"rbrace", "}"}, NamedReference{"verbar", "|"},      NamedReference{"vert", "|"},
    NamedReference{"ast", "*"},    NamedReference{"dollar", "$"},      NamedReference{"grave", "`"},
    NamedReference{"hat", "^"},    NamedReference{"nbsp", "\xC2\xA0"},
};

void append_code_point(std::string& out, uint32_t cp) {
  if (cp == 0) return;  // browsers give U+FFFD; dropping it can only add findings
  if (cp < 0x80) {
    out += to_lower(static_cast<char>(cp));
    return;
  }
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
  auto byte = [](uint32_t b) { return static_cast<char>(static_cast<unsigned char>(b)); };
  if (cp < 0x800) {
    out += byte(0xC0 | (cp >> 6));
  } else if (cp < 0x10000) {
    out += byte(0xE0 | (cp >> 12));
    out += byte(0x80 | ((cp >> 6) & 0x3F));
  } else {
    out += byte(0xF0 | (cp >> 18));
    out += byte(0x80 | ((cp >> 12) & 0x3F));
    out += byte(0x80 | ((cp >> 6) & 0x3F));
  }
  if (cp >= 0x80) out += byte(0x80 | (cp & 0x3F));
}

int digit_value(char c, bool hex) {
  if (is_digit(c)) return c - '0';
  if (hex && c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Decodes numeric (with or without ';', any number of leading zeros) and the
// named references that spell URL syntax. Input is already lowercase.
std::string decode_references(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size();) {
    if (v[i] != '&') {
      out += v[i++];
      continue;
    }
    size_t j = i + 1;
    if (j < v.size() && v[j] == '#') {
      ++j;
      bool hex = j < v.size() && v[j] == 'x';
      if (hex) ++j;
      uint32_t base = hex ? 16 : 10;
      size_t digits_begin = j;
      uint32_t cp = 0;
      for (int d; j < v.size() && (d = digit_value(v[j], hex)) >= 0; ++j)
        cp = std::min<uint32_t>(cp * base + static_cast<uint32_t>(d), 0x110000);
      if (j == digits_begin) {
        out += v[i++];
        continue;
      }
      if (j < v.size() && v[j] == ';') ++j;
      append_code_point(out, cp);
      i = j;
      continue;
    }
    // Longest known name that prefixes the run, as the HTML tokenizer matches.
    const NamedReference* best = nullptr;
    for (const NamedReference& r : kNamedReferences)
      if (starts_at(v, j, r.name) && (best == nullptr || r.name.size() > best->name.size())) best = &r;
    if (best == nullptr) {
      out += v[i++];
      continue;
    }
    out += best->text;
    j += best->name.size();
    if (j < v.size() && v[j] == ';') ++j;
    i = j;
  }
  return out;
}

// The URL parser strips leading C0 controls and spaces and removes tabs and
// newlines anywhere ("java\tscript:" runs). Dropping every control and space
// is a superset; a leading quote or backtick is dropped for old IE's sake.
std::string compact(std::string_view decoded) {
  std::string out;
  for (char c : decoded)
    if (!is_space(c)) out += c;
  size_t lead = out.find_first_not_of("\"'`");
  return lead == kNpos ? std::string() : out.substr(lead);
}

constexpr std::array<std::string_view, 2> kScriptSchemes{"javascript:", "vbscript:"};

std::string_view script_scheme_prefix(std::string_view url) {
  for (std::string_view scheme : kScriptSchemes)
    if (starts_at(url, 0, scheme)) return scheme;
  return {};
}

// data: URLs that only ever decode to pixels or glyphs (matplotlib embeds
// rasters as data:image/png). Anything else (text/html, image/svg+xml, ...)
// can be a document with script when framed or navigated.
constexpr std::array<std::string_view, 11> kInertDataTypes{
    "image/png",  "image/jpeg",   "image/jpg", "image/gif",         "image/webp",         "image/bmp",
    "image/avif", "image/x-icon", "font/",     "application/font-", "application/x-font-"};

// Media types of data: URLs searched for in whole tags, where the attribute
// they sit in is unknown.
constexpr std::array<std::string_view, 11> kScriptableDataTypes{"data:text/html",
                                                                "data:application/xhtml",
                                                                "data:image/svg",
                                                                "data:text/xml",
                                                                "data:application/xml",
                                                                "data:text/javascript",
                                                                "data:application/javascript",
                                                                "data:application/x-javascript",
                                                                "data:text/ecmascript",
                                                                "data:application/ecmascript",
                                                                "data:text/vbscript"};

// "data:image/png;base64,..." -> "image/png"; url starts with "data:".
std::string_view data_media_type(std::string_view url) {
  std::string_view type = url.substr(5);
  return type.substr(0, type.find_first_of(";,"));
}

bool is_inert_data_url(std::string_view url) {
  std::string_view type = data_media_type(url);
  return std::any_of(kInertDataTypes.begin(), kInertDataTypes.end(), [&](std::string_view t) {
    return t.back() == '/' || t.back() == '-' ? starts_at(type, 0, t) : type == t;
  });
}

// Attributes whose value a browser fetches, navigates to or animates into one.
constexpr std::array<std::string_view, 25> kUrlAttributes{
    "href",    "src",    "action", "formaction", "data",   "codebase", "background", "poster",  "srcset",
    "lowsrc",  "dynsrc", "cite",   "longdesc",   "usemap", "manifest", "icon",       "classid", "archive",
    "profile", "values", "to",     "from",       "by",     "content",  "base"};

bool is_url_attribute(std::string_view local) {
  return std::find(kUrlAttributes.begin(), kUrlAttributes.end(), local) != kUrlAttributes.end();
}

// "onload", "ONCLICK", "onmouseover": every on<letter> attribute is treated as
// a handler, including names old Gecko accepted with junk after them.
bool is_event_handler_name(std::string_view name) {
  return name.size() > 2 && name[0] == 'o' && name[1] == 'n' && is_letter(name[2]);
}

// ---- CSS: expression() (IE), -moz-binding (old Gecko), behavior: (IE .htc)
// and script URLs in url(). Escapes are undone and comments removed first, so
// "expr/**/ession(" and "\6a avascript:" are seen.

// How a reading treats CSS comments. IE skipped "/*" inside a string
// ('noxss("*//*")' hid no comment), so a string-unaware reading misses what it
// joins; a string-aware one is fooled by an unclosed quote; and "/*" with no
// "*/" hides the rest from both. Each reading is checked.
enum class CssComments { kRemoved, kRemovedOutsideStrings, kKept };

std::string compact_css(std::string_view css, CssComments comments) {
  std::string out;
  char in_string = 0;  // the quote of the CSS string we are in (kRemovedOutsideStrings)
  for (size_t i = 0; i < css.size();) {
    if (comments == CssComments::kRemovedOutsideStrings) {
      if (in_string == 0 && (css[i] == '"' || css[i] == '\''))
        in_string = css[i];
      else if (in_string != 0 && (css[i] == in_string || css[i] == '\n'))
        in_string = 0;  // a newline ends an unclosed string (a bad-string token)
    }
    if (comments != CssComments::kKept && in_string == 0 && starts_at(css, i, "/*")) {
      size_t end = css.find("*/", i + 2);
      i = end == kNpos ? css.size() : end + 2;
      continue;
    }
    char c = css[i];
    if (c == '\\') {
      ++i;
      if (i >= css.size()) break;
      if (digit_value(css[i], true) >= 0) {
        uint32_t cp = 0;
        for (size_t k = 0; k < 6 && i < css.size() && digit_value(css[i], true) >= 0; ++k, ++i)
          cp = cp * 16 + static_cast<uint32_t>(digit_value(css[i], true));
        if (i < css.size() && is_space(css[i])) ++i;  // one space ends a hex escape
        append_code_point(out, cp);
        continue;
      }
      if (css[i] != '\n') out += css[i];
      ++i;
      continue;
    }
    if (!is_space(c)) out += c;
    ++i;
  }
  return out;
}

constexpr std::array<std::string_view, 5> kCssThreats{"expression(", "javascript:", "vbscript:", "-moz-binding",
                                                      "behavior:"};

std::string_view css_threat(std::string_view css) {
  for (CssComments comments : {CssComments::kRemoved, CssComments::kRemovedOutsideStrings, CssComments::kKept}) {
    std::string compacted = compact_css(css, comments);
    for (std::string_view threat : kCssThreats)
      if (contains(compacted, threat)) return threat;
  }
  return {};
}

// ---- Elements that run script, load another document, redirect, or change
// how every other URL resolves, whatever their attributes.
// <xml> is an IE data island: DATASRC/DATAFORMATAS=HTML inserted its markup.
constexpr std::array<std::string_view, 12> kActiveElements{"script",  "iframe",   "frame",  "frameset",
                                                           "object",  "embed",    "applet", "foreignobject",
                                                           "handler", "listener", "portal", "xml"};

bool is_active_element(std::string_view local) {
  return std::find(kActiveElements.begin(), kActiveElements.end(), local) != kActiveElements.end();
}

// SVG animation elements that can set an attribute, such as href, to a script URL.
bool is_animation_element(std::string_view local) {
  return local == "animate" || local == "set" || local == "animatemotion" || local == "animatetransform" ||
         local == "animatecolor";
}

struct Attribute {
  std::string_view name;
  std::string_view value;
  bool has_value = false;
};

struct Tag {
  size_t at = 0;  // index of '<'
  std::string_view name;
  bool end = false;
  bool self_closing = false;
  bool unterminated = false;  // the text ended before its '>'
  std::vector<Attribute> attributes;
  size_t next = 0;  // index just past '>', or the end of the text
};

// Follows the HTML tokenizer's tag states: a name ends at a separator, '/' or
// '>'; an attribute may follow a quoted value with no separator; a quote only
// opens a value after '='. name_at is the first byte of the tag name.
Tag parse_tag(std::string_view s, size_t lt, size_t name_at, bool end) {
  Tag tag;
  tag.at = lt;
  tag.end = end;
  size_t n = s.size();
  size_t j = name_at;
  while (j < n && !is_space(s[j]) && s[j] != '/' && s[j] != '>') ++j;
  tag.name = s.substr(name_at, j - name_at);
  while (j < n) {
    while (j < n && (is_space(s[j]) || s[j] == '/')) ++j;
    if (j >= n || s[j] == '>') break;
    Attribute attribute;
    size_t name_begin = j++;  // a leading '=' belongs to the name
    while (j < n && !is_space(s[j]) && s[j] != '/' && s[j] != '>' && s[j] != '=') ++j;
    attribute.name = s.substr(name_begin, j - name_begin);
    size_t k = j;
    while (k < n && is_space(s[k])) ++k;
    if (k < n && s[k] == '=') {
      attribute.has_value = true;
      j = k + 1;
      while (j < n && is_space(s[j])) ++j;
      if (j < n && (s[j] == '"' || s[j] == '\'')) {
        size_t close = s.find(s[j], j + 1);
        if (close == kNpos) close = n;
        attribute.value = s.substr(j + 1, close - j - 1);
        j = std::min(close + 1, n);
      } else {
        size_t value_begin = j;
        while (j < n && !is_space(s[j]) && s[j] != '>') ++j;
        attribute.value = s.substr(value_begin, j - value_begin);
      }
    }
    tag.attributes.push_back(attribute);
  }
  tag.self_closing = j < n && j > name_at && s[j - 1] == '/';
  tag.unterminated = j >= n;
  tag.next = j < n ? j + 1 : n;
  return tag;
}

// rel="stylesheet import": whitespace-separated tokens.
bool has_token(std::string_view list, std::string_view token) {
  for (size_t i = 0; i < list.size();) {
    while (i < list.size() && is_space(list[i])) ++i;
    size_t end = i;
    while (end < list.size() && !is_space(list[end])) ++end;
    if (list.substr(i, end - i) == token) return true;
    i = end;
  }
  return false;
}

std::string in_tag(std::string_view attribute, std::string_view element) {
  return "attribute \"" + printable(attribute) + "\" of <" + printable(element) + ">";
}

void check_tag(const Tag& tag, Findings& findings) {
  if (!findings.could_improve(tag.at)) return;
  std::string_view element = local_name(tag.name);
  for (const Attribute& a : tag.attributes) {
    std::string_view local = local_name(a.name);
    if (is_event_handler_name(a.name) || is_event_handler_name(local))
      findings.add(tag.at, "event handler " + in_tag(a.name, tag.name));
    if (!a.has_value) continue;
    std::string value = decode_references(a.value);
    std::string url = compact(value);
    if (std::string_view scheme = script_scheme_prefix(url); !scheme.empty())
      findings.add(tag.at, std::string(scheme) + " URL in " + in_tag(a.name, tag.name));
    else if (starts_at(url, 0, "data:") && is_url_attribute(local) && !is_inert_data_url(url))
      findings.add(tag.at,
                   "data: URL of type \"" + printable(data_media_type(url)) + "\" in " + in_tag(a.name, tag.name));
    if (local == "style")
      if (std::string_view threat = css_threat(value); !threat.empty())
        findings.add(tag.at, "CSS " + std::string(threat) + " in " + in_tag(a.name, tag.name));
    // Netscape 4 ran "&{...};" in any attribute value as a script expression.
    if (contains(value, "&{")) findings.add(tag.at, "JavaScript entity (&{...}) in " + in_tag(a.name, tag.name));
    // Netscape 4's JavaScript style sheets: <style type="text/javascript"> ran its body.
    if (element == "style" && local == "type" && !url.empty() && url != "text/css")
      findings.add(tag.at, "<style> of type \"" + printable(url) + "\"");
    // IE data binding: DATAFORMATAS=HTML inserted a data island's markup.
    if (local == "datasrc") findings.add(tag.at, "IE data binding (" + in_tag(a.name, tag.name) + ")");

    if (element == "meta" && local == "http-equiv" && url == "refresh")
      findings.add(tag.at, "<meta http-equiv=\"refresh\"> redirect");
    // UTF-7 let "+ADw-script+AD4-" through every byte-level filter.
    if (element == "meta" && contains(url, "utf-7")) findings.add(tag.at, "<meta> declaring the UTF-7 charset");
    if (element == "base" && local == "href") findings.add(tag.at, "<base href> (redirects every relative URL)");
    if (element == "link" && local == "rel" && has_token(value, "import")) findings.add(tag.at, "<link rel=import>");
    if (is_animation_element(element) && local == "attributename" && local_name(url) == "href")
      findings.add(tag.at, "<" + printable(tag.name) + "> animating href");
    // IE's HTML+TIME <t:set attributeName="innerHTML" to="<script...">; an
    // animated handler is a handler.
    if (is_animation_element(element) && local == "attributename" &&
        (is_event_handler_name(local_name(url)) || url == "innerhtml" || url == "outerhtml"))
      findings.add(tag.at, "<" + printable(tag.name) + "> animating \"" + printable(url) + "\"");
  }
}

// Index of "</name" closing a raw-text element with exactly this name, or the end.
size_t find_close_tag(std::string_view s, size_t from, std::string_view name) {
  for (size_t k = s.find("</", from); k != kNpos; k = s.find("</", k + 2)) {
    size_t e = k + 2;
    while (e < s.size() && !is_space(s[e]) && s[e] != '/' && s[e] != '>' && s[e] != '<') ++e;
    if (s.substr(k + 2, e - k - 2) == name) return k;
  }
  return s.size();
}

// HTML comments end at "-->" or "--!>"; "<!-->" and "<!--->" are empty.
size_t skip_html_comment(std::string_view s, size_t body) {
  if (starts_at(s, body, ">")) return body + 1;
  if (starts_at(s, body, "->")) return body + 2;
  for (size_t k = s.find('-', body); k != kNpos; k = s.find('-', k + 1)) {
    if (starts_at(s, k, "-->")) return k + 3;
    if (starts_at(s, k, "--!>")) return k + 4;
  }
  return s.size();
}

size_t past(std::string_view s, size_t from, std::string_view terminator) {
  size_t k = s.find(terminator, from);
  return k == kNpos ? s.size() : k + terminator.size();
}

enum class Mode {
  kEveryTag,  // no comments, CDATA or raw text: every '<' + name is a tag
  kHtml,      // HTML comments, bogus comments and raw-text elements
  kXml,       // XML comments, CDATA, processing instructions, DOCTYPE subsets
};

// Where text resumes after a comment, CDATA section, processing instruction or
// DOCTYPE starting at lt; kNpos when none starts there.
size_t skip_declaration(std::string_view s, size_t lt, Mode mode, bool in_foreign_content) {
  if (starts_at(s, lt, "<!--")) return mode == Mode::kHtml ? skip_html_comment(s, lt + 4) : past(s, lt + 4, "-->");
  bool xml_rules = mode == Mode::kXml || in_foreign_content;
  if (starts_at(s, lt, "<![cdata[") && xml_rules) return past(s, lt + 9, "]]>");
  if (starts_at(s, lt, "<?") && mode == Mode::kXml) return past(s, lt + 2, "?>");
  if (starts_at(s, lt, "<!doctype") && mode == Mode::kXml) {
    size_t gt = s.find('>', lt);
    if (gt == kNpos) return s.size();
    // An internal subset may hold '>' inside its declarations.
    size_t bracket = s.substr(lt, gt - lt).find('[');
    if (bracket == kNpos) return gt + 1;
    size_t close = s.find(']', lt + bracket);
    return close == kNpos ? s.size() : past(s, close, ">");
  }
  // Everything else after "<!" or "<?" is a bogus comment to the next '>' in HTML.
  if (starts_at(s, lt, "<!") || starts_at(s, lt, "<?")) return past(s, lt + 2, ">");
  return kNpos;
}

bool is_raw_text_element(std::string_view name) {
  constexpr std::array<std::string_view, 10> kRawText{"script", "style",   "textarea", "title",    "xmp",
                                                      "iframe", "noembed", "noframes", "noscript", "plaintext"};
  return std::find(kRawText.begin(), kRawText.end(), name) != kRawText.end();
}

// Returns whether the text ends inside a tag (kHtml: as the HTML tokenizer
// reads it). Without findings it only walks, to the end.
bool scan_tags(std::string_view s, Mode mode, Findings* findings) {
  size_t n = s.size();
  int foreign_depth = 0;  // inside <svg> or <math>, where HTML uses XML-ish rules
  for (size_t i = 0; i < n;) {
    size_t lt = s.find('<', i);
    if (lt == kNpos) return false;
    if (findings != nullptr && !findings->could_improve(lt)) return false;
    if (mode != Mode::kEveryTag) {
      if (size_t resume = skip_declaration(s, lt, mode, foreign_depth > 0); resume != kNpos) {
        i = resume;
        continue;
      }
    }
    size_t j = lt + 1;
    bool end = j < n && s[j] == '/';
    if (end) ++j;
    if (j >= n || !is_name_start(s[j])) {
      // "</3>" is a bogus comment in HTML; a lone '<' is text.
      i = (end && mode == Mode::kHtml) ? past(s, j, ">") : lt + 1;
      continue;
    }
    Tag tag = parse_tag(s, lt, j, end);
    if (findings != nullptr) check_tag(tag, *findings);
    if (tag.unterminated) return true;
    i = tag.next;
    if (mode != Mode::kHtml) continue;
    if (tag.name == "svg" || tag.name == "math") {
      if (!end && !tag.self_closing) ++foreign_depth;
      if (end && foreign_depth > 0) --foreign_depth;
    }
    if (!end && foreign_depth == 0 && is_raw_text_element(tag.name)) {
      if (tag.name == "plaintext") return false;  // the rest of the document is text
      i = find_close_tag(s, i, tag.name);
    }
  }
  return false;
}

// ---- Quote-unaware pass: from each '<' + name to the next '>'. It sees what
// the tokenizers may have swallowed into a quoted value, at the price of also
// looking inside values ("title='a onclick=b'" is flagged).

void check_span(std::string_view s, size_t begin, size_t end, Findings& findings) {
  if (!findings.could_improve(begin)) return;
  std::string_view span = s.substr(begin, end - begin);
  for (size_t k = 2; k + 2 < span.size(); ++k) {
    char before = span[k - 1];
    if (!(is_space(before) || before == '/' || before == '"' || before == '\'')) continue;
    if (span[k] != 'o' || span[k + 1] != 'n' || !is_letter(span[k + 2])) continue;
    size_t m = k + 2;
    while (m < span.size() && is_letter(span[m])) ++m;
    std::string_view name = span.substr(k, m - k);
    while (m < span.size() && is_space(span[m])) ++m;
    if (m < span.size() && span[m] == '=')
      findings.add(begin, "event handler \"" + printable(name) + "=\" inside a tag");
  }
  std::string compacted = compact(decode_references(span));
  for (std::string_view scheme : kScriptSchemes)
    if (contains(compacted, scheme)) findings.add(begin, std::string(scheme) + " URL inside a tag");
  for (std::string_view type : kScriptableDataTypes)
    if (contains(compacted, type)) findings.add(begin, std::string(type) + " URL inside a tag");
}

void scan_spans(std::string_view s, Findings& findings) {
  size_t n = s.size();
  size_t span = kNpos;
  size_t css_checked_until = 0;
  for (size_t i = 0; i < n; ++i) {
    if (s[i] == '>') {
      if (span != kNpos) check_span(s, span, i + 1, findings);
      span = kNpos;
      continue;
    }
    if (s[i] != '<') continue;
    // Internal DTD subsets: an entity can hide "javascript:" from every scan
    // here and browsers expand it; an ATTLIST default can add onload to every
    // element. XSLT named by xml-stylesheet can generate script.
    if (starts_at(s, i, "<!entity") || starts_at(s, i, "<!attlist"))
      findings.add(i, "DTD declaration (entities or attribute defaults)");
    if (starts_at(s, i, "<?xml-stylesheet")) findings.add(i, "xml-stylesheet processing instruction");

    size_t j = i + 1;
    bool end = j < n && s[j] == '/';
    if (end) ++j;
    if (j >= n || !is_name_start(s[j])) continue;
    if (span != kNpos) check_span(s, span, i, findings);
    span = i;
    if (end) continue;
    size_t e = j;
    while (e < n && !is_space(s[e]) && s[e] != '/' && s[e] != '>' && s[e] != '<') ++e;
    std::string_view name = s.substr(j, e - j);
    std::string_view element = local_name(name);
    if (is_active_element(element)) findings.add(i, "<" + printable(name) + "> element");
    // A <style> body nested in an earlier one ends at the same close tag, so
    // it is already covered; this keeps the pass linear.
    if (element == "style" && i >= css_checked_until) {
      size_t close = find_close_tag(s, e, name);
      if (std::string_view threat = css_threat(s.substr(e, close - e)); !threat.empty())
        findings.add(i, "CSS " + std::string(threat) + " in <" + printable(name) + ">");
      css_checked_until = close;
    }
  }
  if (span != kNpos) check_span(s, span, n, findings);
}

}  // namespace

Finding scan_markup(std::string_view text) {
  FindingAt f = find_markup(text);
  if (!f.active) return Finding{false, ""};
  return Finding{true, f.what + " at line " + std::to_string(f.line) + ", byte " + std::to_string(f.byte)};
}

FindingAt find_markup(std::string_view text) {
  Doc doc = normalize(text);
  Findings findings;
  scan_tags(doc.s, Mode::kHtml, &findings);
  scan_tags(doc.s, Mode::kXml, &findings);
  scan_tags(doc.s, Mode::kEveryTag, &findings);
  scan_spans(doc.s, findings);
  return findings.result(doc, text);
}

bool ends_inside_tag(std::string_view text) {
  Doc doc = normalize(text);
  for (Mode mode : {Mode::kHtml, Mode::kXml, Mode::kEveryTag})
    if (scan_tags(doc.s, mode, nullptr)) return true;
  // A trailing '<' or "</" leaves the tokenizer in its tag open state: the
  // next letter written starts a tag name.
  const std::string& s = doc.s;
  if (!s.empty() && (s.back() == '<' || (s.size() >= 2 && s.compare(s.size() - 2, 2, "</") == 0))) return true;
  // The quote-unaware reading: a '<' + name after the last '>' opens a span.
  size_t gt = s.rfind('>');
  for (size_t lt = s.find('<', gt == kNpos ? 0 : gt); lt != kNpos; lt = s.find('<', lt + 1)) {
    size_t j = lt + 1;
    if (j < s.size() && s[j] == '/') ++j;
    if (j < s.size() && is_name_start(s[j])) return true;
  }
  return false;
}

std::string decode_attribute_value(std::string_view value) { return decode_references(normalize(value).s); }

}  // namespace artifacts::active
