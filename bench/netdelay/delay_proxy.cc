// delay_proxy: a TCP forwarder that holds every byte for a fixed time in each direction, the
// stand-in for a remote client's network where `tc netem` on a veth pair is not available (the
// lent GPU host has neither `ip` nor `tc`). Used by bench/hp_request/run.sh (HP_REQUEST_DELAY_US).
//
//   delay_proxy <listen port> <upstream host> <upstream port> <one-way delay µs>
//
// Listens on 127.0.0.1 only. Per connection and direction, one thread reads what arrives and
// stamps it, another writes each chunk out once its time has come. Both poll rather than sleep
// (a thread woken per chunk added tens of µs to every message, more than the delays measured),
// so a connection keeps four cores busy; the writer sleeps only for the part of a wait beyond
// 100 µs. The proxy's own cost is measured by running it with a delay of 0. Prints "listening"
// on stdout once it accepts connections.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Chunk {
  Clock::time_point due;
  std::vector<char> bytes;
};

// One direction of one connection: bytes read from `from` reach `to` `delay` later.
class DelayedPipe {
 public:
  DelayedPipe(int from, int to, std::chrono::microseconds delay) : from_(from), to_(to), delay_(delay) {}

  void run() {
    std::thread writer([this] { writeWhenDue(); });
    readAndStamp();
    writer.join();
  }

 private:
  void readAndStamp() {
    std::vector<char> buffer(1 << 20);
    for (;;) {
      ssize_t n = ::recv(from_, buffer.data(), buffer.size(), MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        __builtin_ia32_pause();
        continue;
      }
      if (n <= 0) {
        closed_.store(true, std::memory_order_release);
        return;
      }
      std::lock_guard lock(mutex_);
      queue_.push_back({Clock::now() + delay_, std::vector<char>(buffer.begin(), buffer.begin() + n)});
      queued_.fetch_add(1, std::memory_order_release);
    }
  }

  void writeWhenDue() {
    for (;;) {
      Chunk chunk;
      if (queued_.load(std::memory_order_acquire) == 0) {  // polled without the reader's lock
        if (closed_.load(std::memory_order_acquire) && queued_.load(std::memory_order_acquire) == 0) break;
        __builtin_ia32_pause();
        continue;
      }
      {
        std::lock_guard lock(mutex_);
        chunk = std::move(queue_.front());
        queue_.pop_front();
        queued_.fetch_sub(1, std::memory_order_relaxed);
      }
      waitUntil(chunk.due);
      if (!sendAll(chunk.bytes)) break;
    }
    ::shutdown(to_, SHUT_WR);
  }

  static void waitUntil(Clock::time_point due) {
    constexpr auto kSpin = std::chrono::microseconds(100);  // sleeps overshoot by tens of µs
    if (due - Clock::now() > kSpin) std::this_thread::sleep_until(due - kSpin);
    while (Clock::now() < due) __builtin_ia32_pause();
  }

  bool sendAll(const std::vector<char>& bytes) {
    for (size_t done = 0; done < bytes.size();) {
      ssize_t n = ::send(to_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  int from_;
  int to_;
  std::chrono::microseconds delay_;
  std::mutex mutex_;
  std::deque<Chunk> queue_;
  std::atomic<size_t> queued_{0};
  std::atomic<bool> closed_{false};
};

int connectTo(const char* host, const char* port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host, port, &hints, &found) != 0 || found == nullptr) return -1;
  int fd = ::socket(found->ai_family, SOCK_STREAM, 0);
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(found);
  return fd;
}

void noDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void serve(int client, std::string host, std::string port, std::chrono::microseconds delay) {
  int upstream = connectTo(host.c_str(), port.c_str());
  if (upstream < 0) {
    std::fprintf(stderr, "delay_proxy: cannot reach %s:%s\n", host.c_str(), port.c_str());
    ::close(client);
    return;
  }
  noDelay(client);
  noDelay(upstream);
  DelayedPipe toServer(client, upstream, delay);
  DelayedPipe toClient(upstream, client, delay);
  std::thread back([&] { toClient.run(); });
  toServer.run();
  back.join();
  ::close(upstream);
  ::close(client);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: delay_proxy <listen port> <upstream host> <upstream port> <one-way delay us>\n");
    return 2;
  }
  const auto delay = std::chrono::microseconds(std::atol(argv[4]));
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(std::atoi(argv[1])));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || ::listen(listener, 16) != 0) {
    std::perror("delay_proxy: listen");
    return 1;
  }
  std::printf("listening\n");
  std::fflush(stdout);
  for (;;) {
    int client = ::accept(listener, nullptr, nullptr);
    if (client < 0) continue;
    std::thread(serve, client, std::string(argv[2]), std::string(argv[3]), delay).detach();
  }
}
