// The floor a remoted synchronous call stands on (issue #8): the round trip of a 64-byte message
// between two threads of one process over TCP loopback (TCP_NODELAY) and over a Unix socket,
// both sides spinning on non-blocking reads as tallyd's and the client's threads do, and, for
// comparison, sleeping in blocking reads. No GPU: what the kernel's socket paths cost on this
// host, which a call through tallyd pays twice (request and reply) on top of the GPU's own time.
//
//   socket_floor_probe [round trips per case, default 20000]
// Prints one JSON object per case: {"transport", "wait", "p10_us", "p50_us", "p90_us", "p99_us"}.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

constexpr size_t kMessage = 64;

bool readMessage(int fd, char* buf, bool spin) {
  size_t got = 0;
  while (got < kMessage) {
    ssize_t n = ::recv(fd, buf + got, kMessage - got, spin ? MSG_DONTWAIT : 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      return false;
    }
  }
  return true;
}

bool writeMessage(int fd, const char* buf) { return ::send(fd, buf, kMessage, MSG_NOSIGNAL) == static_cast<ssize_t>(kMessage); }

// A connected pair of TCP loopback sockets, or of Unix sockets.
bool connectedPair(bool tcp, int fds[2]) {
  if (!tcp) return ::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0;
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return false;
  }
  fds[0] = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(fds[0], reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return false;
  fds[1] = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  int one = 1;
  for (int i = 0; i < 2; ++i) ::setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fds[1] >= 0;
}

double percentile(std::vector<double>& v, double p) {
  size_t k = static_cast<size_t>(p * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return v[k];
}

bool measure(bool tcp, bool spin, int rounds) {
  int fds[2];
  if (!connectedPair(tcp, fds)) {
    std::perror("socket pair");
    return false;
  }
  std::thread echo([&] {
    char buf[kMessage];
    while (readMessage(fds[1], buf, spin) && writeMessage(fds[1], buf)) {
    }
  });
  char buf[kMessage] = {};
  std::vector<double> micros;
  micros.reserve(static_cast<size_t>(rounds));
  bool ok = true;
  for (int i = 0; i < rounds + 1000 && ok; ++i) {  // the first 1000 warm up
    auto t0 = std::chrono::steady_clock::now();
    ok = writeMessage(fds[0], buf) && readMessage(fds[0], buf, spin);
    auto us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 1000) micros.push_back(us);
  }
  ::shutdown(fds[0], SHUT_RDWR);
  echo.join();
  ::close(fds[0]);
  ::close(fds[1]);
  if (!ok || micros.empty()) return false;
  std::printf("{\"transport\": \"%s\", \"wait\": \"%s\", \"p10_us\": %.2f, \"p50_us\": %.2f, \"p90_us\": %.2f, "
              "\"p99_us\": %.2f}\n",
              tcp ? "tcp-loopback" : "unix", spin ? "spin" : "block", percentile(micros, 0.10),
              percentile(micros, 0.50), percentile(micros, 0.90), percentile(micros, 0.99));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 20000;
  if (rounds <= 0) {
    std::fprintf(stderr, "usage: %s [round trips per case]\n", argv[0]);
    return 2;
  }
  bool ok = true;
  for (bool tcp : {true, false}) {
    for (bool spin : {true, false}) ok = measure(tcp, spin, rounds) && ok;
  }
  return ok ? 0 : 1;
}
