// CSV/TSV formula-injection gate: the file read as each spreadsheet reader would
// split it, an apostrophe inserted before each trigger one of them would see,
// and the result checked again before it is returned. Pure; any thread; no I/O.
#include "server/artifacts/csv.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace artifacts::csv {
namespace {

constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";
constexpr std::string_view kTriggerText = "=, +, -, @, tab, CR or a Unicode form of them";
constexpr size_t kNpos = std::string_view::npos;

// Splitters a spreadsheet may use on a .csv or .tsv, whatever the writer meant:
// ',' (en-US double-click), ';' (de/fr/nl locales double-click), TAB
// (a .tsv, and Excel's import default), '|' (offered by every import dialog).
constexpr char kReaderDelimiters[] = {',', ';', '\t', '|'};

// Characters an importer may fold to = + - @ before deciding a cell is a
// formula (NFKC, or the IME-style width folding of CJK locales). None ever
// counts as part of a plain number: "－1" is text to one reader, -1 to another.
constexpr std::string_view kUnicodeTriggers[] = {
    "\xEF\xBC\x9D",  // U+FF1D FULLWIDTH EQUALS SIGN
    "\xEF\xBC\x8B",  // U+FF0B FULLWIDTH PLUS SIGN
    "\xEF\xBC\x8D",  // U+FF0D FULLWIDTH HYPHEN-MINUS
    "\xEF\xBC\xA0",  // U+FF20 FULLWIDTH COMMERCIAL AT
    "\xEF\xB9\xA6",  // U+FE66 SMALL EQUALS SIGN
    "\xEF\xB9\xA2",  // U+FE62 SMALL PLUS SIGN
    "\xEF\xB9\xA3",  // U+FE63 SMALL HYPHEN-MINUS
    "\xEF\xB9\xAB",  // U+FE6B SMALL COMMERCIAL AT
    "\xE2\x81\xBA",  // U+207A SUPERSCRIPT PLUS SIGN
    "\xE2\x81\xBB",  // U+207B SUPERSCRIPT MINUS
    "\xE2\x81\xBC",  // U+207C SUPERSCRIPT EQUALS SIGN
    "\xE2\x82\x8A",  // U+208A SUBSCRIPT PLUS SIGN
    "\xE2\x82\x8B",  // U+208B SUBSCRIPT MINUS
    "\xE2\x82\x8C",  // U+208C SUBSCRIPT EQUALS SIGN
    "\xE2\x88\x92",  // U+2212 MINUS SIGN (LibreOffice takes it as a minus)
};

// Spaces an importer or a "trim spaces" option may drop before the trigger it
// then sees: " =1" and "\u00A0=1" are "=1" to such a reader.
constexpr std::string_view kUnicodeSpaces[] = {
    "\xC2\xA0",      // U+00A0 NO-BREAK SPACE
    "\xC2\x85",      // U+0085 NEXT LINE
    "\xE1\x9A\x80",  // U+1680 OGHAM SPACE MARK
    "\xE1\xA0\x8E",  // U+180E MONGOLIAN VOWEL SEPARATOR
    "\xE2\x80\x80", "\xE2\x80\x81", "\xE2\x80\x82", "\xE2\x80\x83", "\xE2\x80\x84",
    "\xE2\x80\x85", "\xE2\x80\x86", "\xE2\x80\x87", "\xE2\x80\x88", "\xE2\x80\x89",
    "\xE2\x80\x8A",                                  // U+2000..U+200A EN QUAD .. HAIR SPACE
    "\xE2\x80\x8B", "\xE2\x80\x8C", "\xE2\x80\x8D",  // U+200B..U+200D zero-width space, (non-)joiner
    "\xE2\x80\xA8", "\xE2\x80\xA9",                  // U+2028 LINE / U+2029 PARAGRAPH SEPARATOR
    "\xE2\x80\xAF",                                  // U+202F NARROW NO-BREAK SPACE
    "\xE2\x81\x9F",                                  // U+205F MEDIUM MATHEMATICAL SPACE
    "\xE2\x81\xA0",                                  // U+2060 WORD JOINER
    "\xE3\x80\x80",                                  // U+3000 IDEOGRAPHIC SPACE
    "\xEF\xBB\xBF",                                  // U+FEFF ZERO WIDTH NO-BREAK SPACE (a BOM inside a cell)
};

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Length of the stripped character at v[i] (0: none). Importers differ in what
// they trim before deciding a cell is a formula (Python's skipinitialspace drops
// spaces and then honours a quote; "trim spaces" options drop Unicode spaces),
// so " =1", "\n=1", '"=1' and "\u3000=1" all count. The cost is an apostrophe
// on a rare harmless value. TAB and CR are not skipped: they are triggers.
size_t stripped_length(std::string_view v, size_t i) {
  const char c = v[i];
  if (c == ' ' || c == '\n' || c == '\v' || c == '\f' || c == '"') return 1;
  if (static_cast<unsigned char>(c) < 0x80) return 0;
  for (std::string_view sp : kUnicodeSpaces)
    if (v.substr(i).starts_with(sp)) return sp.size();
  return 0;
}

size_t skip_stripped(std::string_view v, size_t i) {
  while (i < v.size()) {
    const size_t len = stripped_length(v, i);
    if (len == 0) break;
    i += len;
  }
  return i;
}

// Stripped characters and apostrophes from i on; returns where they end.
size_t skip_stripped_and_apostrophes(std::string_view v, size_t i) {
  while (i < v.size()) {
    if (v[i] == '\'') {
      ++i;
      continue;
    }
    const size_t len = stripped_length(v, i);
    if (len == 0) break;
    i += len;
  }
  return i;
}

// [+-]?(\d+([.,]\d+)*[.,]?|[.,]\d+([.,]\d+)*)([eE][+-]?\d+)? between stripped
// characters: a number in some locale ("-80.00", "+1e5", "-1,5", "+1.234,56").
// Empty counts when allow_empty (any element but the first). Apostrophes may
// lead such an element and end any: ours, put before the sign of "-2" in "-1,-2"
// (for a reader whose cell "-2" is) or before a TAB ending "-1" (for a reader
// whose cell starts with it). They must leave "-1,'-2" and "-1'<TAB>" number
// lists, or each fix would need another; without a '!' or a letter they cannot
// make a sheet reference.
bool is_number_piece(std::string_view s, bool allow_empty) {
  const size_t n = s.size();
  size_t i = skip_stripped(s, 0);
  if (allow_empty) {
    while (i < n && s[i] == '\'') ++i;
    if (skip_stripped_and_apostrophes(s, i) == n) return true;
  }
  if (i == n) return false;
  if (s[i] == '+' || s[i] == '-') ++i;
  size_t digits = 0;
  bool after_separator = false;
  for (; i < n; ++i) {
    if (is_digit(s[i])) {
      ++digits;
      after_separator = false;
    } else if ((s[i] == '.' || s[i] == ',') && !after_separator) {
      after_separator = true;
    } else {
      break;
    }
  }
  if (digits == 0) return false;
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
    size_t exp_digits = 0;
    while (i < n && is_digit(s[i])) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return skip_stripped_and_apostrophes(s, i) == n;
}

// A value led by a sign is harmless when it is plain numbers joined by reader
// delimiters: nothing in it can name a function, a reference or a DDE server.
// A ';' reader opening "-1,-2\n" sees the one cell "-1,-2", and a number file
// must stay as it is; "-1,HYPERLINK(...)" and "-1+cmd" are not number lists.
bool is_number_list(std::string_view s, std::string_view delimiters) {
  for (size_t i = 0;;) {
    size_t j = i;
    while (j < s.size() && delimiters.find(s[j]) == std::string_view::npos) ++j;
    if (!is_number_piece(s.substr(i, j - i), /*allow_empty=*/i > 0)) return false;
    if (j == s.size()) return true;
    i = j + 1;
  }
}

// True when v[i, end) (its stripped prefix already skipped) starts a formula.
bool starts_formula(std::string_view v, size_t i, size_t end, std::string_view delimiters) {
  switch (v[i]) {
    case '+':
    case '-':
      return !is_number_list(v.substr(i, end - i), delimiters);
    case '=':
    case '@':
    case '\t':
    case '\r':
      return true;
    default:
      break;
  }
  if (static_cast<unsigned char>(v[i]) < 0x80) return false;
  const std::string_view rest = v.substr(i, end - i);
  for (std::string_view t : kUnicodeTriggers)
    if (rest.starts_with(t)) return true;
  return false;
}

// Where v[begin, end) starts a formula (the offset of its trigger), or npos.
size_t formula_trigger(std::string_view v, size_t begin, size_t end, std::string_view delimiters) {
  const size_t i = skip_stripped(v.substr(0, end), begin);
  if (i >= end) return kNpos;
  return starts_formula(v, i, end, delimiters) ? i : kNpos;
}

// One field of one reader.
struct Field {
  size_t start = 0;  // offset of its first byte
  size_t end = 0;    // offset of its delimiter or line break, or the size
  bool quoted = false;
  size_t close = kNpos;                  // offset of the closing quote (quoted fields)
  size_t line = 1, row = 1, column = 1;  // where it starts
};

// Reads fields as a spreadsheet does with one delimiter: RFC 4180 quotes,
// LF, CRLF or a lone CR ending a record outside them. strict (the file's own
// delimiter) refuses an unterminated quote and text after a closing quote;
// otherwise both are read as Excel does: to EOF, and joined to the cell.
class FieldReader {
 public:
  FieldReader(std::string_view s, size_t begin, char delimiter, bool strict)
      : s_(s), pos_(begin), delimiter_(delimiter), strict_(strict) {}

  // The next field into field()/value(); false at the end or on an error.
  bool next() {
    const size_t n = s_.size();
    // An empty file (or a BOM alone) has no fields; a trailing delimiter
    // ("a,") ends with one more, empty, field.
    if (done_ || (pos_ >= n && column_ == 1)) return false;
    field_ = Field{pos_, pos_, false, kNpos, line_, row_, column_};
    value_.clear();
    escapes_.clear();
    quoted_length_ = kNpos;
    if (pos_ < n && s_[pos_] == '"') {
      field_.quoted = true;
      ++pos_;
      for (;;) {
        if (pos_ >= n) {
          if (strict_)
            return fail("unterminated quoted field starting on " + where(field_.line, field_.row, field_.column));
          quoted_length_ = value_.size();
          break;
        }
        const char c = s_[pos_];
        if (c == '"') {
          if (pos_ + 1 < n && s_[pos_ + 1] == '"') {
            escapes_.push_back(value_.size());
            value_.push_back('"');
            pos_ += 2;
            continue;
          }
          field_.close = pos_++;
          quoted_length_ = value_.size();
          break;
        }
        // Count lines as an editor would: LF, CRLF (once) and a lone CR.
        if (c == '\n' || (c == '\r' && !(pos_ + 1 < n && s_[pos_ + 1] == '\n'))) ++line_;
        value_.push_back(c);
        ++pos_;
      }
    }
    // An unquoted field, or what follows a closing quote: a quote here is a
    // literal character (Excel and Python's csv agree).
    const size_t text_start = pos_;
    while (pos_ < n && s_[pos_] != delimiter_ && s_[pos_] != '\n' && s_[pos_] != '\r') ++pos_;
    if (field_.quoted && pos_ > text_start && strict_)
      // Readers disagree on what '"ab"c' holds ('""=1' is "=1" to some): fail closed.
      return fail("unexpected text after the closing quote of a quoted field on " + where(line_, row_, column_));
    value_.append(s_.substr(text_start, pos_ - text_start));
    field_.end = pos_;

    if (pos_ >= n) {
      done_ = true;  // the last record may lack a line break
    } else if (s_[pos_] == delimiter_) {
      ++pos_;
      ++column_;
    } else {
      // A lone CR ends the record too, as Python's csv and classic-Mac
      // importers do: were it part of the field, "a\r=cmd()" would reach such
      // readers as a formula cell this check never saw. CRLF is one terminator.
      pos_ += (s_[pos_] == '\r' && pos_ + 1 < n && s_[pos_ + 1] == '\n') ? 2 : 1;
      ++line_;
      ++row_;
      column_ = 1;
    }
    return true;
  }

  const Field& field() const { return field_; }
  std::string_view value() const { return value_; }
  const std::string& error() const { return error_; }
  size_t line() const { return line_; }

  // The offset in the file of value()[k]: a quoted value's '"' is '""' there,
  // and its closing quote sits between the quoted part and what follows it.
  size_t offset_of(size_t k) const {
    if (!field_.quoted) return field_.start + k;
    const size_t escapes_before =
        static_cast<size_t>(std::lower_bound(escapes_.begin(), escapes_.end(), k) - escapes_.begin());
    return field_.start + 1 + k + escapes_before + (k >= quoted_length_ ? 1 : 0);
  }

  static std::string where(size_t line, size_t row, size_t column) {
    return "line " + std::to_string(line) + " (row " + std::to_string(row) + ", column " + std::to_string(column) + ")";
  }

 private:
  bool fail(std::string reason) {
    error_ = std::move(reason);
    done_ = true;
    return false;
  }

  std::string_view s_;
  size_t pos_;
  char delimiter_;
  bool strict_;
  bool done_ = false;
  size_t line_ = 1, row_ = 1, column_ = 1;
  Field field_;
  std::string value_;
  std::vector<size_t> escapes_;   // value_ offsets of quotes that were "" in the file
  size_t quoted_length_ = kNpos;  // value_ size at the closing quote
  std::string error_;
};

// Where apostrophes go: one byte per byte of the file, 0 for none, else the
// index + 1 of the reader (delimiter) that would see a formula starting at that
// byte. A byte per byte bounds the memory by the file's size however many
// readers find the same trigger.
using MarkMap = std::vector<uint8_t>;

// Triggers in a value: the value itself, and each piece after one of the
// delimiters up to the next same one. A reader whose quotes fall elsewhere
// (another application's rules, a "string delimiter" setting) sees those
// pieces as cells: "x;=cmd()" is a formula cell to it. Each trigger comes with
// the index of the delimiter that makes it a cell's start (own: the value's).
void find_triggers(std::string_view value, std::string_view delimiters, size_t own,
                   std::vector<std::pair<size_t, size_t>>& out) {
  out.clear();
  if (size_t t = formula_trigger(value, 0, value.size(), delimiters); t != kNpos) out.emplace_back(t, own);
  for (size_t r = 0; r < delimiters.size(); ++r) {
    const char d = delimiters[r];
    for (size_t k = value.find(d); k != kNpos;) {
      const size_t next = value.find(d, k + 1);
      if (size_t t = formula_trigger(value, k + 1, next == kNpos ? value.size() : next, delimiters); t != kNpos)
        out.emplace_back(t, r);
      k = next;
    }
  }
}

// Marks every place where one of the readers would see a formula; returns
// how many places are marked. The first reader to find a place names it.
size_t find_marks(std::string_view s, size_t begin, std::string_view delimiters, MarkMap& marks) {
  marks.assign(s.size(), 0);
  size_t count = 0;
  std::vector<std::pair<size_t, size_t>> triggers;
  for (size_t r = 0; r < delimiters.size(); ++r) {
    FieldReader reader(s, begin, delimiters[r], /*strict=*/false);
    while (reader.next()) {
      find_triggers(reader.value(), delimiters, r, triggers);
      for (auto [t, by] : triggers) {
        uint8_t& m = marks[reader.offset_of(t)];
        if (m == 0) {
          m = static_cast<uint8_t>(by + 1);
          ++count;
        }
      }
    }
  }
  return count;
}

std::string hex_byte(char c) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const auto b = static_cast<unsigned char>(c);
  return std::string("0x") + kHex[b >> 4] + kHex[b & 0xF];
}

std::string name_delimiter(char c) { return c == '\t' ? "tab" : std::string("'") + c + "'"; }

// "',', ';', tab or '|'"
std::string name_delimiters(std::string_view delimiters) {
  std::string out;
  for (size_t i = 0; i < delimiters.size(); ++i) {
    if (i > 0) out += i + 1 == delimiters.size() ? " or " : ", ";
    out += name_delimiter(delimiters[i]);
  }
  return out;
}

std::string count_of(size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

Result failure(std::string reason) {
  Result r;
  r.ok = false;
  r.reason = std::move(reason);
  return r;
}

// Excel obeys a first line "sep=X" (any case) and then splits on X, so X is
// one more reader. X is refused where no reader can be modelled: a quote or
// line break would change what a field is, an apostrophe would be split on
// by the very fix, and a non-ASCII byte is half of a character Excel decodes.
// Returns X, 0 for no directive, or sets reason.
char separator_directive(std::string_view body, std::string& reason) {
  auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; };
  if (body.size() < 4 || lower(body[0]) != 's' || lower(body[1]) != 'e' || lower(body[2]) != 'p' || body[3] != '=')
    return 0;
  const char x = body.size() > 4 ? body[4] : '\n';
  const auto b = static_cast<unsigned char>(x);
  if (x == '\t' || (b >= 0x20 && b < 0x7F && x != '"' && x != '\'')) return x;
  reason = std::string("first line is a \"sep=\" directive naming ") +
           (x == '\n' || x == '\r' ? std::string("no delimiter") : "the delimiter " + hex_byte(x)) +
           "; Excel would split cells in a way this check cannot follow";
  return 0;
}

// The marks laid over the cells of the file's own delimiter (counts, the first
// dangerous cell) and, in kNeutralise, the file with the apostrophes in.
struct Applied {
  std::string failure;  // non-empty: a mark no apostrophe can take
  std::string output;
  size_t cells_dangerous = 0;
  size_t first_row = 0, first_column = 0;
  size_t first_reader = 0;
};

Applied apply_marks(std::string_view input, size_t begin, char delimiter, std::string_view delimiters,
                    const MarkMap& marks, size_t count, bool write) {
  Applied a;
  if (write) a.output.reserve(input.size() + count);
  size_t copied_up_to = 0;
  size_t left = count;
  FieldReader own(input, begin, delimiter, /*strict=*/true);
  while (left > 0 && own.next()) {
    const Field& f = own.field();
    bool counted = false;
    for (size_t at = f.start; at <= f.end && at < marks.size(); ++at) {
      if (marks[at] == 0) continue;
      --left;
      const size_t reader = marks[at] - 1;
      // After the closing quote an apostrophe would be text after it: another
      // reader sees a cell starting with the TAB or CR that ends this field.
      if (f.quoted && at > f.close) {
        a.failure = "a reader splitting on " + name_delimiter(delimiters[reader]) + " sees a cell starting with " +
                    (input[at] == '\t' ? "tab" : "CR") + " right after the closing quote of the field on " +
                    FieldReader::where(f.line, f.row, f.column) + ", where no apostrophe can go";
        return a;
      }
      if (!counted) {
        counted = true;
        if (a.cells_dangerous++ == 0) {
          a.first_row = f.row;
          a.first_column = f.column;
          a.first_reader = reader;
        }
      }
      if (write) {
        a.output.append(input.substr(copied_up_to, at - copied_up_to));
        a.output.push_back('\'');
        copied_up_to = at;
      }
    }
  }
  if (write) a.output.append(input.substr(copied_up_to));
  return a;
}

}  // namespace

bool is_dangerous_cell(std::string_view value) {
  constexpr std::string_view kDelimiters(kReaderDelimiters, sizeof kReaderDelimiters);
  return formula_trigger(value, 0, value.size(), kDelimiters) != kNpos;
}

Result process(std::string_view input, char delimiter, Mode mode, size_t max_cells) {
  if (delimiter != ',' && delimiter != '\t')
    return failure("unsupported delimiter " + hex_byte(delimiter) + "; expected ',' or tab");

  const size_t begin = input.starts_with(kUtf8Bom) ? kUtf8Bom.size() : 0;
  std::string reason;
  const char directive = separator_directive(input.substr(begin), reason);
  if (!reason.empty()) return failure(std::move(reason));

  // The readers, the file's own first (it names the cells in reasons).
  std::string delimiters(1, delimiter);
  for (char d : kReaderDelimiters)
    if (d != delimiter) delimiters.push_back(d);
  if (directive != 0 && delimiters.find(directive) == std::string::npos) delimiters.push_back(directive);

  // 1. The file must be well formed for its own delimiter, within max_cells.
  {
    FieldReader own(input, begin, delimiter, /*strict=*/true);
    size_t cells = 0;
    while (own.next()) {
      if (++cells > max_cells)
        return failure("more than " + std::to_string(max_cells) + " cells (max_cells); refused at " +
                       FieldReader::where(own.field().line, own.field().row, own.field().column));
    }
    if (!own.error().empty()) return failure(own.error());
  }

  // 2. Where any reader would see a formula.
  MarkMap marks;
  size_t count = find_marks(input, begin, delimiters, marks);
  if (count == 0) {
    Result ok;
    ok.ok = true;
    ok.output.assign(input);
    return ok;
  }

  // 3. The apostrophes in.
  const bool neutralise = mode == Mode::kNeutralise;
  Applied applied = apply_marks(input, begin, delimiter, delimiters, marks, count, neutralise);
  if (!applied.failure.empty()) return failure(std::move(applied.failure));

  // 4. Fail closed: the rewritten file must show no reader a formula. An
  // apostrophe sits before a trigger, where no reader splits, so it moves no
  // cell; it cannot make a number list text (is_number_piece); csv_fuzz checks.
  MarkMap left;
  if (neutralise && find_marks(applied.output, begin, delimiters, left) != 0)
    return failure("internal check: the neutralised file still shows a reader a formula; refused");

  Result result;
  result.cells_dangerous = applied.cells_dangerous;
  const std::string what = count_of(result.cells_dangerous, "cell starts", "cells start") + " a formula (" +
                           std::string(kTriggerText) + ") for a reader splitting on " + name_delimiters(delimiters);
  const std::string first = "the first is at row " + std::to_string(applied.first_row) + ", column " +
                            std::to_string(applied.first_column) + ", as split on " +
                            name_delimiter(delimiters[applied.first_reader]);
  if (!neutralise) {
    result.ok = false;
    result.reason = what + " (spreadsheet formula injection); " + first;
    return result;
  }
  result.ok = true;
  result.output = std::move(applied.output);
  result.cells_changed = count;
  result.reason = what + "; " + count_of(result.cells_changed, "apostrophe", "apostrophes") + " inserted; " + first;
  return result;
}

}  // namespace artifacts::csv
