// CSV/TSV formula-injection gate (OWASP "CSV Injection") for artifacts a user may
// open in Excel, LibreOffice or Google Sheets. Pure and non-throwing; any thread.
// Never rewrites a byte other than inserting apostrophes before dangerous values.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace artifacts::csv {

inline constexpr size_t kDefaultMaxCells = 10'000'000;

enum class Mode {
  kNeutralise,  // prefix every dangerous value (a cell, or a piece after , ; TAB in one) with an apostrophe
  kReject,      // refuse the file when any cell is dangerous
};

struct Result {
  // false: the file could not be parsed, was over max_cells, or (kReject) held a
  // dangerous cell; reason says which. output is then empty.
  bool ok = false;
  // The (possibly rewritten) file; byte-for-byte the input when nothing changed.
  // Always empty in kReject mode unless ok.
  std::string output;
  size_t cells_changed = 0;    // apostrophes inserted (kNeutralise)
  size_t cells_dangerous = 0;  // cells holding a dangerous value (either mode)
  std::string reason;          // human text; empty when ok and nothing changed
};

// Parses RFC 4180 records (LF, CRLF or lone CR end a record outside quotes; a
// UTF-8 BOM is kept and is not part of the first cell). delimiter: ',' or '\t'.
Result process(std::string_view input, char delimiter, Mode mode,
               size_t max_cells = kDefaultMaxCells);

// True when a spreadsheet could treat the (already unquoted) value as a formula:
// it starts, after spaces, with = + - @ TAB CR or a full-width = + - @, and is
// not a plain number such as "-80.00" or "+1e5".
bool is_dangerous_cell(std::string_view unquoted_cell_value);

}  // namespace artifacts::csv
