// The run view (run_view.h). The page itself is server/protocol/run_view.html.
#include "server/protocol/run_view.h"

#include <cctype>
#include <stdexcept>

#include "server/util/base64.h"
#include "server/util/crypto.h"

namespace protocol::view {

extern const char kRunViewHtml[];

namespace {

using nlohmann::json;

void replace_once(std::string& text, const std::string& what, const std::string& with) {
  const size_t at = text.find(what);
  if (at == std::string::npos) throw std::logic_error("run view: no " + what + " in the page");
  text.replace(at, what.size(), with);
}

// The text of the first element that starts with `open`: from the end of
// that tag to the next `close`.
std::string element_text(const std::string& page, const std::string& open, const std::string& close) {
  const size_t tag = page.find(open);
  if (tag == std::string::npos) throw std::logic_error("run view: no " + open + " in the page");
  const size_t begin = page.find('>', tag) + 1;
  const size_t end = page.find(close, begin);
  if (end == std::string::npos) throw std::logic_error("run view: no " + close + " after " + open);
  return page.substr(begin, end - begin);
}

// A PEM's base64 body (the key's DER), or "" when it is not one.
std::string pem_body(const std::string& pem) {
  std::string body;
  size_t pos = 0;
  while (pos < pem.size()) {
    size_t eol = pem.find('\n', pos);
    if (eol == std::string::npos) eol = pem.size();
    std::string line = pem.substr(pos, eol - pos);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("-----", 0) != 0) body += line;
    pos = eol + 1;
  }
  for (char c : body)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/' || c == '=')) return "";
  return body;
}

std::string csp_hash(const std::string& text) { return util::base64_encode(util::sha256_bytes(text)); }

}  // namespace

bool client_supports(const json& caps) {
  if (!caps.is_object()) return false;
  auto ext = caps.find("extensions");
  if (ext == caps.end() || !ext->is_object()) return false;
  auto ui = ext->find(kExtension);
  if (ui == ext->end() || !ui->is_object()) return false;
  auto types = ui->find("mimeTypes");
  if (types == ui->end() || !types->is_array()) return false;
  for (const json& t : *types)
    if (t.is_string() && t.get<std::string>() == kMimeType) return true;
  return false;
}

std::string run_view_html(const json& receipt_key) {
  std::string page = kRunViewHtml;
  // The key as a JSON data block (never run): hex and base64 only.
  json key = nullptr;
  if (receipt_key.is_object() && receipt_key.value("key_id", "") != "") {
    const std::string spki = pem_body(receipt_key.value("public_key_pem", ""));
    if (!spki.empty()) key = {{"key_id", receipt_key.value("key_id", "")}, {"spki", spki}};
  }
  replace_once(page, "@RECEIPT_KEY@", key.dump());
  // The CSP names the one script and the one style by their hashes (the
  // data block is not run, so it needs none); the hashes are of the text as
  // served.
  const std::string script = element_text(page, "<script>", "</script>");
  const std::string style = element_text(page, "<style>", "</style>");
  replace_once(page, "@SCRIPT_SHA256@", csp_hash(script));
  replace_once(page, "@STYLE_SHA256@", csp_hash(style));
  return page;
}

json run_view_contents(const json& receipt_key) {
  return {{"uri", kRunViewUri},
          {"mimeType", kMimeType},
          {"text", run_view_html(receipt_key)},
          // No network and no outside resource: the host's CSP is its default.
          {"_meta",
           {{"ui",
             {{"csp", {{"connectDomains", json::array()}, {"resourceDomains", json::array()}}},
              {"prefersBorder", true}}}}}};
}

json run_view_listing() {
  return {{"uri", kRunViewUri},
          {"name", "run view"},
          {"title", "throwbox run"},
          {"mimeType", kMimeType},
          {"description",
           "A view of one run_code result: status, time and memory against the limits, output, artifacts with "
           "the gate's verdicts, checks, network connections and whether the receipt verifies"}};
}

json with_view(json tool_definition) {
  if (tool_definition.value("name", "") == "run_code") tool_definition["_meta"]["ui"] = {{"resourceUri", kRunViewUri}};
  return tool_definition;
}

}  // namespace protocol::view
