// HangupWatch and HostWaits: a dead client's host-callback waits are let go without its
// session thread (docs/scheduler.md, deadlock rules).
#include "server/session/hangup_watch.h"
#include "server/session/host_waits.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace tally::server::session {
namespace {

using namespace std::chrono_literals;

bool eventually(const std::function<bool()>& condition) {
  for (auto deadline = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < deadline;) {
    if (condition()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

struct SocketPair {
  int fds[2] = {-1, -1};
  SocketPair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0); }
  ~SocketPair() {
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
  }
  void closePeer() {
    ::close(fds[1]);
    fds[1] = -1;
  }
};

TEST(HangupWatch, RunsTheActionOnceThePeerIsGone) {
  HangupWatch watch;
  SocketPair pair;
  std::atomic<int> runs{0};
  uint64_t id = watch.watch(pair.fds[0], [&] { ++runs; });
  ASSERT_EQ(::write(pair.fds[1], "x", 1), 1);  // data waiting to be read is no hang-up
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(runs.load(), 0);
  pair.closePeer();
  EXPECT_TRUE(eventually([&] { return runs.load() == 1; }));
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(runs.load(), 1) << "an action runs once";
  watch.unwatch(id);  // after it ran: harmless
}

TEST(HangupWatch, UnwatchedConnectionsAreLeftAlone) {
  HangupWatch watch;
  SocketPair a, b;
  std::atomic<int> runsA{0}, runsB{0};
  uint64_t idA = watch.watch(a.fds[0], [&] { ++runsA; });
  watch.watch(b.fds[0], [&] { ++runsB; });
  watch.unwatch(idA);
  a.closePeer();
  b.closePeer();
  EXPECT_TRUE(eventually([&] { return runsB.load() == 1; }));
  EXPECT_EQ(runsA.load(), 0);
}

// What cuStreamWaitValue32(..., CU_STREAM_WAIT_VALUE_GEQ) lets pass: a cyclic comparison.
bool gpuWaitPasses(uint32_t word, uint32_t awaited) { return static_cast<int32_t>(word - awaited) >= 0; }

TEST(HostWaits, ReleaseLetsEveryWaitGoAsTheGpuComparesAndLaterOnesAtOnce) {
  HostWaits waits;
  uint32_t flag = 3, word = 0, late = 0;
  waits.add(&flag, 4);
  waits.add(&word, 1);
  waits.add(&word, 2);
  EXPECT_EQ(word, 0u);
  EXPECT_EQ(waits.pending(), 3u);
  EXPECT_EQ(waits.releaseAll(), 3u);
  EXPECT_TRUE(gpuWaitPasses(flag, 4));
  EXPECT_TRUE(gpuWaitPasses(word, 1));
  EXPECT_TRUE(gpuWaitPasses(word, 2));
  EXPECT_TRUE(gpuWaitPasses(word, 1000));  // a wait the stream had not reached yet passes too
  EXPECT_FALSE(gpuWaitPasses(UINT32_MAX, 2)) << "the value an earlier version wrote held streams forever";
  EXPECT_EQ(waits.pending(), 0u);  // forgotten
  waits.add(&late, 7);  // a HostFunc call still buffered when the client died
  EXPECT_TRUE(gpuWaitPasses(late, 7));
  word = 5;  // freed and reused memory must not be written again
  EXPECT_EQ(waits.releaseAll(), 0u);
  EXPECT_EQ(word, 5u);
}

TEST(HostWaits, WaitsAlreadyOverAreNotCountedOrWritten) {
  HostWaits waits;
  uint32_t done = 9;
  waits.add(&done, 9);
  EXPECT_EQ(waits.pending(), 0u);
  EXPECT_EQ(waits.releaseAll(), 0u);  // a client that exited normally owed nothing
  EXPECT_EQ(done, 9u);
}

TEST(HostWaits, PendingCountsWaitsNotReachedAndOldOnesAreForgotten) {
  HostWaits waits;
  uint32_t done = 0;
  for (uint32_t sequence = 1; sequence <= 200; ++sequence) {
    waits.add(&done, sequence);
    done = sequence - 1;  // the client is one callback behind
  }
  EXPECT_EQ(waits.pending(), 1u);  // sequence 200
  EXPECT_EQ(waits.releaseAll(), 1u);
  EXPECT_TRUE(gpuWaitPasses(done, 200));
}

TEST(HangupWatch, ReleasesADeadTenantsWaitsWhileItsThreadIsBusy) {
  HangupWatch watch;
  SocketPair pair;
  auto waits = std::make_shared<HostWaits>();
  uint32_t done = 0;  // the word a stream waits on, the client's to set
  waits->add(&done, 1);
  uint64_t id = watch.watch(pair.fds[0], [waits] { waits->releaseAll(); });
  pair.closePeer();  // the client is killed; its session thread would be stuck elsewhere
  EXPECT_TRUE(eventually([&] { return gpuWaitPasses(__atomic_load_n(&done, __ATOMIC_ACQUIRE), 1); }));
  watch.unwatch(id);
}

}  // namespace
}  // namespace tally::server::session
