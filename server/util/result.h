// Result<T>: a value or an Error{code, message}. Used by every fallible function;
// expected failures are values, not exceptions (STYLE.md, Errors).
#pragma once
#include <string>
#include <utility>
#include <variant>

namespace util {

struct Error {
  std::string code;     // stable, machine-readable: "invalid_argument", "not_found", ...
  std::string message;  // human text; names the call, its argument and errno
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}            // NOLINT(implicit)
  Result(Error error) : v_(std::move(error)) {}        // NOLINT(implicit)
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

inline Error make_error(std::string code, std::string message) {
  return Error{std::move(code), std::move(message)};
}

}  // namespace util
