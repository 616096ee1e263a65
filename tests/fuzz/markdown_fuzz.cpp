// artifacts::markdown::scan on any bytes, with an independent second opinion:
// when scan finds nothing, cmark's own rendering (CMARK_OPT_UNSAFE keeps raw
// HTML) read by active::scan_markup finds nothing either. The renderer's own
// attribute values (link and image URLs, titles, alt text, code block info)
// are set to inert ones first: scan judged URLs on the tree, and
// scan_markup's quote-unaware reading would flag "https://x/javascript:guide"
// or a title mentioning onclick= inside renderer-written tags, which no
// browser runs. Also: a finding has a reason, valid UTF-8 for UTF-8 input,
// and the same bytes give the same finding.
#include <cmark.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/artifacts/active_content.h"
#include "server/artifacts/markdown.h"
#include "server/util/text.h"
#include "tests/fuzz/check.h"

namespace {

struct NodeFree {
  void operator()(cmark_node* node) const { cmark_node_free(node); }
};
struct IterFree {
  void operator()(cmark_iter* iter) const { cmark_iter_free(iter); }
};

// The tree cmark renders, with the renderer-written attribute values made
// inert: URLs "#", no titles, no image alt text, no code block info string.
std::string render_with_inert_attributes(std::string_view text) {
  std::unique_ptr<cmark_node, NodeFree> document(cmark_parse_document(text.data(), text.size(), CMARK_OPT_DEFAULT));
  FUZZ_CHECK(document != nullptr);
  std::vector<cmark_node*> images;  // emptied after the walk: the iterator must not lose its place
  {
    std::unique_ptr<cmark_iter, IterFree> iter(cmark_iter_new(document.get()));
    for (cmark_event_type event; (event = cmark_iter_next(iter.get())) != CMARK_EVENT_DONE;) {
      if (event != CMARK_EVENT_ENTER) continue;
      cmark_node* node = cmark_iter_get_node(iter.get());
      switch (cmark_node_get_type(node)) {
        case CMARK_NODE_LINK:
        case CMARK_NODE_IMAGE:
          FUZZ_CHECK(cmark_node_set_url(node, "#"));
          FUZZ_CHECK(cmark_node_set_title(node, ""));
          if (cmark_node_get_type(node) == CMARK_NODE_IMAGE) images.push_back(node);
          break;
        case CMARK_NODE_CODE_BLOCK:
          FUZZ_CHECK(cmark_node_set_fence_info(node, ""));
          break;
        default:
          break;
      }
    }
  }
  // Innermost first: an image's alt text may hold another image, freed with it.
  for (auto image = images.rbegin(); image != images.rend(); ++image)
    while (cmark_node* child = cmark_node_first_child(*image)) {
      cmark_node_unlink(child);
      cmark_node_free(child);
    }
  char* html = cmark_render_html(document.get(), CMARK_OPT_UNSAFE);
  FUZZ_CHECK(html != nullptr);
  std::string out(html);
  std::free(html);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  artifacts::active::Finding f = artifacts::markdown::scan(text);
  FUZZ_CHECK(f.active == !f.reason.empty());
  if (util::is_valid_utf8(text)) FUZZ_CHECK(util::is_valid_utf8(f.reason));
  artifacts::active::Finding g = artifacts::markdown::scan(text);
  FUZZ_CHECK(g.active == f.active && g.reason == f.reason);
  if (f.active) return 0;

  std::string html = render_with_inert_attributes(text);
  artifacts::active::Finding second = artifacts::active::scan_markup(html);
  if (second.active) {
    std::fprintf(stderr, "scan accepted what the rendered HTML shows as active: %s\n--- html ---\n%s\n",
                 second.reason.c_str(), html.c_str());
  }
  FUZZ_CHECK(!second.active);
  return 0;
}
