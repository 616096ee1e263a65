// Artifact names as the machines that save them see them. A name leaves the
// box and becomes a file on a person's disk, where Windows, macOS and Linux
// file managers decide from it how to open the file. Rejected here: names
// that display as something they are not (control characters, bidirectional
// controls: `invoice\u202Efdp.cmd` shows as `invoicedmc.pdf`), names Windows
// changes on save (a trailing dot or space: `report.csv.` is saved as
// `report.csv`), Windows device names (CON, NUL, COM1, ...) and characters
// Windows refuses. Which extensions may go with which media type is the
// policy's (artifacts.allowed_extensions), checked by the gate. Pure; any thread.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace artifacts::names {

// Why the artifact path (relative, '/' between its components) cannot leave
// under that name; nullopt when it can. Each component is checked.
std::optional<std::string> problem(std::string_view path);

// The extension of the path's last component, lowercased, with its dot
// (".csv"); "" when it has none (also for a dotfile such as ".profile").
std::string extension(std::string_view path);

// The extensions each known media type is saved with, the default of
// artifacts.allowed_extensions for the types the policy allows; empty for a
// type the table does not know.
std::vector<std::string> default_extensions(std::string_view media_type);

// Extensions that make a file run, or open as active content, when a person
// double-clicks it (Windows, macOS, Linux desktops): never allowed, whatever
// the policy says. Lowercase with the dot.
bool is_executable_extension(std::string_view extension);

}  // namespace artifacts::names
