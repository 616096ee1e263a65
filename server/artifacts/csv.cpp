// CSV/TSV formula-injection gate: one pass over the bytes, RFC 4180 quoting, and
// an apostrophe inserted before each dangerous value. Pure; any thread; no I/O.
#include "server/artifacts/csv.h"

#include <string>
#include <utility>
#include <vector>

namespace artifacts::csv {
namespace {

constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";
constexpr std::string_view kTriggerText = "=, +, -, @, tab or CR";

// Full-width = + - @ (U+FF1D, U+FF0B, U+FF0D, U+FF20): some spreadsheet locales
// fold them to ASCII before deciding whether a cell is a formula.
constexpr std::string_view kFullWidthTriggers[] = {
    "\xEF\xBC\x9D", "\xEF\xBC\x8B", "\xEF\xBC\x8D", "\xEF\xBC\xA0"};

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// ^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$ : a value a spreadsheet reads as a
// number, so a leading sign cannot start a formula ("-80.00", "+3", "-1e5").
bool is_plain_number(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
  size_t int_digits = 0;
  while (i < n && is_digit(s[i])) ++i, ++int_digits;
  size_t frac_digits = 0;
  if (i < n && s[i] == '.') {
    ++i;
    while (i < n && is_digit(s[i])) ++i, ++frac_digits;
  }
  if (int_digits == 0 && frac_digits == 0) return false;
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
    size_t exp_digits = 0;
    while (i < n && is_digit(s[i])) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == n;
}

// Characters skipped before looking for a trigger. Importers differ in what they
// trim before deciding a cell is a formula (Python's skipinitialspace drops
// spaces and then honours a quote; some import and paste paths trim whitespace),
// so " =1+1", "\n=1+1" and ' "=1+1"' all count. The cost is an apostrophe on a
// rare harmless value. TAB and CR are not skipped: they are triggers themselves.
bool is_skipped_prefix_char(char c) {
  return c == ' ' || c == '\n' || c == '\v' || c == '\f' || c == '"';
}

std::string hex_byte(char c) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const auto b = static_cast<unsigned char>(c);
  return std::string("0x") + kHex[b >> 4] + kHex[b & 0xF];
}

std::string plural_cells(size_t n) {
  return std::to_string(n) + (n == 1 ? " cell" : " cells");
}

std::string where(size_t line, size_t row, size_t column) {
  return "line " + std::to_string(line) + " (row " + std::to_string(row) + ", column " +
         std::to_string(column) + ")";
}

Result failure(std::string reason) {
  Result r;
  r.ok = false;
  r.reason = std::move(reason);
  return r;
}

// Excel obeys a first line "sep=X" and then splits on X, so "sep=;\na;=cmd()"
// would hide a formula from a comma parse. Only the file's own delimiter is allowed.
bool has_foreign_separator_directive(std::string_view body, char delimiter) {
  if (body.size() < 4) return false;
  auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; };
  if (lower(body[0]) != 's' || lower(body[1]) != 'e' || lower(body[2]) != 'p' || body[3] != '=')
    return false;
  return body.size() == 4 || body[4] != delimiter;
}

// Where a value holds a formula, as offsets into the value: 0 when the cell
// itself is one, and k + 1 for each ',', ';' or TAB at k whose piece (up to
// the next same separator) is one. A reader that splits on another separator
// than the file's (a ';' locale opening a comma file, a TSV opened as CSV)
// sees those pieces as cells: "x;=cmd()" is a formula cell to it.
void formula_starts(std::string_view value, std::vector<size_t>& starts) {
  starts.clear();
  if (is_dangerous_cell(value)) starts.push_back(0);
  for (size_t k = 0; k < value.size(); ++k) {
    const char sep = value[k];
    if (sep != ',' && sep != ';' && sep != '\t') continue;
    const size_t end = value.find(sep, k + 1);
    if (is_dangerous_cell(value.substr(k + 1, end == std::string_view::npos ? end : end - k - 1)))
      starts.push_back(k + 1);
  }
}

}  // namespace

bool is_dangerous_cell(std::string_view value) {
  size_t i = 0;
  while (i < value.size() && is_skipped_prefix_char(value[i])) ++i;
  const std::string_view rest = value.substr(i);
  if (rest.empty()) return false;
  switch (rest[0]) {
    case '+':
    case '-':
      return !is_plain_number(rest);
    case '=':
    case '@':
    case '\t':
    case '\r':
      return true;
    default:
      break;
  }
  // Full-width forms never count as numbers: "－1" is not a number to Excel.
  for (std::string_view fw : kFullWidthTriggers)
    if (rest.starts_with(fw)) return true;
  return false;
}

Result process(std::string_view input, char delimiter, Mode mode, size_t max_cells) {
  if (delimiter != ',' && delimiter != '\t')
    return failure("unsupported delimiter " + hex_byte(delimiter) + "; expected ',' or tab");

  const size_t n = input.size();
  size_t pos = input.starts_with(kUtf8Bom) ? kUtf8Bom.size() : 0;
  if (has_foreign_separator_directive(input.substr(pos), delimiter))
    return failure(std::string("first line is a \"sep=\" directive naming a delimiter other than ") +
                   (delimiter == ',' ? "','" : "tab") +
                   "; spreadsheets would split cells differently from this check");

  Result result;
  const bool neutralise = mode == Mode::kNeutralise;
  size_t copied_up_to = 0;  // input[0, copied_up_to) is already in result.output
  size_t cells = 0;
  size_t line = 1, row = 1, column = 1;
  size_t first_row = 0, first_column = 0;
  std::string unescaped;  // reused buffer for quoted values
  std::vector<size_t> starts;  // reused: formula_starts of a value

  // An empty file (or a BOM alone) has no cells at all. Otherwise each pass
  // starts at a field, possibly at EOF after a trailing delimiter ("a," ends
  // with an empty field).
  while (pos < n || column > 1) {
    if (++cells > max_cells)
      return failure("more than " + std::to_string(max_cells) + " cells (max_cells); refused at " +
                     where(line, row, column));

    const size_t field_line = line;
    std::string_view value;
    size_t value_start;  // where an apostrophe would go
    const bool quoted = pos < n && input[pos] == '"';
    if (quoted) {
      value_start = pos + 1;
      unescaped.clear();
      ++pos;
      for (;;) {
        if (pos >= n)
          return failure("unterminated quoted field starting on " +
                         where(field_line, row, column));
        const char c = input[pos];
        if (c == '"') {
          if (pos + 1 < n && input[pos + 1] == '"') {
            unescaped.push_back('"');
            pos += 2;
            continue;
          }
          ++pos;
          break;
        }
        // Count lines as an editor would: LF, CRLF (once) and a lone CR.
        if (c == '\n' || (c == '\r' && !(pos + 1 < n && input[pos + 1] == '\n'))) ++line;
        unescaped.push_back(c);
        ++pos;
      }
      value = unescaped;
    } else {
      value_start = pos;
      // A quote inside an unquoted field is a literal character (common practice;
      // Excel and Python's csv agree). A lone CR ends the record, see below.
      while (pos < n && input[pos] != delimiter && input[pos] != '\n' && input[pos] != '\r') ++pos;
      value = input.substr(value_start, pos - value_start);
    }

    formula_starts(value, starts);
    if (!starts.empty()) {
      ++result.cells_dangerous;
      if (result.cells_dangerous == 1) {
        first_row = row;
        first_column = column;
      }
      if (neutralise) {
        if (result.output.empty()) result.output.reserve(n + n / 64 + 16);
        // A value offset to its byte in the input: a quoted value's '"' is '""' there.
        size_t j = 0, raw = value_start;
        for (size_t start : starts) {
          for (; j < start; ++j) raw += quoted && value[j] == '"' ? 2 : 1;
          result.output.append(input.substr(copied_up_to, raw - copied_up_to));
          result.output.push_back('\'');
          copied_up_to = raw;
          ++result.cells_changed;
        }
      }
    }

    if (pos >= n) break;  // last record without a trailing newline
    const char c = input[pos];
    if (c == delimiter) {
      ++pos;
      ++column;
      continue;
    }
    if (c == '\n' || c == '\r') {
      // A lone CR ends the record too, as Python's csv and classic-Mac importers
      // do: were it part of the field, "a\r=cmd()" would reach such readers as a
      // formula cell this check never saw. For RFC readers the inserted
      // apostrophe then sits mid-value, which is harmless. CRLF is one terminator.
      pos += (c == '\r' && pos + 1 < n && input[pos + 1] == '\n') ? 2 : 1;
      ++line;
      ++row;
      column = 1;
      continue;
    }
    // Only reachable after a closing quote: '"ab"c'. Readers disagree on what
    // such a cell holds ('""=1' is "=1" to some), so fail closed.
    return failure("unexpected text after the closing quote of a quoted field on " +
                   where(line, row, column));
  }

  result.ok = true;
  if (result.cells_dangerous == 0) {
    result.output.assign(input);
    return result;
  }
  if (!neutralise) {
    result.ok = false;
    result.output.clear();
    result.reason = plural_cells(result.cells_dangerous) +
                    (result.cells_dangerous == 1 ? " starts" : " start") + " with " +
                    std::string(kTriggerText) +
                    " (spreadsheet formula injection); the first is at row " +
                    std::to_string(first_row) + ", column " + std::to_string(first_column);
    return result;
  }
  result.output.append(input.substr(copied_up_to));
  result.reason = plural_cells(result.cells_dangerous) + " starting with " +
                  std::string(kTriggerText) +
                  (result.cells_dangerous == 1 ? " was" : " were") +
                  " prefixed with an apostrophe";
  return result;
}

}  // namespace artifacts::csv
