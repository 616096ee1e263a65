// artifacts::csv::process, read back by an independent RFC 4180 reader written
// here: a neutralised file has no formula cell, neither as its own delimiter
// splits it nor as a reader splitting on ',', ';' or TAB would see the pieces
// of a value; a rejecting pass that accepts has none either; only apostrophes
// are ever inserted; and neutralising twice changes nothing.
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

// A number a spreadsheet reads as such: [+-] digits [. digits] [e [+-] digits].
bool is_number(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  bool whole = digits(s, i);
  bool frac = false;
  if (i < s.size() && s[i] == '.') {
    ++i;
    frac = digits(s, i);
  }
  if (!whole && !frac) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (!digits(s, i)) return false;
  }
  return i == s.size();
}

// A cell a spreadsheet may evaluate: after spaces, line breaks and quotes, it
// starts with = + - @ TAB CR (or their full-width forms) and is no number.
bool is_formula(std::string_view v) {
  while (!v.empty() && (v[0] == ' ' || v[0] == '\n' || v[0] == '\v' || v[0] == '\f' || v[0] == '"'))
    v.remove_prefix(1);
  if (v.empty()) return false;
  for (std::string_view fw : {"\xEF\xBC\x9D", "\xEF\xBC\x8B", "\xEF\xBC\x8D", "\xEF\xBC\xA0"})
    if (v.starts_with(fw)) return true;
  switch (v[0]) {
    case '=': case '@': case '\t': case '\r': return true;
    case '+': case '-': return !is_number(v);
    default: return false;
  }
}

// The cell, and the pieces a reader splitting on another separator sees.
bool has_formula(std::string_view value) {
  if (is_formula(value)) return true;
  for (char sep : {',', ';', '\t'}) {
    size_t start = value.find(sep);
    while (start != std::string_view::npos) {
      size_t end = value.find(sep, start + 1);
      std::string_view piece = value.substr(start + 1, end == std::string_view::npos ? end : end - start - 1);
      if (is_formula(piece)) return true;
      start = end;
    }
  }
  return false;
}

// b is a with apostrophes inserted, and nothing else changed.
bool only_apostrophes_added(std::string_view a, std::string_view b) {
  size_t i = 0;
  for (char c : b) {
    if (i < a.size() && a[i] == c) ++i;
    else if (c != '\'') return false;
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
    return 0;
  }
  FUZZ_CHECK(only_apostrophes_added(file, n.output));
  FUZZ_CHECK(n.output.size() == file.size() + n.cells_changed);
  FUZZ_CHECK((n.cells_changed == 0) == (n.output == file));
  for (const std::string& cell : read_cells(n.output, delimiter)) FUZZ_CHECK(!has_formula(cell));

  csv::Result again = csv::process(n.output, delimiter, csv::Mode::kNeutralise);
  FUZZ_CHECK(again.ok && again.cells_changed == 0 && again.output == n.output);

  FUZZ_CHECK(r.ok == (n.cells_dangerous == 0));
  if (r.ok) {
    FUZZ_CHECK(r.output == file);
    for (const std::string& cell : read_cells(file, delimiter)) FUZZ_CHECK(!has_formula(cell));
  }
  return 0;
}
