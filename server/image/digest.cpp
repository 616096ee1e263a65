// Image digests (digest.h).
#include "server/image/digest.h"

#include "server/util/text.h"

namespace image {

util::Result<Digest> parse_digest(std::string_view text) {
  constexpr std::string_view kPrefix = "sha256:";
  auto refused = [&] {
    return util::make_error(util::ErrorCode::kInvalidArgument, "digest \"" + util::to_valid_utf8(std::string(text)) +
                                                                   "\": want sha256:<64 lowercase hex digits>");
  };
  if (text.substr(0, kPrefix.size()) != kPrefix || text.size() != kPrefix.size() + 64) return refused();
  std::string hex(text.substr(kPrefix.size()));
  for (char c : hex)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return refused();
  return Digest{hex};
}

}  // namespace image
