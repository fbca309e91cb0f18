#include "common/tls/tls_session.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <string>
#include <vector>

namespace tally::tls {
namespace {

std::string opensslError(const std::string& what) {
  unsigned long code = ERR_get_error();
  char text[256] = "unknown error";
  if (code != 0) ERR_error_string_n(code, text, sizeof(text));
  ERR_clear_error();
  return what + ": " + text;
}

void setNonBlocking(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

// OpenSSL writes to the socket with write(): a peer that went away would raise SIGPIPE, which
// kills a client application (or a test) that does not ignore it. SIGPIPE raised by a write is
// sent to the writing thread, so blocking it there for the scope and discarding what is pending
// keeps it away from the process.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &previous_);
  }
  ~SigpipeBlocked() {
    timespec now{0, 0};
    while (sigtimedwait(&pipe_, nullptr, &now) == SIGPIPE) {
    }
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_{};
  sigset_t previous_{};
};

// Waits until `fd` is ready for `events`, at most `timeoutMs`.
bool waitFor(int fd, short events, int64_t timeoutMs) {
  pollfd p{fd, events, 0};
  return ::poll(&p, 1, static_cast<int>(timeoutMs)) > 0;
}

// The full RFC 2253 form of `name` (most specific first, special characters escaped with a
// backslash), never truncated: a [[tenant]] tls_subject is compared with exactly this.
std::string rfc2253(X509_NAME* name) {
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio == nullptr) return {};
  std::string text;
  if (X509_NAME_print_ex(bio, name, 0, XN_FLAG_RFC2253) >= 0) {
    char* data = nullptr;
    long size = BIO_get_mem_data(bio, &data);
    if (size > 0) text.assign(data, static_cast<size_t>(size));
  }
  BIO_free(bio);
  return text;
}

std::string subjectOf(SSL* ssl) {
  X509* cert = SSL_get1_peer_certificate(ssl);
  if (cert == nullptr) return {};
  std::string subject = rfc2253(X509_get_subject_name(cert));
  X509_free(cert);
  return subject;
}

// Makes the handshake verify that the server's certificate names `name` (and sends it as SNI).
// A name OpenSSL cannot take must fail the connection, never leave it unchecked.
bool expectServerName(SSL* ssl, const std::string& name, std::string& error) {
  if (name.find('\0') != std::string::npos) {
    error = "TLS: the expected server name contains a NUL byte";
    return false;
  }
  if (SSL_set_tlsext_host_name(ssl, name.c_str()) != 1) {
    error = opensslError("TLS: cannot send server name '" + name + "'");
    return false;
  }
  if (SSL_set1_host(ssl, name.c_str()) != 1) {
    error = opensslError("TLS: cannot verify server name '" + name + "'");
    return false;
  }
  return true;
}

// The connection's records after the handshake: OpenSSL works on two memory BIOs, the caller's
// threads move their contents on the socket. One lock serializes OpenSSL between the reader and
// the writer (an SSL object is not safe for both at once).
class TlsRecords final : public frame::RecordLayer {
 public:
  explicit TlsRecords(SSL* ssl) : ssl_(ssl), in_(BIO_new(BIO_s_mem())), out_(BIO_new(BIO_s_mem())) {
    // An empty memory BIO means "more to come", never end of stream.
    BIO_set_mem_eof_return(in_, -1);
    BIO_set_mem_eof_return(out_, -1);
    SSL_set_bio(ssl_, in_, out_);  // frees the socket BIO of the handshake (which never closes the fd)
  }
  ~TlsRecords() override { SSL_free(ssl_); }
  TlsRecords(const TlsRecords&) = delete;
  TlsRecords& operator=(const TlsRecords&) = delete;

  bool seal(const void* plain, size_t size, std::vector<char>& wire, std::string& error) override {
    std::lock_guard lock(mutex_);
    const char* from = static_cast<const char*>(plain);
    for (size_t done = 0; done < size;) {
      int n = SSL_write(ssl_, from + done, static_cast<int>(std::min<size_t>(size - done, 1u << 30)));
      if (n <= 0) {
        error = opensslError("TLS: sealing records");
        return false;
      }
      done += static_cast<size_t>(n);
    }
    // Also whatever reading produced (a key update's answer): it leaves in order, before these.
    // Read out rather than reset: a memory BIO's reset clears its whole buffer first.
    const size_t pending = BIO_ctrl_pending(out_);
    const size_t at = wire.size();
    wire.resize(at + pending);
    if (pending > 0 && BIO_read(out_, wire.data() + at, static_cast<int>(pending)) != static_cast<int>(pending)) {
      error = opensslError("TLS: taking sealed records");
      return false;
    }
    return true;
  }

  bool absorb(const void* wire, size_t size, std::string& error) override {
    std::lock_guard lock(mutex_);
    if (BIO_write(in_, wire, static_cast<int>(size)) != static_cast<int>(size)) {
      error = opensslError("TLS: buffering received records");
      return false;
    }
    return true;
  }

  ssize_t open(void* plain, size_t size, std::string& error) override {
    std::lock_guard lock(mutex_);
    int n = SSL_read(ssl_, plain, static_cast<int>(std::min<size_t>(size, 1u << 30)));
    if (n > 0) return n;
    switch (SSL_get_error(ssl_, n)) {
      case SSL_ERROR_WANT_READ:
        return 0;
      case SSL_ERROR_ZERO_RETURN:
        closed_ = true;
        return -1;
      default:
        error = opensslError("TLS: a received record does not open");
        return -1;
    }
  }

  bool peerClosed() const override {
    std::lock_guard lock(mutex_);
    return closed_;
  }

  bool hasPlaintext() const override {
    std::lock_guard lock(mutex_);
    return SSL_pending(ssl_) > 0 || BIO_ctrl_pending(in_) > 0;
  }

 private:
  mutable std::mutex mutex_;
  SSL* ssl_;
  BIO* in_;
  BIO* out_;
  bool closed_ = false;
};

// TLS 1.3 only. AES-128-GCM first: as safe for this purpose and the fastest where AES-NI is
// there, which bounds bulk copies over TLS.
void restrictToTls13(SSL_CTX* ctx) {
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256");
}

}  // namespace

std::unique_ptr<Context> Context::forServer(const ServerConfig& config, std::string& error) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) {
    error = opensslError("SSL_CTX_new");
    return nullptr;
  }
  std::unique_ptr<Context> c(new Context(ctx, true, {}));
  restrictToTls13(ctx);
  SSL_CTX_set_num_tickets(ctx, 0);  // no resumption: nothing may arrive behind the handshake unasked
  if (SSL_CTX_use_certificate_chain_file(ctx, config.certFile.c_str()) != 1) {
    error = opensslError("server certificate " + config.certFile);
    return nullptr;
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, config.keyFile.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1) {
    error = opensslError("server key " + config.keyFile);
    return nullptr;
  }
  if (!config.clientCaFile.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, config.clientCaFile.c_str(), nullptr) != 1) {
      error = opensslError("client CA " + config.clientCaFile);
      return nullptr;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return c;
}

std::unique_ptr<Context> Context::forClient(const ClientConfig& config, std::string& error) {
  if (config.caFile.empty()) {
    error = "a tls:// server needs TALLY_CA (the CA that signed tallyd's certificate)";
    return nullptr;
  }
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) {
    error = opensslError("SSL_CTX_new");
    return nullptr;
  }
  std::unique_ptr<Context> c(new Context(ctx, false, config.serverName));
  restrictToTls13(ctx);
  if (SSL_CTX_load_verify_locations(ctx, config.caFile.c_str(), nullptr) != 1) {
    error = opensslError("CA " + config.caFile);
    return nullptr;
  }
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  if (!config.certFile.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, config.certFile.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, config.keyFile.c_str(), SSL_FILETYPE_PEM) != 1) {
      error = opensslError("client certificate " + config.certFile);
      return nullptr;
    }
  }
  return c;
}

Context::~Context() { SSL_CTX_free(ctx_); }

Session start(const Context& context, int fd, int timeoutMs, std::string& error) {
  SigpipeBlocked quiet;  // the handshake writes to the socket through OpenSSL
  Session result;
  SSL* ssl = SSL_new(context.native());
  if (ssl == nullptr) {
    error = opensslError("SSL_new");
    return result;
  }
  SSL_set_fd(ssl, fd);
  SSL_clear_mode(ssl, SSL_MODE_AUTO_RETRY);
  if (!context.isServer() && !context.serverName().empty() && !expectServerName(ssl, context.serverName(), error)) {
    SSL_free(ssl);
    return result;
  }
  setNonBlocking(fd, true);
  int rc = 0;
  while ((rc = context.isServer() ? SSL_accept(ssl) : SSL_connect(ssl)) != 1) {
    int e = SSL_get_error(ssl, rc);
    short events = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
    if (events == 0 || !waitFor(fd, events, timeoutMs)) {
      long verify = SSL_get_verify_result(ssl);
      error = events != 0 ? "TLS handshake timed out"
              : verify != X509_V_OK ? std::string("TLS: ") + X509_verify_cert_error_string(verify)
                                    : opensslError("TLS handshake");
      SSL_free(ssl);
      setNonBlocking(fd, false);
      return result;
    }
  }
  setNonBlocking(fd, false);
  result.peerSubject = subjectOf(ssl);
  result.records = std::make_unique<TlsRecords>(ssl);
  return result;
}

}  // namespace tally::tls
