// Media type decisions for artifacts: extension table, libmagic sniffing, and
// the agreement rules between them. Server threads only; never runs external
// programs (libmagic's decompression, MAGIC_COMPRESS, is left off).
#include "server/artifacts/types.h"

#include <magic.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <mutex>
#include <utility>

#include "server/util/text.h"

namespace artifacts::types {
namespace {

// Longest libmagic description quoted in a reason: JPEG comments and PDF
// metadata reach it, so the sandboxed program controls part of the text.
constexpr size_t kReasonDescriptionMaxBytes = 120;

struct ExtensionType {
  std::string_view extension;
  std::string_view media_type;
};

constexpr std::array kExtensionTypes{
    ExtensionType{"txt", "text/plain"},
    ExtensionType{"log", "text/plain"},
    ExtensionType{"csv", "text/csv"},
    ExtensionType{"tsv", "text/tab-separated-values"},
    ExtensionType{"json", "application/json"},
    ExtensionType{"md", "text/markdown"},
    ExtensionType{"markdown", "text/markdown"},
    ExtensionType{"png", "image/png"},
    ExtensionType{"jpg", "image/jpeg"},
    ExtensionType{"jpeg", "image/jpeg"},
    ExtensionType{"gif", "image/gif"},
    ExtensionType{"pdf", "application/pdf"},
    ExtensionType{"html", "text/html"},
    ExtensionType{"htm", "text/html"},
    ExtensionType{"xhtml", "application/xhtml+xml"},
    ExtensionType{"svg", "image/svg+xml"},
};

// How a declared type must agree with the sniffed one.
enum class Family {
  kText,    // any text/* or JSON sniff; bytes must be UTF-8
  kMarkup,  // HTML/XML/SVG or plain text sniff; bytes must be UTF-8
  kExact,   // binary formats: the sniff must name the same type
};

Family family_of(std::string_view media_type) {
  if (media_type == "text/plain" || media_type == "text/csv" || media_type == "text/tab-separated-values" ||
      media_type == "text/markdown" || media_type == "application/json")
    return Family::kText;
  if (media_type == "text/html" || media_type == "application/xhtml+xml" || media_type == "image/svg+xml")
    return Family::kMarkup;
  return Family::kExact;
}

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// libmagic says application/x-empty for an empty buffer (file(1) says
// inode/x-empty for an empty file); an empty text file is still text.
bool is_empty_sniff(std::string_view mime) { return mime == "application/x-empty" || mime == "inode/x-empty"; }

// libmagic 5.44 says text/csv for CSV it recognises; other versions have said
// application/csv, which is the same thing.
std::string canonical_sniff(std::string_view mime) {
  if (mime == "application/csv") return "text/csv";
  return std::string(mime);
}

bool sniff_agrees(Family family, std::string_view declared, std::string_view sniffed) {
  switch (family) {
    case Family::kText:
      // JSON, CSV, TSV and Markdown mostly sniff as text/plain; "42" is valid
      // JSON that libmagic calls text/plain. Anything text/* is acceptable.
      return starts_with(sniffed, "text/") || sniffed == "application/json" || sniffed == "application/csv" ||
             is_empty_sniff(sniffed);
    case Family::kMarkup:
      // A fragment without <html> or <svg> sniffs as text/plain; the markup is
      // scanned for active content separately, whatever it sniffed as.
      return sniffed == "text/html" || sniffed == "text/xml" || sniffed == "image/svg+xml" ||
             sniffed == "application/xml" || sniffed == "application/xhtml+xml" || sniffed == "text/plain" ||
             is_empty_sniff(sniffed);
    case Family::kExact:
      return sniffed == declared;
  }
  return false;
}

std::string short_description(std::string_view description) {
  if (description.size() <= kReasonDescriptionMaxBytes) return std::string(description);
  return std::string(util::utf8_prefix(description, kReasonDescriptionMaxBytes)) + "...";
}

Decision reject(std::string reason) { return Decision{false, "", std::move(reason)}; }

Decision reject_not_allowed(std::string_view media_type) {
  return reject("media type " + std::string(media_type) + " is not allowed by the policy");
}

bool is_allowed(std::string_view media_type, const std::vector<std::string>& allowed) {
  return std::any_of(allowed.begin(), allowed.end(), [&](const std::string& a) { return to_lower(a) == media_type; });
}

// Text and markup must be readable as UTF-8: the active-content scan and every
// consumer downstream read bytes as UTF-8, and a UTF-16 or Latin-1 document
// could carry markup that a byte scan does not see. A NUL truncates C strings
// and interleaves UTF-16, so it is refused too.
std::string text_content_problem(std::string_view bytes, const Sniffed& sniffed) {
  if (!util::is_valid_utf8(bytes)) return "content is not valid UTF-8 (" + short_description(sniffed.description) + ")";
  if (size_t nul = bytes.find('\0'); nul != std::string_view::npos)
    return "content has a NUL byte at offset " + std::to_string(nul);
  return "";
}

Decision check_content(std::string_view media_type, std::string_view origin, std::string_view bytes,
                       const Sniffed& sniffed) {
  Family family = family_of(media_type);
  std::string sniffed_mime = canonical_sniff(sniffed.mime);
  if (!sniff_agrees(family, media_type, sniffed_mime))
    return reject("declared " + std::string(media_type) + " " + std::string(origin) + " but content is " +
                  sniffed_mime + " (" + short_description(sniffed.description) + ")");
  if (family != Family::kExact) {
    if (std::string problem = text_content_problem(bytes, sniffed); !problem.empty())
      return reject(std::string(media_type) + " " + problem);
  }
  return Decision{true, std::string(media_type), ""};
}

}  // namespace

struct Sniffer::Handle {
  std::mutex mutex;
  magic_t cookie = nullptr;
  ~Handle() {
    if (cookie != nullptr) magic_close(cookie);
  }
};

Sniffer::Sniffer(std::unique_ptr<Handle> handle) : handle_(std::move(handle)) {}
Sniffer::Sniffer(Sniffer&&) noexcept = default;
Sniffer& Sniffer::operator=(Sniffer&&) noexcept = default;
Sniffer::~Sniffer() = default;

util::Result<Sniffer> Sniffer::create(const std::string& database_path) {
  auto handle = std::make_unique<Handle>();
  // MAGIC_MIME_TYPE without MAGIC_COMPRESS: libmagic then never forks a
  // decompressor or looks inside archives.
  handle->cookie = magic_open(MAGIC_MIME_TYPE);
  if (handle->cookie == nullptr)
    return util::make_error(util::ErrorCode::kInternal, util::call_error("magic_open", "MAGIC_MIME_TYPE", errno));
  const char* path = database_path.empty() ? nullptr : database_path.c_str();
  if (magic_load(handle->cookie, path) != 0) {
    const char* why = magic_error(handle->cookie);
    return util::make_error(util::ErrorCode::kIo, "magic_load(\"" +
                                                      (database_path.empty() ? std::string("default") : database_path) +
                                                      "\"): " + (why != nullptr ? why : "unknown error"));
  }
  return Sniffer(std::move(handle));
}

Sniffed Sniffer::sniff(std::string_view bytes) const {
  if (handle_ == nullptr) return Sniffed{"", "sniffer has no libmagic handle (moved from)"};
  bytes = bytes.substr(0, kSniffMaxBytes);
  // magic_buffer must not see a null pointer, even for zero bytes.
  const void* data = bytes.empty() ? static_cast<const void*>("") : bytes.data();

  std::lock_guard<std::mutex> lock(handle_->mutex);
  auto run = [&](int flags) -> std::pair<bool, std::string> {
    if (magic_setflags(handle_->cookie, flags) != 0) return {false, "magic_setflags failed"};
    // libmagic reuses the returned buffer on the next call: copy it now.
    const char* out = magic_buffer(handle_->cookie, data, bytes.size());
    if (out == nullptr) {
      const char* why = magic_error(handle_->cookie);
      return {false, std::string("magic_buffer: ") + (why != nullptr ? why : "unknown error")};
    }
    return {true, out};
  };
  auto [mime_ok, mime] = run(MAGIC_MIME_TYPE);
  if (!mime_ok) return Sniffed{"", mime};
  auto [description_ok, description] = run(MAGIC_NONE);
  if (!description_ok) description.clear();
  return Sniffed{std::move(mime), std::move(description)};
}

std::string media_type_for_extension(std::string_view file_name) {
  std::string_view base = file_name;
  if (size_t slash = base.rfind('/'); slash != std::string_view::npos) base = base.substr(slash + 1);
  size_t dot = base.rfind('.');
  // ".txt" is a hidden file with no extension, as in POSIX shells.
  if (dot == std::string_view::npos || dot == 0) return "";
  std::string extension = to_lower(base.substr(dot + 1));
  for (const ExtensionType& e : kExtensionTypes)
    if (e.extension == extension) return std::string(e.media_type);
  return "";
}

Decision decide(std::string_view file_name, std::string_view bytes, const Sniffer& sniffer,
                const std::vector<std::string>& allowed_media_types) {
  std::string declared = media_type_for_extension(file_name);
  if (!declared.empty() && !is_allowed(declared, allowed_media_types)) return reject_not_allowed(declared);

  Sniffed sniffed = sniffer.sniff(bytes);
  if (sniffed.mime.empty()) return reject("content could not be identified: " + short_description(sniffed.description));

  if (!declared.empty()) return check_content(declared, "by extension", bytes, sniffed);

  // No known extension: the content names the type, and the policy must allow it.
  std::string from_content = to_lower(canonical_sniff(sniffed.mime));
  if (!is_allowed(from_content, allowed_media_types))
    return reject("media type " + from_content +
                  " is not allowed by the policy (sniffed from content; the extension is unknown)");
  return check_content(from_content, "by content", bytes, sniffed);
}

}  // namespace artifacts::types
