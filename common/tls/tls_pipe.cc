#include "common/tls/tls_pipe.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <thread>
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

// Moves bytes both ways until either side ends. Both fds non-blocking.
void pump(SSL* ssl, int rawFd, int plainFd) {
  SigpipeBlocked quiet;
  std::vector<char> toPlain, toTls;
  size_t toPlainAt = 0, toTlsAt = 0;
  char buffer[64 * 1024];
  bool tlsOpen = true, plainOpen = true;
  while (tlsOpen && plainOpen) {
    short rawEvents = 0, plainEvents = 0;
    bool progress = false;
    // TLS -> plaintext
    if (toPlainAt == toPlain.size()) {
      toPlain.clear();
      toPlainAt = 0;
      int n = SSL_read(ssl, buffer, sizeof(buffer));
      if (n > 0) {
        toPlain.assign(buffer, buffer + n);
        progress = true;
      } else {
        int e = SSL_get_error(ssl, n);
        if (e == SSL_ERROR_WANT_READ) rawEvents |= POLLIN;
        else if (e == SSL_ERROR_WANT_WRITE) rawEvents |= POLLOUT;
        else tlsOpen = false;  // closed or failed
      }
    }
    if (toPlainAt < toPlain.size()) {
      ssize_t n = ::send(plainFd, toPlain.data() + toPlainAt, toPlain.size() - toPlainAt, MSG_NOSIGNAL);
      if (n > 0) {
        toPlainAt += static_cast<size_t>(n);
        progress = true;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        plainEvents |= POLLOUT;
      } else {
        plainOpen = false;
      }
    }
    // plaintext -> TLS
    if (toTlsAt == toTls.size()) {
      toTls.clear();
      toTlsAt = 0;
      ssize_t n = ::recv(plainFd, buffer, sizeof(buffer), 0);
      if (n > 0) {
        toTls.assign(buffer, buffer + n);
        progress = true;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        plainEvents |= POLLIN;
      } else {
        plainOpen = false;
      }
    }
    if (toTlsAt < toTls.size()) {
      int n = SSL_write(ssl, toTls.data() + toTlsAt, static_cast<int>(toTls.size() - toTlsAt));
      if (n > 0) {
        toTlsAt += static_cast<size_t>(n);
        progress = true;
      } else {
        int e = SSL_get_error(ssl, n);
        if (e == SSL_ERROR_WANT_READ) rawEvents |= POLLIN;
        else if (e == SSL_ERROR_WANT_WRITE) rawEvents |= POLLOUT;
        else tlsOpen = false;
      }
    }
    if (progress || SSL_pending(ssl) > 0) continue;
    pollfd fds[2] = {{rawFd, rawEvents, 0}, {plainFd, plainEvents, 0}};
    ::poll(fds, 2, 1000);
  }
  if (tlsOpen) SSL_shutdown(ssl);
  ::shutdown(plainFd, SHUT_RDWR);
  ::close(plainFd);
  SSL_free(ssl);
  ::close(rawFd);
}

}  // namespace

std::unique_ptr<Context> Context::forServer(const ServerConfig& config, std::string& error) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) {
    error = opensslError("SSL_CTX_new");
    return nullptr;
  }
  std::unique_ptr<Context> c(new Context(ctx, true, {}));
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
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
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
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

Session start(const Context& context, int rawFd, int timeoutMs, std::string& error) {
  SigpipeBlocked quiet;
  Session result;
  SSL* ssl = SSL_new(context.native());
  if (ssl == nullptr) {
    error = opensslError("SSL_new");
    ::close(rawFd);
    return result;
  }
  SSL_set_fd(ssl, rawFd);
  SSL_clear_mode(ssl, SSL_MODE_AUTO_RETRY);
  SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (!context.isServer() && !context.serverName().empty() && !expectServerName(ssl, context.serverName(), error)) {
    SSL_free(ssl);
    ::close(rawFd);
    return result;
  }
  setNonBlocking(rawFd, true);
  int rc = 0;
  while ((rc = context.isServer() ? SSL_accept(ssl) : SSL_connect(ssl)) != 1) {
    int e = SSL_get_error(ssl, rc);
    short events = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
    if (events == 0 || !waitFor(rawFd, events, timeoutMs)) {
      long verify = SSL_get_verify_result(ssl);
      error = events != 0 ? "TLS handshake timed out"
              : verify != X509_V_OK ? std::string("TLS: ") + X509_verify_cert_error_string(verify)
                                    : opensslError("TLS handshake");
      SSL_free(ssl);
      ::close(rawFd);
      return result;
    }
  }
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    error = "socketpair for the TLS pump failed";
    SSL_free(ssl);
    ::close(rawFd);
    return result;
  }
  result.peerSubject = subjectOf(ssl);
  setNonBlocking(pair[1], true);
  std::thread(pump, ssl, rawFd, pair[1]).detach();
  result.plainFd = pair[0];
  return result;
}

}  // namespace tally::tls
