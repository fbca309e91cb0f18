// TLS records (common/tls): a server and a client end over a socketpair, 16 MiB echoed through
// both ends' records in both directions at once, byte for byte, through the framing's own reader
// and writer; and a client that trusts another CA is refused with the verification error.
#include "common/tls/tls_session.h"

#include "common/frame/record_layer.h"
#include "common/frame/socket_io.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <utility>
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
  int serverFd = -1, clientFd = -1;
  Pair() = default;
  Pair(Pair&& other) noexcept
      : server(std::move(other.server)),
        client(std::move(other.client)),
        serverError(std::move(other.serverError)),
        clientError(std::move(other.clientError)),
        serverFd(std::exchange(other.serverFd, -1)),
        clientFd(std::exchange(other.clientFd, -1)) {}
  ~Pair() {
    for (int fd : {serverFd, clientFd}) {
      if (fd >= 0) ::close(fd);
    }
  }
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
  p.serverFd = fds[0];
  p.clientFd = fds[1];
  auto server = std::async(std::launch::async, [&] { return start(*serverContext, fds[0], 5000, p.serverError); });
  p.client = start(*clientContext, fds[1], 5000, p.clientError);
  if (!p.client.records) ::shutdown(fds[1], SHUT_RDWR);  // the server's handshake ends now, not at its timeout
  p.server = server.get();
  return p;
}

ServerConfig serverConfig(const fs::path& dir, const std::string& clientCa = {}) {
  return {(dir / "server.pem").string(), (dir / "server.key").string(), clientCa.empty() ? "" : (dir / clientCa).string()};
}

Pair connect(const fs::path& dir, const std::string& clientCa) {
  return connectWith(serverConfig(dir), {(dir / clientCa).string(), {}, {}, "localhost"});
}

bool sendAll(int fd, frame::RecordLayer& records, const void* bytes, size_t size) {
  iovec part{const_cast<void*>(bytes), size};
  int error = 0;
  return frame::sendSealed(fd, records, std::span<const iovec>(&part, 1), error) == size && error == 0;
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

TEST(Tls, SixteenMebibytesEachWayThroughBothEndsRecords) {
  fs::path dir = fs::temp_directory_path() / ("tally-tls-" + std::to_string(::getpid()));
  if (!makeCertificates(dir)) GTEST_SKIP() << "openssl (the command) is needed to make test certificates";
  Pair p = connect(dir, "ca.pem");
  ASSERT_TRUE(p.server.records) << p.serverError;
  ASSERT_TRUE(p.client.records) << p.clientError;
  // The server side echoes everything back, reading and writing at once as tallyd's threads do.
  std::thread echo([&] {
    frame::StreamReader reader(p.serverFd);
    reader.useRecords(p.server.records.get());
    std::vector<char> buffer(100000);  // not a multiple of any record size
    for (size_t done = 0; done < (16u << 20); done += buffer.size()) {
      size_t chunk = std::min(buffer.size(), (16u << 20) - done);
      if (!reader.read(buffer.data(), chunk).ok || !sendAll(p.serverFd, *p.server.records, buffer.data(), chunk)) return;
    }
  });
  std::vector<char> sent(16u << 20);
  std::mt19937 rng(7);
  for (char& c : sent) c = static_cast<char>(rng());
  std::thread writer([&] {
    for (size_t off = 0; off < sent.size(); off += 1 << 20) {
      ASSERT_TRUE(sendAll(p.clientFd, *p.client.records, sent.data() + off, 1 << 20));
    }
  });
  std::vector<char> received(sent.size());
  frame::StreamReader reader(p.clientFd);
  reader.useRecords(p.client.records.get());
  frame::IoStatus status = reader.read(received.data(), received.size());
  writer.join();
  echo.join();
  ASSERT_TRUE(status.ok) << status.error;
  EXPECT_TRUE(received == sent);
  fs::remove_all(dir);
}

// What arrives unsealed (or altered) on a TLS connection is an error of that connection.
TEST(Tls, BytesThatAreNotRecordsFailTheRead) {
  fs::path dir = fs::temp_directory_path() / ("tally-tls-junk-" + std::to_string(::getpid()));
  if (!makeCertificates(dir)) GTEST_SKIP() << "openssl (the command) is needed to make test certificates";
  Pair p = connect(dir, "ca.pem");
  ASSERT_TRUE(p.server.records) << p.serverError;
  ASSERT_TRUE(p.client.records) << p.clientError;
  const char junk[64] = "\x17\x03\x03\x00\x30 plaintext where a record should be";
  ASSERT_EQ(::write(p.clientFd, junk, sizeof(junk)), static_cast<ssize_t>(sizeof(junk)));
  frame::StreamReader reader(p.serverFd);
  reader.useRecords(p.server.records.get());
  char byte;
  frame::IoStatus status = reader.read(&byte, 1);
  EXPECT_FALSE(status.ok);
  EXPECT_FALSE(status.closed);
  EXPECT_NE(status.error.find("TLS"), std::string::npos) << status.error;
  fs::remove_all(dir);
}

TEST(Tls, ClientTrustingAnotherCaIsRefusedWithTheReason) {
  fs::path dir = fs::temp_directory_path() / ("tally-tls-ca-" + std::to_string(::getpid()));
  if (!makeCertificates(dir)) GTEST_SKIP() << "openssl (the command) is needed to make test certificates";
  Pair p = connect(dir, "other.pem");
  EXPECT_FALSE(p.client.records);
  EXPECT_NE(p.clientError.find("unable to get local issuer certificate"), std::string::npos) << p.clientError;
  EXPECT_FALSE(p.server.records);
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
  ASSERT_TRUE(p.server.records) << p.serverError;
  ASSERT_TRUE(p.client.records) << p.clientError;
  EXPECT_GT(p.server.peerSubject.size(), 512u);
  EXPECT_EQ(p.server.peerSubject, longSubjectRfc2253());
  EXPECT_EQ(p.client.peerSubject, "CN=localhost");
  fs::remove_all(dir);
}

// "localhost\0.evil.example" must not be verified as "localhost": a name OpenSSL cannot take
// whole fails the connection.
TEST(Tls, ServerNameThatCannotBeCheckedWholeFailsTheConnection) {
  fs::path dir = fs::temp_directory_path() / ("tally-tls-name-" + std::to_string(::getpid()));
  if (!makeCertificates(dir)) GTEST_SKIP() << "openssl (the command) is needed to make test certificates";
  const std::string name("localhost\0.evil.example", 23);
  Pair p = connectWith(serverConfig(dir), {(dir / "ca.pem").string(), {}, {}, name});
  EXPECT_FALSE(p.client.records) << "connected, verified against a truncated server name";
  EXPECT_NE(p.clientError.find("server name"), std::string::npos) << p.clientError;
  fs::remove_all(dir);
}

TEST(Tls, ClientWithoutCaIsRefusedBeforeConnecting) {
  std::string error;
  EXPECT_FALSE(Context::forClient({}, error));
  EXPECT_NE(error.find("TALLY_CA"), std::string::npos);
}

}  // namespace
}  // namespace tally::tls
