// The helper's message framing (wire.h). Little-endian lengths, as the one
// host both ends run on writes them.
#include "server/helper/wire.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "server/util/clock.h"
#include "server/util/fd.h"
#include "server/util/text.h"

namespace helper {
namespace {

bool known(uint32_t kind) {
  switch (static_cast<Kind>(kind)) {
    case Kind::kInspectArtifact:
    case Kind::kUploadType:
    case Kind::kRequestHead:
    case Kind::kProbe:
    case Kind::kInnerRequest:
    case Kind::kAnswer:
    case Kind::kFailure:
      return true;
  }
  return false;
}

// Exactly n bytes by the deadline, or why not.
util::Status read_exactly(int fd, char* out, size_t n, int64_t deadline_ms) {
  size_t got = 0;
  while (got < n) {
    if (deadline_ms > 0) {
      const int64_t left = deadline_ms - util::now_ms();
      if (left <= 0) return util::make_error(util::ErrorCode::kIo, "no answer in time");
      pollfd p{fd, POLLIN, 0};
      const int r = ::poll(&p, 1, static_cast<int>(left));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return util::make_error(util::ErrorCode::kIo, util::call_error("poll", "helper", errno));
      if (r == 0) return util::make_error(util::ErrorCode::kIo, "no answer in time");
    }
    const ssize_t k = ::read(fd, out + got, n - got);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return util::make_error(util::ErrorCode::kIo, util::call_error("read", "helper", errno));
    if (k == 0) return util::make_error(util::ErrorCode::kIo, "the helper closed the connection");
    got += static_cast<size_t>(k);
  }
  return util::ok_status();
}

}  // namespace

std::string encode(const Message& m) {
  // Invalid UTF-8 in a string (a job's bytes quoted in a reason) is replaced, never thrown on.
  const std::string meta = m.meta.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out(kHeaderBytes, '\0');
  const uint32_t kind = static_cast<uint32_t>(m.kind);
  const uint32_t meta_bytes = static_cast<uint32_t>(meta.size());
  const uint64_t bytes = m.bytes.size();
  std::memcpy(out.data(), &kind, 4);
  std::memcpy(out.data() + 4, &meta_bytes, 4);
  std::memcpy(out.data() + 8, &bytes, 8);
  out += meta;
  out += m.bytes;
  return out;
}

std::optional<Header> decode_header(std::string_view header, uint64_t bytes_max) {
  if (header.size() != kHeaderBytes) return std::nullopt;
  Header h{};
  uint32_t kind = 0;
  std::memcpy(&kind, header.data(), 4);
  std::memcpy(&h.meta_bytes, header.data() + 4, 4);
  std::memcpy(&h.bytes, header.data() + 8, 8);
  if (!known(kind) || h.meta_bytes > kMetaMaxBytes || h.bytes > bytes_max) return std::nullopt;
  h.kind = static_cast<Kind>(kind);
  return h;
}

util::Result<Message> decode_body(const Header& h, std::string_view meta, std::string bytes) {
  Message m;
  m.kind = h.kind;
  m.meta = nlohmann::json::parse(meta, nullptr, /*allow_exceptions=*/false);
  if (m.meta.is_discarded() || !m.meta.is_object())
    return util::make_error(util::ErrorCode::kIo, "a helper message whose meta is not a JSON object");
  m.bytes = std::move(bytes);
  return m;
}

util::Status write_message(int fd, const Message& m) {
  const std::string wire = encode(m);
  size_t sent = 0;
  while (sent < wire.size()) {
    const ssize_t k = ::send(fd, wire.data() + sent, wire.size() - sent, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return util::make_error(util::ErrorCode::kIo, util::call_error("send", "helper", errno));
    sent += static_cast<size_t>(k);
  }
  return util::ok_status();
}

util::Result<Message> read_message(int fd, int64_t deadline_ms, uint64_t bytes_max) {
  char raw[kHeaderBytes];
  if (auto s = read_exactly(fd, raw, sizeof raw, deadline_ms); !s) return s.error();
  auto h = decode_header(std::string_view(raw, sizeof raw), bytes_max);
  if (!h) return util::make_error(util::ErrorCode::kIo, "a malformed helper message header");
  std::string meta(h->meta_bytes, '\0');
  if (auto s = read_exactly(fd, meta.data(), meta.size(), deadline_ms); !s) return s.error();
  std::string bytes(h->bytes, '\0');
  if (auto s = read_exactly(fd, bytes.data(), bytes.size(), deadline_ms); !s) return s.error();
  return decode_body(*h, meta, std::move(bytes));
}

}  // namespace helper
