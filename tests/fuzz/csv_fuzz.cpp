// artifacts::csv::process, read back by an independent RFC 4180 reader written
// here: a neutralised file has no formula cell for a reader splitting on ',',
// ';', TAB, '|' or its "sep=" delimiter, nor in the pieces of such a cell after
// any of them; a rejecting pass that accepts has none either; only apostrophes
// are ever inserted; neutralising twice changes nothing; the self-check inside
// process never fires.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/artifacts/csv.h"
#include "tests/fuzz/check.h"

namespace csv = artifacts::csv;

namespace {

// RFC 4180 records; LF, CRLF and a lone CR end one outside quotes (as
// spreadsheet importers do); text after a closing quote is kept, as Python's
// csv does. A leading UTF-8 BOM is not part of the first cell.
std::vector<std::string> read_cells(std::string_view s, char delimiter) {
  std::vector<std::string> cells;
  if (s.starts_with("\xEF\xBB\xBF")) s.remove_prefix(3);
  size_t i = 0;
  bool at_field_start = true;
  std::string cell;
  bool in_quotes = false, any = false;
  while (i < s.size()) {
    char c = s[i];
    any = true;
    if (in_quotes) {
      if (c == '"' && i + 1 < s.size() && s[i + 1] == '"') {
        cell += '"';
        i += 2;
      } else if (c == '"') {
        in_quotes = false;
        ++i;
      } else {
        cell += c;
        ++i;
      }
      continue;
    }
    if (c == '"' && at_field_start) {
      in_quotes = true;
      at_field_start = false;
      ++i;
    } else if (c == delimiter || c == '\n' || c == '\r') {
      cells.push_back(std::move(cell));
      cell.clear();
      at_field_start = true;
      i += (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ? 2 : 1;
    } else {
      cell += c;
      at_field_start = false;
      ++i;
    }
  }
  if (any) cells.push_back(std::move(cell));
  return cells;
}

bool digits(std::string_view s, size_t& i) {
  size_t start = i;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  return i > start;
}

// What importers may trim before the trigger: ASCII spaces, LF, VT, FF, quotes
// and the Unicode spaces (NBSP, U+2000..U+200D, U+3000, a BOM...).
size_t strip_length(std::string_view v) {
  if (v.empty()) return 0;
  if (v[0] == ' ' || v[0] == '\n' || v[0] == '\v' || v[0] == '\f' || v[0] == '"') return 1;
  static const std::string_view kSpaces[] = {"\u00A0", "\xC2\x85", "\u1680", "\u180E", "\u2000", "\u2001", "\u2002",
                                             "\u2003", "\u2004",   "\u2005", "\u2006", "\u2007", "\u2008", "\u2009",
                                             "\u200A", "\u200B",   "\u200C", "\u200D", "\u2028", "\u2029", "\u202F",
                                             "\u205F", "\u2060",   "\u3000", "\uFEFF"};
  for (std::string_view sp : kSpaces)
    if (v.starts_with(sp)) return sp.size();
  return 0;
}

std::string_view strip(std::string_view v) {
  while (size_t k = strip_length(v)) v.remove_prefix(k);
  return v;
}

// One number in some locale: [+-] digits with single '.' or ',' between
// groups, [e [+-] digits], then only stripped characters.
// After the first, an element may start with apostrophes, and any may end
// with them: process puts one before a sign ("-1,'-2") or before a TAB that
// ends an element ("-1'<TAB>").
std::string_view strip_end(std::string_view v) {
  for (;;) {
    if (v.starts_with('\''))
      v.remove_prefix(1);
    else if (size_t k = strip_length(v))
      v.remove_prefix(k);
    else
      return v;
  }
}

bool is_number(std::string_view s, bool allow_empty) {
  s = strip(s);
  if (allow_empty) {
    while (s.starts_with('\'')) s.remove_prefix(1);
    if (strip_end(s).empty()) return true;
  }
  if (s.empty()) return false;
  size_t i = 0;
  if (s[i] == '+' || s[i] == '-') ++i;
  bool any = false, sep = false;
  while (i < s.size()) {
    if (s[i] >= '0' && s[i] <= '9') {
      any = true;
      sep = false;
    } else if ((s[i] == '.' || s[i] == ',') && !sep) {
      sep = true;
    } else {
      break;
    }
    ++i;
  }
  if (!any) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (!digits(s, i)) return false;
  }
  return strip_end(s.substr(i)).empty();
}

// Numbers joined by the readers' delimiters ("-1,-2" to a ';' reader).
bool is_number_list(std::string_view s, std::string_view delimiters) {
  bool first = true;
  for (;;) {
    size_t j = s.find_first_of(delimiters);
    if (!is_number(s.substr(0, j), !first)) return false;
    if (j == std::string_view::npos) return true;
    s.remove_prefix(j + 1);
    first = false;
  }
}

// A cell a spreadsheet may evaluate: after what importers strip, it starts
// with = + - @ TAB CR or a Unicode form of = + - @, and is no number list.
bool is_formula(std::string_view v, std::string_view delimiters) {
  v = strip(v);
  if (v.empty()) return false;
  for (std::string_view u : {"\uFF1D", "\uFF0B", "\uFF0D", "\uFF20", "\uFE66", "\uFE62", "\uFE63", "\uFE6B", "\u207A",
                             "\u207B", "\u207C", "\u208A", "\u208B", "\u208C", "\u2212"})
    if (v.starts_with(u)) return true;
  switch (v[0]) {
    case '=':
    case '@':
    case '\t':
    case '\r':
      return true;
    case '+':
    case '-':
      return !is_number_list(v, delimiters);
    default:
      return false;
  }
}

// The cell, and the pieces a reader whose quotes fall elsewhere sees.
bool has_formula(std::string_view value, std::string_view delimiters) {
  if (is_formula(value, delimiters)) return true;
  for (char sep : delimiters) {
    size_t start = value.find(sep);
    while (start != std::string_view::npos) {
      size_t end = value.find(sep, start + 1);
      std::string_view piece = value.substr(start + 1, end == std::string_view::npos ? end : end - start - 1);
      if (is_formula(piece, delimiters)) return true;
      start = end;
    }
  }
  return false;
}

// ',', ';', TAB, '|' and X of a first line "sep=X" (after a BOM, any case).
std::string readers_of(std::string_view file) {
  std::string readers = ",;\t|";
  if (file.starts_with("\xEF\xBB\xBF")) file.remove_prefix(3);
  if (file.size() > 4 && (file[0] | 0x20) == 's' && (file[1] | 0x20) == 'e' && (file[2] | 0x20) == 'p' &&
      file[3] == '=' && readers.find(file[4]) == std::string::npos)
    readers.push_back(file[4]);
  return readers;
}

// b is a with apostrophes inserted, and nothing else changed.
bool only_apostrophes_added(std::string_view a, std::string_view b) {
  size_t i = 0;
  for (char c : b) {
    if (i < a.size() && a[i] == c)
      ++i;
    else if (c != '\'')
      return false;
  }
  return i == a.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the delimiter; the rest is the file.
  const char delimiter = data[0] & 1 ? '\t' : ',';
  std::string_view file(reinterpret_cast<const char*>(data) + 1, size - 1);

  csv::Result n = csv::process(file, delimiter, csv::Mode::kNeutralise);
  csv::Result r = csv::process(file, delimiter, csv::Mode::kReject);
  FUZZ_CHECK(n.ok || !r.ok);
  if (!n.ok) {
    FUZZ_CHECK(!n.reason.empty() && n.output.empty());
    FUZZ_CHECK(!n.reason.starts_with("internal check"));  // process's own re-check never fires
    FUZZ_CHECK(n.reason == r.reason);                     // a file refused as unreadable is so in both modes
    return 0;
  }
  FUZZ_CHECK(only_apostrophes_added(file, n.output));
  FUZZ_CHECK(n.output.size() == file.size() + n.cells_changed);
  FUZZ_CHECK((n.cells_changed == 0) == (n.output == file));
  // Every reader, on the file as it leaves: no cell (or piece) is a formula.
  const std::string readers = readers_of(file);
  for (char reader : readers)
    for (const std::string& cell : read_cells(n.output, reader)) FUZZ_CHECK(!has_formula(cell, readers));

  csv::Result again = csv::process(n.output, delimiter, csv::Mode::kNeutralise);
  FUZZ_CHECK(again.ok && again.cells_changed == 0 && again.output == n.output);

  FUZZ_CHECK(r.ok == (n.cells_dangerous == 0));
  if (r.ok) {
    FUZZ_CHECK(r.output == file);
    for (char reader : readers)
      for (const std::string& cell : read_cells(file, reader)) FUZZ_CHECK(!has_formula(cell, readers));
  }
  return 0;
}
