// An image's digest: "sha256:<64 lowercase hex>", the only algorithm taken.
#pragma once
#include <string>
#include <string_view>

#include "server/util/result.h"

namespace image {

struct Digest {
  std::string hex;
  std::string str() const { return "sha256:" + hex; }
};
util::Result<Digest> parse_digest(std::string_view text);

}  // namespace image
