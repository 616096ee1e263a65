// The run view: an MCP Apps (io.modelcontextprotocol/ui) HTML resource that
// hosts render beside a run_code result. Offered only to clients that declare
// the extension with its HTML profile; others get exactly the plain result.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace protocol::view {

inline constexpr const char* kExtension = "io.modelcontextprotocol/ui";
inline constexpr const char* kMimeType = "text/html;profile=mcp-app";
inline constexpr const char* kRunViewUri = "ui://throwbox/run-view";

// Whether a ClientCapabilities object declares the extension and lists the
// HTML profile among its mimeTypes.
bool client_supports(const nlohmann::json& capabilities);

// The page, with its CSP's script and style hashes and the server's receipt
// key (`receipt_key`: Broker::receipt_key(), {key_id, public_key_pem}) filled
// in. Any other page text is as built.
std::string run_view_html(const nlohmann::json& receipt_key);

// The resources/read contents item, and the resources/list entry.
nlohmann::json run_view_contents(const nlohmann::json& receipt_key);
nlohmann::json run_view_listing();

// A tool definition as listed to a client with the extension: run_code's
// gets _meta.ui.resourceUri; others are returned as they are.
nlohmann::json with_view(nlohmann::json tool_definition);

}  // namespace protocol::view
