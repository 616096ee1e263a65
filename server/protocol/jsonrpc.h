// JSON-RPC 2.0 envelopes: parse one framed message with size and depth caps
// checked before any value is built; build responses. Pure; any server thread.
#pragma once
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace protocol::jsonrpc {

using nlohmann::json;

constexpr int kParseError = -32700;
constexpr int kInvalidRequest = -32600;
constexpr int kMethodNotFound = -32601;
constexpr int kInvalidParams = -32602;
constexpr int kInternalError = -32603;

struct Limits {
  size_t max_message_bytes = 4 * 1024 * 1024;
  int max_depth = 64;
};

struct Message {
  enum class Kind { kRequest, kNotification, kResponse };
  Kind kind = Kind::kRequest;
  json id;             // string or integer for requests and responses
  std::string method;  // requests and notifications
  json params;         // object, array or null (absent)
  json body;           // the whole envelope (responses keep result/error here)
};

// A message that could not be accepted; `id` is null unless it could be read.
struct Failure {
  int code;
  std::string message;
  json id;
};

using Item = std::variant<Message, Failure>;

struct Parsed {
  bool is_batch = false;
  std::vector<Item> items;  // one for a single message
  // A failure of the whole line (not JSON, too deep, too big, empty batch).
  bool whole_line_failed = false;
};

// Deepest nesting of arrays/objects in text, stopping early past `limit`.
int nesting_depth(std::string_view text, int limit);

// A line over limits.max_message_bytes fails whole, answered with its
// top-level id where protocol::id_scan reads one.
Parsed parse_line(std::string_view line, const Limits& limits);
// The -32600 text for a message of `bytes` over the cap, in every transport.
std::string oversized_message(size_t bytes, size_t max_bytes);
Item classify(const json& envelope);

json make_result(const json& id, json result);
json make_error(const json& id, int code, std::string_view message, const json& data = nullptr);
json make_notification(std::string_view method, json params);

}  // namespace protocol::jsonrpc
