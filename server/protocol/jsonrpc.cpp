// JSON-RPC 2.0 envelope parsing with caps. Size is checked by the transport and
// again here; depth is scanned on the raw text so a deep value is never built
// (deep JSON overflows the stack in nlohmann's recursive copy and dump).
#include "server/protocol/jsonrpc.h"

#include "server/protocol/id_scan.h"

namespace protocol::jsonrpc {

int nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > deepest) deepest = depth;
        if (deepest > limit) return deepest;
        break;
      case ']':
      case '}':
        --depth;
        break;
      default:
        break;
    }
  }
  return deepest;
}

Item classify(const json& m) {
  if (!m.is_object()) return Failure{kInvalidRequest, "Invalid Request: a message must be a JSON object", nullptr};
  json id = nullptr;
  bool has_id = m.contains("id");
  if (has_id) {
    const json& raw = m["id"];
    if (raw.is_string() || raw.is_number_integer())
      id = raw;
    else
      return Failure{kInvalidRequest, "Invalid Request: id must be a string or an integer", nullptr};
  }
  auto jsonrpc = m.find("jsonrpc");
  if (jsonrpc == m.end() || *jsonrpc != "2.0")
    return Failure{kInvalidRequest, "Invalid Request: jsonrpc must be \"2.0\"", id};

  if (m.contains("method")) {
    if (!m["method"].is_string()) return Failure{kInvalidRequest, "Invalid Request: method must be a string", id};
    Message out;
    out.method = m["method"].get<std::string>();
    if (m.contains("params")) {
      const json& p = m["params"];
      // A well-formed envelope whose params are not structured: the method's
      // parameters are what is wrong, so -32602 (as MCP clients expect).
      if (!p.is_object() && !p.is_array())
        return Failure{kInvalidParams, "Invalid params: params must be an object", id};
      out.params = p;
    }
    if (m.contains("result") || m.contains("error"))
      return Failure{kInvalidRequest, "Invalid Request: a request cannot carry result or error", id};
    out.kind = has_id ? Message::Kind::kRequest : Message::Kind::kNotification;
    out.id = id;
    out.body = m;
    return out;
  }
  bool has_result = m.contains("result"), has_error = m.contains("error");
  if (has_id && has_result != has_error) {
    Message out;
    out.kind = Message::Kind::kResponse;
    out.id = id;
    out.body = m;
    return out;
  }
  return Failure{kInvalidRequest, "Invalid Request: missing method", id};
}

std::string oversized_message(size_t bytes, size_t max_bytes) {
  return "Invalid Request: message of " + std::to_string(bytes) + " bytes exceeds the cap of " +
         std::to_string(max_bytes) + " bytes (server.message_max_bytes)";
}

Parsed parse_line(std::string_view line, const Limits& limits) {
  Parsed out;
  auto whole = [&](int code, std::string msg) {
    out.whole_line_failed = true;
    out.items.push_back(Failure{code, std::move(msg), nullptr});
    return out;
  };
  if (line.size() > limits.max_message_bytes) {
    id_scan::IdScanner scan;
    scan.feed(line);
    whole(kInvalidRequest, oversized_message(line.size(), limits.max_message_bytes));
    std::get<Failure>(out.items.front()).id = scan.finish();
    return out;
  }
  if (nesting_depth(line, limits.max_depth) > limits.max_depth)
    return whole(kInvalidRequest,
                 "Invalid Request: JSON nesting deeper than " + std::to_string(limits.max_depth) + " levels");
  // No valid JSON text holds a raw NUL byte, and nlohmann's lexer ends the
  // input at one: `{...}\0anything` would parse as `{...}` here while another
  // reader sees more (a parser differential).
  if (line.find('\0') != std::string_view::npos) return whole(kParseError, "Parse error: not valid JSON (a NUL byte)");
  json doc = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return whole(kParseError, "Parse error: not valid JSON");
  if (doc.is_array()) {
    out.is_batch = true;
    if (doc.empty()) return whole(kInvalidRequest, "Invalid Request: empty batch");
    for (const json& m : doc) out.items.push_back(classify(m));
    return out;
  }
  out.items.push_back(classify(doc));
  return out;
}

json make_result(const json& id, json result) {
  return json{{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

json make_error(const json& id, int code, std::string_view message, const json& data) {
  json err{{"code", code}, {"message", message}};
  if (!data.is_null()) err["data"] = data;
  return json{{"jsonrpc", "2.0"}, {"id", id}, {"error", std::move(err)}};
}

json make_notification(std::string_view method, json params) {
  json n{{"jsonrpc", "2.0"}, {"method", method}};
  if (!params.is_null()) n["params"] = std::move(params);
  return n;
}

}  // namespace protocol::jsonrpc
