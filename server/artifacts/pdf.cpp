// PDF checks on qpdf's view of the document: every object in the
// cross-reference table (object streams and unreferenced objects included),
// each dictionary judged by what a reader would do with it. Server threads;
// never throws, never lets qpdf repair a file, never decodes content streams.
#include "server/artifacts/pdf.h"

// qpdf 11: no legacy PointerHolder API (std::shared_ptr only), and no warning about it.
#define POINTERHOLDER_TRANSITION 4
#include <qpdf/Pl_Flate.hh>
#include <qpdf/QPDF.hh>
#include <qpdf/QPDFExc.hh>
#include <qpdf/QPDFObjectHandle.hh>
#include <qpdf/QPDFWriter.hh>

#include <algorithm>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

namespace artifacts::pdf {
namespace {

// Bounds on what hostile input can make qpdf build. A 16 MiB file of minimal
// objects has about 360k; more means a stream-packed object table (990k took
// 12 s to parse on a loaded 2-core host).
constexpr size_t kMaxObjects = 500'000;
// qpdf inflates an xref stream while opening the file and object streams when
// their objects are read, wholly in memory: a 16 MiB deflate bomb is 16 GiB.
// A million objects need about 6 MiB of xref stream.
constexpr size_t kXrefStreamsMaxBytes = size_t{8} << 20;
constexpr size_t kXrefCandidateInputMaxBytes = size_t{64} << 20;
constexpr size_t kObjectStreamsMaxBytes = size_t{256} << 20;
// qpdf parses at about 1-3 us per token (measured: 16 MiB of nested arrays
// took 23 s, a 1.4M-key dictionary 8 s) and cannot be interrupted, so the
// tokens that open something ([, <<, names) are counted before it parses.
// 512 Ki: a 1.4M-key dictionary (15 MiB) took 5.5 s on an idle core of the
// project machine, 500k keys 1.4 s; at this cap the worst case is about 1.5 s
// per file, and a real report (matplotlib, LaTeX) counts a few thousand.
constexpr size_t kMaxStructureTokens = size_t{512} << 10;
// qpdf's parser stops at 500 levels; direct objects cannot nest deeper than that.
constexpr int kMaxDepth = 600;
constexpr size_t kMaxActionChain = 1000;
constexpr int kMaxPathSteps = 8;
constexpr size_t kMaxReasonsListed = 8;
constexpr size_t kMaxShadowsListed = kMaxReasonsListed;

Result rejected(std::string reason) { return {false, "PDF: " + std::move(reason), "", 0}; }

// Attacker text (a URI, a qpdf message quoting the file) in a reason: printable ASCII, bounded.
std::string shown(std::string_view s, size_t max = 80) {
  std::string out;
  for (char c : s.substr(0, max)) {
    unsigned char u = static_cast<unsigned char>(c);
    out += (u >= 0x20 && u < 0x7F) ? c : '?';
  }
  if (s.size() > max) out += "...";
  return out;
}

std::string name_of(QPDFObjectHandle h) { return h.isName() ? h.getName() : std::string(); }

std::string id_of(QPDFObjGen og) { return std::to_string(og.getObj()) + " " + std::to_string(og.getGen()); }

// --- Decompression bounds ---------------------------------------------------

// The end of a Pipeline chain: counts bytes and aborts the decoder past limit.
class CountingSink : public Pipeline {
 public:
  explicit CountingSink(size_t limit) : Pipeline("throwbox byte count", nullptr), limit_(limit) {}
  void write(unsigned char const* data, size_t len) override {
    for (size_t i = 0; i < len; ++i) structure_ += data[i] == '[' || data[i] == '<' || data[i] == '/';
    total_ += len;
    if (total_ > limit_) {
      exceeded_ = true;
      throw std::length_error("decoded stream over its byte budget");
    }
  }
  void finish() override {}
  bool exceeded() const { return exceeded_; }
  size_t total() const { return total_; }
  size_t structure() const { return structure_; }

 private:
  size_t limit_;
  size_t total_ = 0;
  size_t structure_ = 0;  // '[', '<' and '/' bytes: about one per token qpdf parses
  bool exceeded_ = false;
};

// Decodes #hh escapes, so "/X#52ef" reads as qpdf reads it: "/XRef".
std::string decode_name_escapes(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '#' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

bool is_pdf_delimiter_or_space(char c) {
  return std::string_view(" \t\r\n\f\v/<>[]()%{}", 17).find(c) != std::string_view::npos || c == '\0';
}

size_t count_name(std::string_view text, std::string_view name) {
  size_t n = 0;
  for (size_t at = text.find(name); at != std::string_view::npos; at = text.find(name, at + 1))
    if (at + name.size() == text.size() || is_pdf_delimiter_or_space(text[at + name.size()])) ++n;
  return n;
}

// qpdf decodes the xref streams while opening the file, before any check can
// look at its objects, so they are bounded on the raw bytes: every stream whose
// dictionary (from the last "obj" before the "stream" keyword) names /XRef may
// use only a single /FlateDecode, and inflates within kXrefStreamsMaxBytes.
std::optional<std::string> xref_stream_bomb(std::string_view bytes) {
  CountingSink inflated(kXrefStreamsMaxBytes);
  size_t fed = 0, span_start = 0, endstream_at = 0;
  for (size_t i = 0; i + 6 <= bytes.size(); ++i) {
    if (bytes.compare(i, 3, "obj") == 0) {
      span_start = i;
      continue;
    }
    if (bytes.compare(i, 6, "stream") != 0 || (i >= 3 && bytes.compare(i - 3, 3, "end") == 0)) continue;
    size_t data = i + 6;
    if (data < bytes.size() && bytes[data] == '\r') ++data;
    if (data < bytes.size() && bytes[data] == '\n') ++data;
    std::string dict = decode_name_escapes(bytes.substr(span_start, i - span_start));
    span_start = i;  // spans never overlap: the scan stays linear
    if (count_name(dict, "/XRef") == 0) continue;
    const size_t flate = count_name(dict, "/FlateDecode") + count_name(dict, "/Fl");
    const size_t other = count_name(dict, "/LZWDecode") + count_name(dict, "/LZW") +
                         count_name(dict, "/RunLengthDecode") + count_name(dict, "/RL");
    size_t filter = dict.find("/Filter");
    bool indirect_filter = false;
    if (filter != std::string::npos) {
      size_t v = dict.find_first_not_of(" \t\r\n\f", filter + 7);
      indirect_filter = v != std::string::npos && dict[v] >= '0' && dict[v] <= '9';
    }
    if (flate > 1 || other > 0 || indirect_filter)
      return "a cross-reference stream with chained, legacy or indirect compression filters "
             "(a decompression bomb qpdf would expand before any check)";
    if (flate == 0) continue;
    if (endstream_at <= data) endstream_at = std::min(bytes.find("endstream", data), bytes.size());
    const size_t len = endstream_at - data;
    fed += len;
    if (fed > kXrefCandidateInputMaxBytes) return "too many cross-reference stream candidates to bound";
    try {
      Pl_Flate inflate("xref stream bound", &inflated, Pl_Flate::a_inflate);
      inflate.write(reinterpret_cast<unsigned char const*>(bytes.data() + data), len);
      inflate.finish();
    } catch (const std::exception&) {
      // Corrupt deflate data: qpdf fails on it too. Only the budget matters here.
    }
    if (inflated.exceeded())
      return "cross-reference streams inflate beyond " + std::to_string(kXrefStreamsMaxBytes >> 20) +
             " MiB (a decompression bomb)";
  }
  return std::nullopt;
}

// Object streams are decoded lazily, so here qpdf's own dictionary and filters
// are used, with a byte budget shared by all of them.
std::optional<std::string> object_stream_bomb(QPDF& q, const std::map<QPDFObjGen, QPDFXRefEntry>& xref,
                                              size_t& structure) {
  std::set<int> streams;
  for (const auto& [og, entry] : xref)
    if (entry.getType() == 2) streams.insert(entry.getObjStreamNumber());
  CountingSink decoded(kObjectStreamsMaxBytes);
  for (int n : streams) {
    QPDFObjectHandle s = q.getObjectByID(n, 0);
    if (!s.isStream()) continue;  // qpdf refuses to read objects from it
    try {
      s.pipeStreamData(&decoded, 0, qpdf_dl_specialized, true, false);
    } catch (const std::exception&) {
      // qpdf reports an undecodable object stream when its objects are read.
    }
    if (decoded.exceeded())
      return "object streams decode beyond " + std::to_string(kObjectStreamsMaxBytes >> 20) +
             " MiB (a decompression bomb)";
  }
  structure = decoded.structure();
  return std::nullopt;
}

// Tokens qpdf will parse outside stream data (object streams are counted as they decode).
size_t structure_outside_streams(std::string_view bytes) {
  size_t n = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    char c = bytes[i];
    if (c == 's' && bytes.compare(i, 6, "stream") == 0 && (i < 3 || bytes.compare(i - 3, 3, "end") != 0)) {
      size_t end = bytes.find("endstream", i + 6);
      if (end == std::string_view::npos) break;
      i = end + 8;
      continue;
    }
    n += c == '[' || c == '<' || c == '/';
  }
  return n;
}

// --- Objects qpdf does not see ----------------------------------------------

// "N G obj" headers whose object is not the one the cross-reference table
// lists at that offset: earlier revisions, deleted or junk objects. A reader
// that rebuilds the table (pdf.js, MuPDF and Acrobat do on the slightest
// damage) may take them instead of what was checked. Stream data is skipped
// to its "endstream", as those rebuilders do.
std::vector<std::string> shadow_objects(std::string_view bytes, const std::map<QPDFObjGen, QPDFXRefEntry>& xref) {
  std::map<QPDFObjGen, qpdf_offset_t> offsets;
  for (const auto& [og, entry] : xref)
    if (entry.getType() == 1) offsets[og] = entry.getOffset();
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\0'; };
  auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  std::vector<std::string> found;
  for (size_t i = 0; i + 3 <= bytes.size(); ++i) {
    if (bytes.compare(i, 6, "stream") == 0 && (i < 3 || bytes.compare(i - 3, 3, "end") != 0)) {
      size_t end = bytes.find("endstream", i + 6);
      if (end == std::string_view::npos) break;
      i = end + 8;
      continue;
    }
    if (bytes.compare(i, 3, "obj") != 0) continue;
    if (i + 3 < bytes.size() && !is_pdf_delimiter_or_space(bytes[i + 3])) continue;
    size_t j = i;
    auto skip_space = [&] {
      size_t before = j;
      while (j > 0 && is_space(bytes[j - 1])) --j;
      return j < before;
    };
    auto read_number = [&](long long& value) {
      size_t end = j;
      while (j > 0 && is_digit(bytes[j - 1]) && end - j < 10) --j;
      if (j == end || (j > 0 && is_digit(bytes[j - 1]))) return false;
      value = std::stoll(std::string(bytes.substr(j, end - j)));
      return true;
    };
    long long num = 0, gen = 0;
    if (!skip_space() || !read_number(gen) || !skip_space() || !read_number(num)) continue;
    if (num > INT32_MAX || gen > INT32_MAX) continue;
    auto it = offsets.find(QPDFObjGen(static_cast<int>(num), static_cast<int>(gen)));
    bool listed = false;
    if (it != offsets.end() && it->second >= 0 && static_cast<size_t>(it->second) <= j) {
      listed = true;
      for (size_t k = static_cast<size_t>(it->second); k < j; ++k) listed = listed && is_space(bytes[k]);
    }
    if (!listed && found.size() >= kMaxShadowsListed) break;  // one is enough to reject; the rewrite drops all
    if (!listed)
      found.push_back("object " + std::to_string(num) + " " + std::to_string(gen) + " at byte " + std::to_string(j) +
                      " is not the one the cross-reference table lists (an earlier revision or hidden object a "
                      "reader rebuilding the table would see)");
  }
  return found;
}

// --- The object walk ----------------------------------------------------------

struct Fix {
  enum class Kind {
    kNone,        // cannot be stripped: kStrip fails closed
    kRewrite,     // gone once qpdf rewrites the document from its own view
    kNullObject,  // the indirect object becomes null (every reference with it)
    kRemoveKey,   // container loses key
    kNullItem,    // container's item index becomes null (indices of others unchanged)
  };
  Kind kind = Kind::kNone;
  QPDFObjectHandle container;
  QPDFObjGen og;
  std::string key;
  int index = 0;
};

struct Finding {
  std::string what;
  Fix fix;
};

// Where a value sits: the indirect object owning it and the path inside it.
struct Place {
  QPDFObjGen owner;  // (0, 0): the trailer
  std::string path;  // "/Names /JavaScript", "/Annots [2]"; empty for the object itself
  QPDFObjectHandle parent;
  std::string key;  // in parent, or
  int index = -1;   // in parent (an array)
};

// Actions that run code, send data, or open something other than this
// document, wherever a dictionary says /S with one of these names.
std::optional<std::string> dangerous_action(const std::string& s) {
  static const std::map<std::string, std::string> kDangerous{
      {"/JavaScript", "JavaScript action (/S /JavaScript)"},
      {"/Launch", "Launch action (/S /Launch: runs a program or opens a file)"},
      {"/SubmitForm", "SubmitForm action (/S /SubmitForm: sends form data to a server)"},
      {"/ImportData", "ImportData action (/S /ImportData: reads another file)"},
      {"/GoToR", "GoToR action (/S /GoToR: opens another file)"},
      {"/GoToE", "GoToE action (/S /GoToE: opens an embedded file)"},
      {"/Rendition", "Rendition action (/S /Rendition: plays media)"},
      {"/Movie", "Movie action (/S /Movie)"},
      {"/Sound", "Sound action (/S /Sound)"},
      {"/RichMediaExecute", "RichMediaExecute action (/S /RichMediaExecute)"},
  };
  auto it = kDangerous.find(s);
  if (it == kDangerous.end()) return std::nullopt;
  return it->second;
}

// A link target a reader hands to the browser or mail client. file:, smb: and
// UNC paths would open local files or send Windows credentials to a host;
// javascript: runs in browser-based readers. Relative URIs resolve against the
// document's own location, a local file, so they count as file: too.
bool is_web_uri(QPDFObjectHandle uri) {
  if (!uri.isString()) return false;
  std::string s = uri.getStringValue();
  size_t start = 0;
  while (start < s.size() && static_cast<unsigned char>(s[start]) <= 0x20) ++start;
  std::string lower;
  for (size_t i = start; i < s.size() && lower.size() < 8; ++i)
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(s[i])));
  for (const char* scheme : {"http://", "https://", "mailto:"})
    if (lower.rfind(scheme, 0) == 0) return true;
  return false;
}

class Scanner {
 public:
  explicit Scanner(QPDF& q) : q_(q), root_(q.getTrailer().getKey("/Root").getObjGen()) {}

  std::vector<Finding> run() {
    std::vector<QPDFObjectHandle> all = q_.getAllObjects();
    QPDFObjectHandle trailer = q_.getTrailer();
    for (bool refs_pass : {true, false}) {
      refs_pass_ = refs_pass;
      walk(trailer, Place{}, 0);
      for (QPDFObjectHandle& h : all) walk(h, Place{h.getObjGen(), "", {}, "", -1}, 0);
    }
    return std::move(findings_);
  }

 private:
  void walk(QPDFObjectHandle h, const Place& place, int depth) {
    if (depth > kMaxDepth) {
      if (!refs_pass_) add("objects nested deeper than " + std::to_string(kMaxDepth) + " levels", place, Fix{});
      return;
    }
    QPDFObjectHandle dict = h.isStream() ? h.getDict() : h;
    if (dict.isDictionary()) {
      if (!refs_pass_) check_dict(dict, place);
      for (const std::string& key : dict.getKeys()) visit_child(dict, key, -1, dict.getKey(key), place, depth);
    } else if (dict.isArray()) {
      int n = dict.getArrayNItems();
      for (int i = 0; i < n; ++i) visit_child(dict, "", i, dict.getArrayItem(i), place, depth);
    }
  }

  void visit_child(QPDFObjectHandle parent, const std::string& key, int index, QPDFObjectHandle child,
                   const Place& place, int depth) {
    // Paths are for reasons: past a few steps "..." stands for the rest, so
    // 500 nested arrays do not cost 500 ever-longer strings per object.
    std::string path;
    if (depth >= kMaxPathSteps) {
      path = place.path.size() >= 4 && place.path.compare(place.path.size() - 4, 4, " ...") == 0 ? place.path
                                                                                                 : place.path + " ...";
    } else {
      std::string step = index < 0 ? key : "[" + std::to_string(index) + "]";
      path = place.path.empty() ? step : place.path + " " + step;
    }
    if (child.isIndirect()) {
      // Visited on its own (getAllObjects holds it); remember who refers to it, for reasons.
      if (refs_pass_ && !referrer_.count(child.getObjGen()))
        referrer_[child.getObjGen()] = label(place.owner) + "'s " + path;
      return;
    }
    if (child.isDictionary() || child.isArray()) walk(child, Place{place.owner, path, parent, key, index}, depth + 1);
  }

  // The role of an indirect object, for reasons: "the catalog", "page 3 0", ...
  std::string label(QPDFObjGen og) {
    if (og == QPDFObjGen()) return "the trailer";
    if (og == root_) return "the catalog";
    QPDFObjectHandle h = q_.getObject(og);
    QPDFObjectHandle d = h.isStream() ? h.getDict() : h;
    if (d.isDictionary()) {
      std::string type = name_of(d.getKey("/Type"));
      if (type == "/Page") return "page " + id_of(og);
      if (type == "/Annot" || d.hasKey("/Rect")) return "annotation " + id_of(og);
    }
    return "object " + id_of(og);
  }

  std::string where(const Place& p) {
    std::string s;
    if (p.owner == QPDFObjGen()) {
      s = "the trailer";
    } else {
      s = "object " + id_of(p.owner);
      auto it = referrer_.find(p.owner);
      if (p.owner == root_)
        s += " (the catalog)";
      else if (it != referrer_.end())
        s += " (" + it->second + ")";
      else
        s += " (referenced by no object)";
    }
    if (!p.path.empty()) s += " at " + p.path;
    return s;
  }

  // Only the first findings are described: a million of them (one per object)
  // must not cost a million reason strings.
  void add(std::string what, const Place& place, Fix fix) {
    std::string text = findings_.size() < kMaxReasonsListed ? what + " in " + where(place) : std::string();
    findings_.push_back({std::move(text), std::move(fix)});
  }

  // Removes the value at place itself: the whole object, or its slot in the parent.
  static Fix remove_here(const Place& p) {
    Fix f;
    if (p.path.empty()) {
      f.kind = Fix::Kind::kNullObject;
      f.og = p.owner;
    } else if (p.index >= 0) {
      f.kind = Fix::Kind::kNullItem;
      f.container = p.parent;
      f.index = p.index;
    } else {
      f.kind = Fix::Kind::kRemoveKey;
      f.container = p.parent;
      f.key = p.key;
    }
    return f;
  }

  static Fix remove_key(QPDFObjectHandle container, std::string key) {
    Fix f;
    f.kind = Fix::Kind::kRemoveKey;
    f.container = std::move(container);
    f.key = std::move(key);
    return f;
  }

  static Place at_key(const Place& p, QPDFObjectHandle dict, const std::string& key) {
    return Place{p.owner, p.path.empty() ? key : p.path + " " + key, std::move(dict), key, -1};
  }

  void check_dict(QPDFObjectHandle d, const Place& place) {
    const std::string s = name_of(d.getKey("/S"));
    // Found on the action itself, wherever it sits (an /A, /OpenAction, /AA
    // entry, /Next, or no reference at all): a reader may reach it by a path
    // this walk does not model.
    if (auto kind = dangerous_action(s)) {
      add(*kind, place, remove_here(place));
    } else if (s == "/URI" && !is_web_uri(d.getKey("/URI"))) {
      QPDFObjectHandle uri = d.getKey("/URI");
      add("URI action to a non-web address (" + (uri.isString() ? shown(uri.getStringValue()) : "not a string") + ")",
          place, remove_here(place));
    }
    // A /JS key is only meaningful in a JavaScript action, but Acrobat has run
    // actions that lacked a proper /S: any /JS is script.
    if (d.hasKey("/JS") && s != "/JavaScript") add("JavaScript (/JS)", at_key(place, d, "/JS"), remove_key(d, "/JS"));

    static const std::pair<const char*, const char*> kKeys[] = {
        {"/JavaScript", "document JavaScript (the /Names tree's /JavaScript)"},
        {"/EmbeddedFiles", "embedded files (/EmbeddedFiles name tree)"},
        {"/EF", "an embedded file (/EF)"},
        {"/RF", "related files (/RF)"},
        {"/XFA", "an XFA form (/XFA), scripted by readers that render it"},
    };
    for (const auto& [key, what] : kKeys)
      if (d.hasKey(key)) add(what, at_key(place, d, key), remove_key(d, key));

    static const std::set<std::string> kMediaAnnotations{"/FileAttachment", "/RichMedia", "/Movie",
                                                         "/Sound",          "/Screen",    "/3D"};
    const std::string subtype = name_of(d.getKey("/Subtype"));
    if (kMediaAnnotations.count(subtype))
      add("a " + subtype + " annotation", place, remove_here(place));
    else if (subtype == "/U3D" || subtype == "/PRC")
      add("3D artwork (/Subtype " + subtype + ")", place, remove_here(place));
    if (name_of(d.getKey("/Type")) == "/EmbeddedFile")
      add("an embedded file stream (/Type /EmbeddedFile)", place, remove_here(place));

    // Automatic actions: only navigation inside this document may run unasked.
    if (d.hasKey("/OpenAction"))
      if (auto why = not_navigation(d.getKey("/OpenAction")))
        add("/OpenAction that is " + *why + ", not navigation", at_key(place, d, "/OpenAction"),
            remove_key(d, "/OpenAction"));
    if (d.hasKey("/AA")) {
      QPDFObjectHandle aa = d.getKey("/AA");
      if (!aa.isDictionary() && !aa.isNull()) {
        add("additional actions (/AA) that are not a dictionary", at_key(place, d, "/AA"), remove_key(d, "/AA"));
      } else if (aa.isDictionary()) {
        for (const std::string& trigger : aa.getKeys())
          if (auto why = not_navigation(aa.getKey(trigger)))
            add("additional action /AA " + trigger + " that is " + *why + ", not navigation",
                at_key(place, d, "/AA " + trigger), remove_key(aa, trigger));
      }
    }
    // Actions run on a click (links, outline items, form fields, chains).
    for (const char* key : {"/A", "/PA", "/Next"}) {
      if (!d.hasKey(key)) continue;
      QPDFObjectHandle v = d.getKey(key);
      if (v.isArray() && std::string(key) == "/Next") {
        for (int i = 0; i < v.getArrayNItems(); ++i)
          if (auto why = not_link_action(v.getArrayItem(i)))
            add("/Next action that is " + *why, at_key(place, d, key), remove_key(d, key));
      } else if (auto why = not_link_action(v)) {
        add(std::string(key) + " action that is " + *why, at_key(place, d, key), remove_key(d, key));
      }
    }
  }

  // Why a clicked action is not one a reader may run: nullopt when it is a
  // plain link or view change, or a dangerous action (reported on itself).
  static std::optional<std::string> not_link_action(QPDFObjectHandle a) {
    if (a.isNull()) return std::nullopt;
    if (!a.isDictionary()) return std::string("not a dictionary (") + a.getTypeName() + ")";
    const std::string s = name_of(a.getKey("/S"));
    if (dangerous_action(s)) return std::nullopt;
    // /URI is a plain link: the reader hands http(s)/mailto to the browser
    // after a click (is_web_uri judges the target where the action is found);
    // nothing runs inside the reader.
    static const std::set<std::string> kAllowed{"/GoTo", "/GoToDp",    "/URI",  "/SetOCGState",
                                                "/Hide", "/ResetForm", "/Trans"};
    if (kAllowed.count(s)) return std::nullopt;
    if (s == "/Named") {
      // ISO 32000-1 12.6.4.11: the four standard names; Acrobat also runs any
      // menu item by name (Print, SaveAs, ...).
      std::string n = name_of(a.getKey("/N"));
      if (n == "/NextPage" || n == "/PrevPage" || n == "/FirstPage" || n == "/LastPage") return std::nullopt;
      return "a /Named action (" + shown(n.empty() ? "no /N" : n) + ") other than page navigation";
    }
    if (s.empty()) return std::string("an action without /S");
    return "an action of type " + shown(s) + " not known to be safe";
  }

  // Why an automatic action is not plain navigation: nullopt for a destination
  // (array, name or string), /GoTo or /GoToDp, and chains (/Next) of those.
  // Dangerous actions in the chain are reported on themselves.
  static std::optional<std::string> not_navigation(QPDFObjectHandle v) {
    if (v.isNull() || v.isArray() || v.isName() || v.isString()) return std::nullopt;
    std::set<QPDFObjGen> seen;
    std::vector<QPDFObjectHandle> todo{v};
    for (size_t steps = 0; !todo.empty(); ++steps) {
      if (steps > kMaxActionChain) return "a chain of more than " + std::to_string(kMaxActionChain) + " actions";
      QPDFObjectHandle a = todo.back();
      todo.pop_back();
      if (a.isIndirect() && !seen.insert(a.getObjGen()).second) continue;
      if (a.isNull()) continue;
      if (!a.isDictionary()) return std::string("a chained ") + a.getTypeName() + ", not an action";
      const std::string s = name_of(a.getKey("/S"));
      if (!dangerous_action(s) && s != "/GoTo" && s != "/GoToDp")
        return s.empty() ? std::string("an action without /S") : "a " + shown(s) + " action";
      QPDFObjectHandle next = a.getKey("/Next");
      if (next.isArray())
        for (int i = 0; i < next.getArrayNItems(); ++i) todo.push_back(next.getArrayItem(i));
      else
        todo.push_back(next);
    }
    return std::nullopt;
  }

  QPDF& q_;
  QPDFObjGen root_;
  bool refs_pass_ = true;
  std::map<QPDFObjGen, std::string> referrer_;
  std::vector<Finding> findings_;
};

std::string list_findings(const std::vector<Finding>& findings) {
  std::string s;
  for (size_t i = 0; i < findings.size() && i < kMaxReasonsListed; ++i) s += (i ? "; " : "") + findings[i].what;
  if (findings.size() > kMaxReasonsListed)
    s += "; and " + std::to_string(findings.size() - kMaxReasonsListed) + " more";
  return s;
}

void apply_fixes(QPDF& q, std::vector<Finding>& findings) {
  // Keys and items first: a later kNullObject may turn their container into null.
  for (Finding& f : findings) {
    if (f.fix.kind == Fix::Kind::kRemoveKey && f.fix.container.isDictionary()) f.fix.container.removeKey(f.fix.key);
    if (f.fix.kind == Fix::Kind::kNullItem && f.fix.container.isArray())
      f.fix.container.setArrayItem(f.fix.index, QPDFObjectHandle::newNull());
  }
  for (Finding& f : findings)
    if (f.fix.kind == Fix::Kind::kNullObject) q.replaceObject(f.fix.og, QPDFObjectHandle::newNull());
}

std::string write_document(QPDF& q) {
  QPDFWriter w(q);
  w.setOutputMemory();
  w.setStaticID(true);             // deterministic output: the same input always gives the same bytes
  w.setPreserveEncryption(false);  // an empty-password encryption protects nothing; readers see plain objects
  w.setObjectStreamMode(qpdf_o_disable);
  w.setDecodeLevel(qpdf_dl_none);  // stream data copied raw: no content stream is ever inflated
  w.setCompressStreams(false);
  w.write();
  std::shared_ptr<Buffer> buffer = w.getBufferSharedPointer();
  return std::string(reinterpret_cast<const char*>(buffer->getBuffer()), buffer->getSize());
}

std::optional<std::string> first_warning(QPDF& q) {
  if (!q.anyWarnings()) return std::nullopt;
  std::vector<QPDFExc> warnings = q.getWarnings();
  const QPDFExc& w = warnings.front();
  return "qpdf had to repair it (" + shown(w.getMessageDetail()) + " at byte " + std::to_string(w.getFilePosition()) +
         "); readers repair differently and would see other objects";
}

Result check_parsed(std::string_view bytes, Mode mode) {
  if (bytes.size() > kMaxInputBytes) return rejected("larger than " + std::to_string(kMaxInputBytes >> 20) + " MiB");
  if (auto bomb = xref_stream_bomb(bytes)) return rejected(*bomb);

  QPDF q;
  q.setSuppressWarnings(true);
  // No recovery: a file qpdf can only read by rebuilding its cross-reference
  // table is one readers rebuild differently (pdf.js, MuPDF, Acrobat each scan
  // their own way), so what was checked is not what they show.
  q.setAttemptRecovery(false);
  try {
    q.processMemoryFile("artifact", bytes.data(), bytes.size());
  } catch (const QPDFExc& e) {
    if (e.getErrorCode() == qpdf_e_password)
      return rejected("encrypted with a user password; its objects cannot be read, so they cannot be checked");
    throw;
  }
  if (auto w = first_warning(q)) return rejected(*w);

  std::map<QPDFObjGen, QPDFXRefEntry> xref = q.getXRefTable();
  if (xref.size() > kMaxObjects)
    return rejected(std::to_string(xref.size()) + " objects, more than " + std::to_string(kMaxObjects));
  size_t structure = 0;
  if (auto bomb = object_stream_bomb(q, xref, structure)) return rejected(*bomb);
  structure += structure_outside_streams(bytes);
  if (structure > kMaxStructureTokens)
    return rejected("about " + std::to_string(structure) + " tokens to parse, more than " +
                    std::to_string(kMaxStructureTokens) + " (bounds qpdf's CPU time)");

  std::vector<Finding> findings;
  for (std::string& s : shadow_objects(bytes, xref))
    findings.push_back({std::move(s), Fix{Fix::Kind::kRewrite, {}, {}, {}, 0}});
  std::vector<Finding> walked = Scanner(q).run();
  findings.insert(findings.end(), std::make_move_iterator(walked.begin()), std::make_move_iterator(walked.end()));
  if (auto w = first_warning(q)) return rejected(*w);

  if (findings.empty()) return {true, "", std::string(bytes), 0};
  if (mode == Mode::kReject) return rejected(list_findings(findings));
  for (const Finding& f : findings)
    if (f.fix.kind == Fix::Kind::kNone) return rejected("cannot be stripped: " + list_findings(findings));

  apply_fixes(q, findings);
  std::string output = write_document(q);
  // The rewrite must pass on its own: anything this module left or qpdf
  // reintroduced fails closed.
  Result again = check(output, Mode::kReject);
  if (!again.ok) return rejected("stripping left something behind: " + again.reason);
  return {true, "PDF: removed " + list_findings(findings), std::move(output), findings.size()};
}

}  // namespace

Result check(std::string_view bytes, Mode mode) {
  try {
    return check_parsed(bytes, mode);
  } catch (const QPDFExc& e) {
    return rejected("qpdf cannot read it without repairing it (" + shown(e.getMessageDetail()) + " at byte " +
                    std::to_string(e.getFilePosition()) + ")");
  } catch (const std::exception& e) {
    return rejected(std::string("qpdf failed on it (") + shown(e.what()) + ")");
  }
}

}  // namespace artifacts::pdf
