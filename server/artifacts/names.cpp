// Artifact name rules; see names.h for what each stops.
#include "server/artifacts/names.h"

#include <array>
#include <cstdint>
#include <cstdio>

namespace artifacts::names {
namespace {

// The next code point of valid UTF-8 at text[i] (advancing i), or nullopt.
std::optional<uint32_t> next_code_point(std::string_view text, size_t& i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = b(i);
  size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
  if (len == 0 || i + len > text.size()) return std::nullopt;
  uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1Fu) : len == 3 ? (c & 0x0Fu) : (c & 0x07u);
  for (size_t k = 1; k < len; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return std::nullopt;
    cp = (cp << 6) | (b(i + k) & 0x3Fu);
  }
  static constexpr std::array<uint32_t, 5> kMin = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return std::nullopt;
  i += len;
  return cp;
}

std::string u_plus(uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", cp);
  return buf;
}

// Bidirectional formatting characters: embeddings and overrides (U+202A-E),
// isolates (U+2066-9) and the marks (U+200E/F, U+061C). Any of them lets a
// name show its characters in another order than they are.
bool is_bidi_control(uint32_t cp) {
  return (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200E || cp == 0x200F ||
         cp == 0x061C;
}

char ascii_upper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c; }

// Windows device names, which Windows opens as the device whatever follows a
// dot ("NUL.txt" is NUL): CON PRN AUX NUL COM0-9 LPT0-9 (and superscript
// 1-3), CONIN$ CONOUT$. Spaces before the dot are ignored by Windows too.
bool is_windows_device(std::string_view component) {
  std::string_view stem = component.substr(0, component.find('.'));
  while (!stem.empty() && stem.back() == ' ') stem.remove_suffix(1);
  std::string up;
  for (char c : stem) up += ascii_upper(c);
  for (const char* d : {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"})
    if (up == d) return true;
  if (up.size() >= 4 && (up.compare(0, 3, "COM") == 0 || up.compare(0, 3, "LPT") == 0)) {
    std::string_view tail = std::string_view(up).substr(3);
    if (tail.size() == 1 && tail[0] >= '0' && tail[0] <= '9') return true;
    // ¹ ² ³ (U+00B9, U+00B2, U+00B3), which Windows also treats as digits here.
    if (tail == "\xC2\xB9" || tail == "\xC2\xB2" || tail == "\xC2\xB3") return true;
  }
  return false;
}

std::optional<std::string> component_problem(std::string_view c) {
  const std::string quoted = "\"" + std::string(c) + "\"";
  if (c.empty()) return "an empty path component";
  if (c == "." || c == "..") return quoted + " is not a file name";
  for (size_t i = 0; i < c.size();) {
    const size_t at = i;
    auto cp = next_code_point(c, i);
    if (!cp) return "not valid UTF-8 (byte " + std::to_string(at) + ")";
    if (*cp < 0x20 || *cp == 0x7F || (*cp >= 0x80 && *cp <= 0x9F))
      return "a control character (" + u_plus(*cp) + ") in the name";
    if (is_bidi_control(*cp))
      return "a bidirectional control character (" + u_plus(*cp) +
             ") makes the name display as another (its extension may not be what it shows)";
    if (*cp < 0x80) {
      const char ch = static_cast<char>(*cp);
      for (char bad : {'<', '>', ':', '"', '|', '?', '*', '\\'})
        if (ch == bad) return std::string("the character '") + ch + "', which Windows does not allow in file names";
    }
  }
  if (c.back() == '.' || c.back() == ' ')
    return std::string("the name ends with a ") + (c.back() == '.' ? "dot" : "space") +
           ", which Windows drops when saving it (the extension it is saved with is not the one checked)";
  if (is_windows_device(c)) return quoted + " is a Windows device name (CON, NUL, COM1, ...): Windows opens the device";
  return std::nullopt;
}

}  // namespace

std::optional<std::string> problem(std::string_view path) {
  size_t start = 0;
  for (;;) {
    const size_t slash = path.find('/', start);
    std::string_view c = path.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (auto p = component_problem(c)) return p;
    if (slash == std::string_view::npos) return std::nullopt;
    start = slash + 1;
  }
}

std::string extension(std::string_view path) {
  const size_t slash = path.rfind('/');
  std::string_view leaf = slash == std::string_view::npos ? path : path.substr(slash + 1);
  const size_t dot = leaf.rfind('.');
  if (dot == std::string_view::npos || dot == 0) return "";
  std::string ext(leaf.substr(dot));
  for (char& ch : ext)
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
  return ext;
}

std::vector<std::string> default_extensions(std::string_view media_type) {
  static const std::map<std::string, std::vector<std::string>, std::less<>> kTable = {
      {"text/plain", {".txt"}},
      {"text/csv", {".csv"}},
      {"text/tab-separated-values", {".tsv"}},
      {"application/json", {".json"}},
      {"text/markdown", {".md"}},
      {"image/png", {".png"}},
      {"image/jpeg", {".jpg", ".jpeg"}},
      {"image/gif", {".gif"}},
      {"application/pdf", {".pdf"}},
      {"text/html", {".html", ".htm"}},
      {"application/xhtml+xml", {".xhtml"}},
      {"image/svg+xml", {".svg"}},
  };
  auto it = kTable.find(media_type);
  return it == kTable.end() ? std::vector<std::string>{} : it->second;
}

bool is_executable_extension(std::string_view extension) {
  // Programs and scripts a double-click runs (Windows Script Host, PowerShell,
  // installers, shortcuts, desktop entries, shell scripts), documents with
  // macros, and Excel's web-query and SYLK formats (formulas by design).
  // Sized by its initialisers: a fixed size would fill missing entries with "",
  // which would make "no extension" an executable one.
  static constexpr std::string_view kRun[] = {".exe",
                                              ".com",
                                              ".bat",
                                              ".cmd",
                                              ".ps1",
                                              ".psm1",
                                              ".psd1",
                                              ".ps1xml",
                                              ".pssc",
                                              ".vbs",
                                              ".vbe",
                                              ".js",
                                              ".jse",
                                              ".wsf",
                                              ".wsh",
                                              ".wsc",
                                              ".hta",
                                              ".msi",
                                              ".msp",
                                              ".mst",
                                              ".scr",
                                              ".pif",
                                              ".cpl",
                                              ".lnk",
                                              ".url",
                                              ".reg",
                                              ".inf",
                                              ".jar",
                                              ".desktop",
                                              ".sh",
                                              ".bash",
                                              ".zsh",
                                              ".csh",
                                              ".ksh",
                                              ".command",
                                              ".tool",
                                              ".app",
                                              ".applescript",
                                              ".scpt",
                                              ".workflow",
                                              ".py",
                                              ".pyw",
                                              ".pyc",
                                              ".pl",
                                              ".rb",
                                              ".appimage",
                                              ".deb",
                                              ".rpm",
                                              ".dmg",
                                              ".pkg",
                                              ".iso",
                                              ".vhd",
                                              ".vhdx",
                                              ".library-ms",
                                              ".searchconnector-ms",
                                              ".settingcontent-ms",
                                              ".xll",
                                              ".xlam",
                                              ".xlsm",
                                              ".docm",
                                              ".pptm",
                                              ".chm",
                                              ".gadget",
                                              ".msc",
                                              ".diagcab",
                                              ".appref-ms",
                                              ".application",
                                              ".website",
                                              ".iqy",
                                              ".slk"};
  for (auto e : kRun)
    if (e == extension) return true;
  return false;
}

}  // namespace artifacts::names
