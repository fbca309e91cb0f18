// TLS pump (common/tls): a server and a client end over a socketpair, 16 MiB echoed through
// both pumps in both directions at once, byte for byte; and a client that trusts another CA is
// refused with the verification error.
#include "common/tls/tls_pipe.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace tally::tls {
namespace {

namespace fs = std::filesystem;

// A CA-signed server certificate for localhost, and an unrelated CA; false if openssl is missing.
bool makeCertificates(const fs::path& dir) {
  fs::create_directories(dir);
  std::string d = dir.string();
  std::string cmd =
      "cd '" + d + "' && for ca in ca other; do openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
      "-days 2 -subj /CN=$ca -keyout $ca.key -out $ca.pem || exit 1; done && "
      "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost "
      "-addext subjectAltName=DNS:localhost -keyout server.key -out server.csr && "
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -copy_extensions copy "
      "-out server.pem";
  return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0;
}

struct Pair {
  Session server, client;
  std::string serverError, clientError;
};

Pair connectWith(const ServerConfig& serverConfig, const ClientConfig& clientConfig) {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  std::string error;
  auto serverContext = Context::forServer(serverConfig, error);
  EXPECT_TRUE(serverContext) << error;
  auto clientContext = Context::forClient(clientConfig, error);
  EXPECT_TRUE(clientContext) << error;
  Pair p;
  auto server = std::async(std::launch::async, [&] { return start(*serverContext, fds[0], 5000, p.serverError); });
  p.client = start(*clientContext, fds[1], 5000, p.clientError);
  p.server = server.get();
  return p;
}

ServerConfig serverConfig(const fs::path& dir, const std::string& clientCa = {}) {
  return {(dir / "server.pem").string(), (dir / "server.key").string(), clientCa.empty() ? "" : (dir / clientCa).string()};
}

Pair connect(const fs::path& dir, const std::string& clientCa) {
  return connectWith(serverConfig(dir), {(dir / clientCa).string(), {}, {}, "localhost"});
}

void closeBoth(Pair& p) {
  for (int fd : {p.client.plainFd, p.server.plainFd}) {
    if (fd >= 0) ::close(fd);
  }
}

// Ten organizational units of 60 characters and a comma in the organization: the subject's
// one-line form is longer than the 512 bytes tallyd used to keep, and needs escaping.
const std::string kLongUnit(60, 'u');

std::string longSubjectArgument() {
  std::string subject = "/O=Acme, Inc.";
  for (int i = 0; i < 10; ++i) subject += "/OU=" + std::to_string(i) + kLongUnit.substr(1);
  return subject + "/CN=tally-client";
}

std::string longSubjectRfc2253() {
  std::string subject = "CN=tally-client";
  for (int i = 9; i >= 0; --i) subject += ",OU=" + std::to_string(i) + kLongUnit.substr(1);
  return subject + ",O=Acme\\, Inc.";
}

bool makeClientCertificate(const fs::path& dir) {
  std::string cmd = "cd '" + dir.string() + "' && openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj '" +
                    longSubjectArgument() + "' -keyout client.key -out client.csr && "
                    "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out client.pem";
  return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0;
}

TEST(Tls, SixteenMebibytesEachWayThroughBothPumps) {
  fs::path dir = fs::temp_directory_path() / ("tally-tls-" + std::to_string(::getpid()));
  if (!makeCertificates(dir)) GTEST_SKIP() << "openssl (the command) is needed to make test certificates";
  Pair p = connect(dir, "ca.pem");
  ASSERT_GE(p.server.plainFd, 0) << p.serverError;
  ASSERT_GE(p.client.plainFd, 0) << p.clientError;
  // The server side echoes everything back.
  std::thread echo([fd = p.server.plainFd] {
    char buffer[65536];
    for (ssize_t n; (n = ::read(fd, buffer, sizeof(buffer))) > 0;) {
      for (ssize_t off = 0; off < n;) {
        ssize_t w = ::write(fd, buffer + off, static_cast<size_t>(n - off));
        if (w <= 0) return;
        off += w;
      }
    }
  });
  std::vector<char> sent(16u << 20);
  std::mt19937 rng(7);
  for (char& c : sent) c = static_cast<char>(rng());
  std::thread writer([&] {
    for (size_t off = 0; off < sent.size();) {
      ssize_t w = ::write(p.client.plainFd, sent.data() + off, std::min<size_t>(sent.size() - off, 1 << 20));
      ASSERT_GT(w, 0);
      off += static_cast<size_t>(w);
    }
  });
  std::vector<char> received;
  received.reserve(sent.size());
  char buffer[65536];
  while (received.size() < sent.size()) {
    ssize_t n = ::read(p.client.plainFd, buffer, sizeof(buffer));
    ASSERT_GT(n, 0) << "the pump closed after " << received.size() << " bytes";
    received.insert(received.end(), buffer, buffer + n);
  }
  writer.join();
  EXPECT_TRUE(received == sent);
  ::close(p.client.plainFd);  // the pumps end, the echo sees EOF
  echo.join();
  ::close(p.server.plainFd);
  fs::remove_all(dir);
}

TEST(Tls, ClientTrustingAnotherCaIsRefusedWithTheReason) {
  fs::path dir = fs::temp_directory_path() / ("tally-tls-ca-" + std::to_string(::getpid()));
  if (!makeCertificates(dir)) GTEST_SKIP() << "openssl (the command) is needed to make test certificates";
  Pair p = connect(dir, "other.pem");
  EXPECT_LT(p.client.plainFd, 0);
  EXPECT_NE(p.clientError.find("unable to get local issuer certificate"), std::string::npos) << p.clientError;
  EXPECT_LT(p.server.plainFd, 0);
  EXPECT_FALSE(p.serverError.empty());
  fs::remove_all(dir);
}

TEST(Tls, PeerSubjectIsTheWholeEscapedRfc2253Subject) {
  fs::path dir = fs::temp_directory_path() / ("tally-tls-subject-" + std::to_string(::getpid()));
  if (!makeCertificates(dir) || !makeClientCertificate(dir)) {
    GTEST_SKIP() << "openssl (the command) is needed to make test certificates";
  }
  Pair p = connectWith(serverConfig(dir, "ca.pem"), {(dir / "ca.pem").string(), (dir / "client.pem").string(),
                                                     (dir / "client.key").string(), "localhost"});
  ASSERT_GE(p.server.plainFd, 0) << p.serverError;
  ASSERT_GE(p.client.plainFd, 0) << p.clientError;
  EXPECT_GT(p.server.peerSubject.size(), 512u);
  EXPECT_EQ(p.server.peerSubject, longSubjectRfc2253());
  EXPECT_EQ(p.client.peerSubject, "CN=localhost");
  closeBoth(p);
  fs::remove_all(dir);
}

// "localhost\0.evil.example" must not be verified as "localhost": a name OpenSSL cannot take
// whole fails the connection.
TEST(Tls, ServerNameThatCannotBeCheckedWholeFailsTheConnection) {
  fs::path dir = fs::temp_directory_path() / ("tally-tls-name-" + std::to_string(::getpid()));
  if (!makeCertificates(dir)) GTEST_SKIP() << "openssl (the command) is needed to make test certificates";
  const std::string name("localhost\0.evil.example", 23);
  Pair p = connectWith(serverConfig(dir), {(dir / "ca.pem").string(), {}, {}, name});
  EXPECT_LT(p.client.plainFd, 0) << "connected, verified against a truncated server name";
  EXPECT_NE(p.clientError.find("server name"), std::string::npos) << p.clientError;
  closeBoth(p);
  fs::remove_all(dir);
}

TEST(Tls, ClientWithoutCaIsRefusedBeforeConnecting) {
  std::string error;
  EXPECT_FALSE(Context::forClient({}, error));
  EXPECT_NE(error.find("TALLY_CA"), std::string::npos);
}

}  // namespace
}  // namespace tally::tls
