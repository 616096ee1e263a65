// What the server and its parser helper say to each other: one message a
// request or an answer, over a stream socket: a fixed header (kind, the
// lengths), a JSON document, then raw bytes (a file's content, a request
// head). Both sides check every length before reading: the server never
// trusts what a helper (which parses hostile bytes) says.
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/util/result.h"

namespace helper {

// Who the helper becomes: as root, a uid and gid of its own; as a normal
// user, its own ids in a user namespace (as_root false).
struct Identity {
  bool as_root = false;
  uid_t uid = 0;
  gid_t gid = 0;
};

enum class Kind : uint32_t {
  kInspectArtifact = 1,  // meta: {name, policy}; bytes: the file -> {verdict, reason, media_type, named_as, changed}
  kUploadType = 2,       // meta: {name, allowed}; bytes: the upload -> {media_type}
  kRequestHead = 3,      // bytes: a proxy request head -> network::Head as JSON
  kProbe = 4,            // -> {open, socket, kill, fork, exec}: what each attempt got (errno names); for doctor
  // meta: {authority, credential_header}; bytes: a request head inside an
  // intercepted connection -> network::InnerRequest as JSON, bytes: the head sent on
  kInnerRequest = 5,
  kAnswer = 100,
  kFailure = 101,  // meta: {error}: the helper could not answer
};

struct Message {
  Kind kind = Kind::kFailure;
  nlohmann::json meta = nlohmann::json::object();
  std::string bytes;
};

// A child's bounds: its address space and CPU seconds (it is killed past
// them), and the most bytes one request may carry (a file at the policy's
// largest, a request head).
constexpr uint64_t kChildAddressSpaceBytes = uint64_t{1} << 30;
constexpr uint64_t kChildCpuSeconds = 30;
constexpr uint64_t kRequestBytesMax = uint64_t{256} << 20;

// The header on the wire: kind, then the JSON's and the bytes' lengths.
constexpr size_t kHeaderBytes = 4 + 4 + 8;
constexpr size_t kMetaMaxBytes = 1 << 20;  // far above any meta document

std::string encode(const Message& m);
// The lengths a header announces, checked against the caps; nullopt when it
// is malformed (an unknown kind, a length over a cap).
struct Header {
  Kind kind;
  uint32_t meta_bytes;
  uint64_t bytes;
};
std::optional<Header> decode_header(std::string_view header, uint64_t bytes_max);
// The message a header announced, from the meta and bytes that followed it;
// an error when the meta is not a JSON object.
util::Result<Message> decode_body(const Header& h, std::string_view meta, std::string bytes);

// Blocking, on a socket of one's own: the whole message, or an error naming
// the call. read_message waits until deadline_ms (CLOCK_MONOTONIC; 0: no
// deadline) and refuses bytes over bytes_max.
util::Status write_message(int fd, const Message& m);
util::Result<Message> read_message(int fd, int64_t deadline_ms, uint64_t bytes_max);

}  // namespace helper
