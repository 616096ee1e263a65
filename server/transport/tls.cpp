// TLS sessions for the intake, on OpenSSL directly: cpp-httplib's SSLServer
// runs the handshake and every read inside a worker, with only a per-read
// timeout, which is what the intake exists to avoid.
#include "server/transport/tls.h"

#include <fcntl.h>
#include <openssl/err.h>

#include <cerrno>

#include "server/util/text.h"

namespace transport::http {
namespace {

// OpenSSL's error queue, oldest first, as one line; the queue is emptied.
std::string openssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "no OpenSSL error recorded" : out;
}

}  // namespace

util::Result<std::shared_ptr<const TlsContext>> TlsContext::load(const std::string& cert, const std::string& key) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (!ctx) return util::make_error(util::ErrorCode::kHttp, "TLS: SSL_CTX_new: " + openssl_errors());
  std::shared_ptr<const TlsContext> owner(new TlsContext(ctx));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  // Non-blocking writes: a partial write is a success, and a retry may come
  // from another buffer address (the stream's caller owns the bytes).
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  const std::string what = "TLS: cannot use certificate " + cert + " with key " + key + ": ";
  if (SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1)
    return util::make_error(util::ErrorCode::kHttp, what + "the certificate: " + openssl_errors());
  if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1)
    return util::make_error(util::ErrorCode::kHttp, what + "the key: " + openssl_errors());
  if (SSL_CTX_check_private_key(ctx) != 1)
    return util::make_error(util::ErrorCode::kHttp,
                            what + "the key does not match the certificate (" + openssl_errors() + ")");
  return owner;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

std::unique_ptr<TlsChannel> TlsContext::accept(int fd) const {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return nullptr;
  ERR_clear_error();
  SSL* ssl = SSL_new(ctx_);
  if (!ssl) return nullptr;
  auto channel = std::make_unique<TlsChannel>(ssl);
  if (SSL_set_fd(ssl, fd) != 1) return nullptr;  // a socket BIO that does not close fd
  SSL_set_accept_state(ssl);
  return channel;
}

TlsChannel::~TlsChannel() { SSL_free(ssl_); }

TlsIo TlsChannel::status(int ret) {
  switch (SSL_get_error(ssl_, ret)) {
    case SSL_ERROR_WANT_READ:
      return TlsIo::kWantRead;
    case SSL_ERROR_WANT_WRITE:
      return TlsIo::kWantWrite;
    case SSL_ERROR_ZERO_RETURN:
      return TlsIo::kClosed;
    case SSL_ERROR_SYSCALL:
      if (ERR_peek_error() == 0 && (ret == 0 || errno == 0 || errno == ECONNRESET)) return TlsIo::kClosed;  // EOF
      last_error_ = ERR_peek_error() ? openssl_errors() : util::call_error("recv/send", "TLS socket", errno);
      return TlsIo::kFailed;
    case SSL_ERROR_SSL:
    default:
      // A client that closes without close_notify is EOF, not a protocol error.
      if (ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
        ERR_clear_error();
        return TlsIo::kClosed;
      }
      last_error_ = openssl_errors();
      return TlsIo::kFailed;
  }
}

TlsIo TlsChannel::handshake() {
  if (established_) return TlsIo::kOk;
  ERR_clear_error();  // the queue is per thread, and this channel moves between threads
  errno = 0;
  const int r = SSL_do_handshake(ssl_);
  if (r == 1) {
    established_ = true;
    return TlsIo::kOk;
  }
  return status(r);
}

TlsIo TlsChannel::read(char* buf, size_t size, size_t* n) {
  ERR_clear_error();
  errno = 0;
  size_t got = 0;
  if (SSL_read_ex(ssl_, buf, size, &got) == 1) {
    *n = got;
    return TlsIo::kOk;
  }
  return status(0);
}

TlsIo TlsChannel::write(const char* buf, size_t size, size_t* n) {
  ERR_clear_error();
  errno = 0;
  size_t put = 0;
  if (SSL_write_ex(ssl_, buf, size, &put) == 1) {
    *n = put;
    return TlsIo::kOk;
  }
  return status(0);
}

bool TlsChannel::pending() const { return SSL_pending(ssl_) > 0; }

void TlsChannel::close_notify() {
  if (!established_ || notified_) return;
  notified_ = true;
  ERR_clear_error();
  (void)SSL_shutdown(ssl_);  // non-blocking socket: sent if it fits, never waited for
  ERR_clear_error();
}

}  // namespace transport::http
