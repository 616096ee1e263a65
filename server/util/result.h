// Result<T>: a value or an Error{code, message}. Used by every fallible function;
// expected failures are values, not exceptions. The code is
// an enum inside the server; its string form is for the JSON/HTTP boundary.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace util {

enum class ErrorCode {
  kInternal,         // a broker fault (the default)
  kInvalidArgument,  // the request is wrong; its message names the field
  kNotFound,         // unknown, expired or another tenant's id
  kConflict,         // an idempotency key already bound to a different request
  kBusy,             // admission or task limits: retry later (retry_after_s when known)
  kCancelled,        // the caller cancelled
  kTooLarge,         // over a byte cap
  kIo,               // a file or directory call failed
  kPolicy,           // the policy file is invalid
  kSandbox,          // a sandbox step failed (the job is sandbox_error)
  kSpec,             // a launch spec or claim line could not be read
  kAuth,             // tokens and tenants
  kHttp,             // the HTTP transport's set-up
  kOutcome,          // a runner's outcome line could not be read
  kUnavailable,      // this server takes no new job now (its ledger's database does not
                     // answer, it is draining): retry later or through another server
};

// "invalid_argument", "not_found", ...: the stable machine-readable names.
constexpr std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInternal:
      return "internal";
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kConflict:
      return "conflict";
    case ErrorCode::kBusy:
      return "busy";
    case ErrorCode::kCancelled:
      return "cancelled";
    case ErrorCode::kTooLarge:
      return "too_large";
    case ErrorCode::kIo:
      return "io";
    case ErrorCode::kPolicy:
      return "policy";
    case ErrorCode::kSandbox:
      return "sandbox";
    case ErrorCode::kSpec:
      return "spec";
    case ErrorCode::kAuth:
      return "auth";
    case ErrorCode::kHttp:
      return "http";
    case ErrorCode::kOutcome:
      return "outcome";
    case ErrorCode::kUnavailable:
      return "unavailable";
  }
  return "internal";
}

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;                    // human text; names the call, its argument and errno
  std::optional<uint64_t> retry_after_s;  // kBusy, kUnavailable: when a retry may succeed, when known
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT(implicit)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(implicit)
  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  T& value() { return std::get<T>(v_); }
  const T& value() const { return std::get<T>(v_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }
  const Error& error() const { return std::get<Error>(v_); }

 private:
  std::variant<T, Error> v_;
};

struct Unit {};
using Status = Result<Unit>;
inline Status ok_status() { return Unit{}; }

inline Error make_error(ErrorCode code, std::string message) { return Error{code, std::move(message), std::nullopt}; }
inline Error busy_error(std::string message, std::optional<uint64_t> retry_after_s) {
  return Error{ErrorCode::kBusy, std::move(message), retry_after_s};
}
inline Error unavailable_error(std::string message, uint64_t retry_after_s) {
  return Error{ErrorCode::kUnavailable, std::move(message), retry_after_s};
}

}  // namespace util
