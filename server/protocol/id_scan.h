// The top-level "id" of a JSON-RPC message read as its bytes stream by, for a
// message too large to keep (stdio's over-cap line, an over-cap HTTP body), so
// its error answer can name the request. O(1) memory; pure; any thread.
#pragma once
#include <bitset>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace protocol::id_scan {

// The longest id string kept, in bytes as written between its quotes.
constexpr size_t kIdMaxBytes = 256;
// Nesting followed inside skipped values; deeper is a doubt (json_max_depth is at most 256).
constexpr size_t kDepthMax = 256;

class IdScanner {
 public:
  // The next bytes of the message, in any chunking: the same id comes out.
  void feed(std::string_view bytes);
  // The id once the message has ended: a string or an integer, checked by
  // nlohmann's parser. Null on any doubt: not one object (a batch, a scalar,
  // bytes after it), no "id" or two, a top-level key with an escape, an id of
  // another type or over kIdMaxBytes, unbalanced brackets or an unclosed string.
  nlohmann::json finish() const;
  void reset() { *this = IdScanner(); }

 private:
  enum class State {
    kStart,     // before the top-level '{'
    kKeyOrEnd,  // after '{' or ','
    kKey,       // inside a top-level key
    kColon,
    kValue,       // before a top-level member's value
    kIdString,    // inside the id string, kept
    kIdScalar,    // inside an id number or literal, kept
    kSkipScalar,  // inside another member's number or literal
    kSkip,        // inside another member's string, object or array
    kCommaOrEnd,
    kAfter,  // after the top-level '}': whitespace only
    kFailed,
  };
  void step(char c);

  State state_ = State::kStart;
  bool after_comma_ = false;
  // The key being read: how many bytes, and whether they are so far "id".
  size_t key_len_ = 0;
  bool key_is_id_ = true;
  bool value_is_id_ = false;
  bool seen_id_ = false;
  std::string token_;  // the id's raw text, at most kIdMaxBytes + 2
  bool escaped_ = false;
  bool in_string_ = false;
  size_t depth_ = 0;                 // open brackets inside a skipped value
  std::bitset<kDepthMax> is_array_;  // which of them are '['
};

}  // namespace protocol::id_scan
