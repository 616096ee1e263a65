// CSV/TSV formula-injection gate (OWASP "CSV Injection") for artifacts a user may
// open in Excel, LibreOffice or Google Sheets. Pure and non-throwing; any thread.
// Never rewrites a byte other than inserting apostrophes before dangerous values.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

// The model. A spreadsheet does not ask which delimiter the writer meant: Excel
// in a de-DE, fr-FR or nl-NL locale splits a double-clicked .csv on ';', import
// dialogs offer ',', ';', TAB and '|', and a first line "sep=X" makes Excel split
// on X. So the file is read as each of those readers reads it (RFC 4180 quoting
// with that delimiter: a quote opens a field only at its start, "" is a quote,
// text after a closing quote joins the cell), and a cell is dangerous if it, or
// a piece of it after any of the delimiters (for readers whose quoting differs
// again), begins with a formula trigger once what importers strip is skipped.
// Such a reader's cell may begin inside the writer's quoted field, or begin with
// a '"' that it takes as an opening quote. The apostrophe goes immediately
// before the trigger character: an apostrophe is special to no reader, so no
// reader's cells move, every reader then sees a cell that starts with it, and
// the writer's own delimiter still reads a valid file whose values differ only
// by apostrophes. Where that spot is right after the writer's closing quote the
// file cannot be fixed so, and it is refused.
namespace artifacts::csv {

inline constexpr size_t kDefaultMaxCells = 10'000'000;

enum class Mode {
  kNeutralise,  // insert an apostrophe before every trigger any reader would see
  kReject,      // refuse the file when any reader would see a dangerous cell
};

struct Result {
  // false: the file could not be parsed, was over max_cells, had a "sep=" line
  // this check cannot model, could not be neutralised, or (kReject) held a
  // dangerous cell; reason says which. output is then empty.
  bool ok = false;
  // The (possibly rewritten) file; byte-for-byte the input when nothing changed.
  // Always empty in kReject mode unless ok.
  std::string output;
  size_t cells_changed = 0;    // apostrophes inserted (kNeutralise)
  size_t cells_dangerous = 0;  // cells, as the file's own delimiter splits it, holding one
  std::string reason;          // human text; empty when ok and nothing changed
};

// delimiter: the file's own, ',' (text/csv) or '\t' (text/tab-separated-values);
// it must parse as RFC 4180 with it (LF, CRLF or a lone CR end a record outside
// quotes; a UTF-8 BOM is kept and is not part of the first cell). The readers
// checked are ',', ';', TAB, '|' and the "sep=" delimiter, whatever delimiter is.
Result process(std::string_view input, char delimiter, Mode mode, size_t max_cells = kDefaultMaxCells);

// True when a spreadsheet could treat the (already unquoted) value as a formula:
// after spaces (ASCII, NBSP, U+3000 and other Unicode spaces), line feeds and
// quotes it starts with = + - @ TAB CR or a Unicode form of = + - @ (full-width,
// small, super/subscript, U+2212), and is not plain numbers ("-80.00", "+1e5",
// "-1,5") joined by the readers' delimiters ("-1,-2" is one cell to a ';' reader).
bool is_dangerous_cell(std::string_view unquoted_cell_value);

}  // namespace artifacts::csv
