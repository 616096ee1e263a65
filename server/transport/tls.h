// TLS for the HTTP intake: the server's certificate and key (TlsContext) and
// one connection's session over a non-blocking socket (TlsChannel). The
// handshake and a request's bytes are read on the intake's thread, as plain
// HTTP's are, so a slow TLS client holds no worker either. A channel is used
// by one thread at a time: the intake's while the connection waits, a
// worker's while it is served.
#pragma once
#include <openssl/ssl.h>

#include <cstddef>
#include <memory>
#include <string>

#include "server/util/result.h"

namespace transport::http {

class TlsChannel;

class TlsContext {
 public:
  // cert: a PEM chain, the server's certificate first; key: its PEM private
  // key. TLS 1.2 or newer, no renegotiation, no compression.
  static util::Result<std::shared_ptr<const TlsContext>> load(const std::string& cert, const std::string& key);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;
  // A server-side session on fd, which becomes non-blocking; null when
  // OpenSSL cannot make one (out of memory).
  std::unique_ptr<TlsChannel> accept(int fd) const;

 private:
  explicit TlsContext(SSL_CTX* ctx) : ctx_(ctx) {}
  SSL_CTX* ctx_;
};

enum class TlsIo {
  kOk,         // done (read/write: *n bytes)
  kWantRead,   // nothing more without blocking: wait until the socket is readable
  kWantWrite,  // wait until the socket is writable
  kClosed,     // the peer ended the session (close_notify or EOF)
  kFailed,     // a protocol or socket error: the connection is over
};

class TlsChannel {
 public:
  explicit TlsChannel(SSL* ssl) : ssl_(ssl) {}
  ~TlsChannel();  // frees the session; the socket stays open (its owner closes it)
  TlsChannel(const TlsChannel&) = delete;
  TlsChannel& operator=(const TlsChannel&) = delete;

  TlsIo handshake();
  bool established() const { return established_; }
  // At most size decrypted bytes into buf (*n when kOk).
  TlsIo read(char* buf, size_t size, size_t* n);
  // Some of buf, *n bytes when kOk; after kWantRead/kWantWrite call again with the same bytes.
  TlsIo write(const char* buf, size_t size, size_t* n);
  bool pending() const;  // decrypted bytes held inside OpenSSL, which no poll() shows
  // Sends close_notify once (without blocking, best effort) if the handshake finished.
  void close_notify();
  // Why the last kFailed happened, for a log line.
  const std::string& last_error() const { return last_error_; }

 private:
  TlsIo status(int ret);
  SSL* ssl_;
  bool established_ = false;
  bool notified_ = false;
  std::string last_error_;
};

}  // namespace transport::http
