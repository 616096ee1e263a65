// A byte-at-a-time reader of one JSON object's top-level "id" member. Only the
// top level is parsed; other values are skipped by strings and brackets alone,
// so an "id" inside params or inside a string never counts.
#include "server/protocol/id_scan.h"

namespace protocol::id_scan {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
// The bytes a JSON number or literal (true, false, null) is made of.
bool is_scalar_byte(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '+' || c == '.';
}

}  // namespace

void IdScanner::feed(std::string_view bytes) {
  for (char c : bytes) {
    if (state_ == State::kFailed) return;
    step(c);
  }
}

void IdScanner::step(char c) {
  switch (state_) {
    case State::kStart:
      if (is_space(c)) return;
      state_ = c == '{' ? State::kKeyOrEnd : State::kFailed;  // a batch or a scalar names no single request
      return;
    case State::kKeyOrEnd:
      if (is_space(c)) return;
      if (c == '"') {
        state_ = State::kKey;
        key_len_ = 0;
        key_is_id_ = true;
      } else if (c == '}' && !after_comma_) {
        state_ = State::kAfter;
      } else {
        state_ = State::kFailed;
      }
      return;
    case State::kKey:
      if (c == '"') {
        value_is_id_ = key_is_id_ && key_len_ == 2;
        state_ = State::kColon;
      } else if (c == '\\' || static_cast<unsigned char>(c) < 0x20) {
        // "\u0069d" is "id" too: a key with an escape is a doubt, not a guess.
        state_ = State::kFailed;
      } else {
        if (key_len_ >= 2 || c != "id"[key_len_]) key_is_id_ = false;
        ++key_len_;
      }
      return;
    case State::kColon:
      if (is_space(c)) return;
      state_ = c == ':' ? State::kValue : State::kFailed;
      return;
    case State::kValue:
      if (is_space(c)) return;
      if (value_is_id_) {
        // Two ids: which one a parser keeps is its choice, so neither is answered.
        if (seen_id_ || !(c == '"' || c == '-' || is_scalar_byte(c))) {
          state_ = State::kFailed;
          return;
        }
        seen_id_ = true;
        token_.assign(1, c);
        escaped_ = false;
        state_ = c == '"' ? State::kIdString : State::kIdScalar;
      } else if (c == '"') {
        in_string_ = true;
        escaped_ = false;
        depth_ = 0;
        state_ = State::kSkip;
      } else if (c == '{' || c == '[') {
        in_string_ = false;
        depth_ = 1;
        is_array_[0] = c == '[';
        state_ = State::kSkip;
      } else {
        state_ = is_scalar_byte(c) ? State::kSkipScalar : State::kFailed;
      }
      return;
    case State::kIdString:
      if (token_.size() >= kIdMaxBytes + 2) {
        state_ = State::kFailed;
        return;
      }
      token_ += c;
      if (escaped_)
        escaped_ = false;
      else if (c == '\\')
        escaped_ = true;
      else if (c == '"')
        state_ = State::kCommaOrEnd;
      return;
    case State::kIdScalar:
      if (is_scalar_byte(c)) {
        if (token_.size() >= kIdMaxBytes)
          state_ = State::kFailed;
        else
          token_ += c;
        return;
      }
      state_ = State::kCommaOrEnd;
      step(c);
      return;
    case State::kSkipScalar:
      if (is_scalar_byte(c)) return;
      state_ = State::kCommaOrEnd;
      step(c);
      return;
    case State::kSkip:
      if (in_string_) {
        if (escaped_)
          escaped_ = false;
        else if (c == '\\')
          escaped_ = true;
        else if (c == '"')
          in_string_ = false;
        else
          return;
        if (!in_string_ && depth_ == 0) state_ = State::kCommaOrEnd;
        return;
      }
      if (c == '"') {
        in_string_ = true;
        escaped_ = false;
      } else if (c == '{' || c == '[') {
        if (depth_ >= kDepthMax) {
          state_ = State::kFailed;
          return;
        }
        is_array_[depth_++] = c == '[';
      } else if (c == '}' || c == ']') {
        if (is_array_[depth_ - 1] != (c == ']')) {
          state_ = State::kFailed;
          return;
        }
        if (--depth_ == 0) state_ = State::kCommaOrEnd;
      }
      return;
    case State::kCommaOrEnd:
      if (is_space(c)) return;
      if (c == ',') {
        after_comma_ = true;
        state_ = State::kKeyOrEnd;
      } else {
        state_ = c == '}' ? State::kAfter : State::kFailed;
      }
      return;
    case State::kAfter:
      if (!is_space(c)) state_ = State::kFailed;
      return;
    case State::kFailed:
      return;
  }
}

nlohmann::json IdScanner::finish() const {
  if (state_ != State::kAfter || !seen_id_) return nullptr;
  nlohmann::json id = nlohmann::json::parse(token_, nullptr, /*allow_exceptions=*/false);
  if (id.is_string() || id.is_number_integer()) return id;
  return nullptr;
}

}  // namespace protocol::id_scan
