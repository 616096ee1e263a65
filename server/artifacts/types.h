// Media types of artifacts: the type a file name declares, the type libmagic
// sniffs from the bytes, and whether the two agree. Runs in server threads on
// untrusted bytes; never executes, decompresses or trusts them. Active content
// inside HTML/SVG is artifacts::active's job, not this file's.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/util/result.h"

namespace artifacts::types {

// libmagic sees at most this prefix: bounds its CPU time on hostile input.
inline constexpr size_t kSniffMaxBytes = size_t{1} << 20;

struct Sniffed {
  std::string mime;         // "image/png"; empty when libmagic failed
  std::string description;  // "PNG image data, 1 x 1, ..." or libmagic's error
};

// One libmagic handle, loaded once. A magic_t is not thread-safe, so sniff()
// holds a mutex; calls from several server threads are serialised.
class Sniffer {
 public:
  // Loads database_path (colon-separated list), or the system default if empty.
  static util::Result<Sniffer> create(const std::string& database_path = {});
  Sniffer(Sniffer&&) noexcept;
  Sniffer& operator=(Sniffer&&) noexcept;
  ~Sniffer();

  Sniffed sniff(std::string_view bytes) const;

 private:
  struct Handle;
  explicit Sniffer(std::unique_ptr<Handle> handle);
  std::unique_ptr<Handle> handle_;
};

// By the lowercased extension of the last path component; "" when unknown.
std::string media_type_for_extension(std::string_view file_name);

struct Decision {
  bool ok = false;
  std::string media_type;  // the type to serve with; empty when !ok
  std::string reason;      // why not; empty when ok
};

// The declared type (by extension) must be in allowed_media_types and agree
// with libmagic: text types accept any text/* or JSON sniff; HTML, XHTML and
// SVG accept an HTML, XML, SVG or plain-text sniff; PNG, JPEG, GIF and PDF need
// the same type. With an unknown extension the sniffed type must be allowed.
// Text and markup must also be UTF-8 without NUL bytes. Markup that passes
// still needs artifacts::active::scan_markup.
Decision decide(std::string_view file_name, std::string_view bytes, const Sniffer& sniffer,
                const std::vector<std::string>& allowed_media_types);

}  // namespace artifacts::types
