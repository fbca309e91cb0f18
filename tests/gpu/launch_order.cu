// Streams of launches stay in order with everything else the program does: every launch adds 1
// to its stream's counter, and copies, syncs and launches on the legacy default stream read the
// counters between bursts. Through tallyd a high-priority tenant's launches are made by a thread
// of their own (server/session/launch_thread.h) while its session thread reads on; a copy that
// overtook a launch, or a launch lost, shows as a wrong count.
//
// The kernel names suit the fake GPU of the CPU integration tests too (its kernels whose name
// starts with "add" add 1 to the u32 their first parameter points at; a name's length mod 5 is
// its parameter count). With --fake-gpu-fails (fake GPU only: it fails every launch of a kernel
// whose name starts with "fail"), a failed one-way launch in the middle of a burst must be
// reported by the stream's next sync, once, and the launches after it must still run.
#include <vector>

#include "gpu_test_common.h"

extern "C" __global__ void addone(unsigned* counter) { atomicAdd(counter, 1u); }
extern "C" __global__ void fail0() {}

namespace {

constexpr int kStreams = 2;
constexpr int kRounds = 40;
constexpr int kPerRound = 1000;

unsigned readCounter(const unsigned* device) {
  unsigned value = 0;
  CHECK(cudaMemcpy(&value, device, sizeof(value), cudaMemcpyDeviceToHost));
  return value;
}

void expectCount(const char* what, int round, unsigned got, unsigned want) {
  if (got == want) return;
  std::printf("MISMATCH %s after round %d: %u, expected %u\n", what, round, got, want);
  ++g_failures;
}

void burstsInOrder(unsigned* counters, unsigned* legacyCounter, cudaStream_t* streams, unsigned* pinned) {
  for (int round = 0; round < kRounds; ++round) {
    for (int i = 0; i < kPerRound; ++i) {
      int s = i % kStreams;
      addone<<<1, 1, 0, streams[s]>>>(counters + s);
    }
    CHECK_LAUNCH();
    const unsigned want = (round + 1) * (kPerRound / kStreams);
    switch (round % 3) {
      case 0:  // an async copy on the stream, then its sync
        CHECK(cudaMemcpyAsync(pinned, counters, sizeof(unsigned), cudaMemcpyDeviceToHost, streams[0]));
        CHECK(cudaStreamSynchronize(streams[0]));
        expectCount("stream 0 (async copy)", round, *pinned, want);
        CHECK(cudaStreamSynchronize(streams[1]));
        break;
      case 1:  // the device sync, then plain copies
        CHECK(cudaDeviceSynchronize());
        break;
      default:  // launches on the legacy default stream wait for the blocking streams' work
        addone<<<1, 1>>>(legacyCounter);
        CHECK_LAUNCH();
        CHECK(cudaStreamSynchronize(nullptr));
        expectCount("legacy stream", round, readCounter(legacyCounter), static_cast<unsigned>(round / 3 + 1));
        CHECK(cudaDeviceSynchronize());
        break;
    }
    for (int s = 0; s < kStreams; ++s) expectCount("stream counter", round, readCounter(counters + s), want);
  }
}

void failedLaunchIsReportedOnce(unsigned* counter, cudaStream_t stream) {
  const unsigned before = readCounter(counter);
  for (int i = 0; i < 300; ++i) addone<<<1, 1, 0, stream>>>(counter);
  fail0<<<1, 1, 0, stream>>>();
  for (int i = 0; i < 300; ++i) addone<<<1, 1, 0, stream>>>(counter);
  EXPECT_ERR(cudaStreamSynchronize(stream), cudaErrorLaunchOutOfResources);
  EXPECT_ERR(cudaStreamSynchronize(stream), cudaSuccess);
  expectCount("launches around the failed one", 0, readCounter(counter) - before, 600);
}

}  // namespace

int main(int argc, char** argv) {
  const bool fakeFails = argc > 1 && std::strcmp(argv[1], "--fake-gpu-fails") == 0;
  unsigned* counters = nullptr;
  CHECK(cudaMalloc(&counters, (kStreams + 1) * sizeof(unsigned)));
  CHECK(cudaMemset(counters, 0, (kStreams + 1) * sizeof(unsigned)));
  cudaStream_t streams[kStreams];
  for (auto& s : streams) CHECK(cudaStreamCreate(&s));  // blocking: they wait for the legacy stream
  unsigned* pinned = nullptr;
  CHECK(cudaMallocHost(&pinned, sizeof(unsigned)));

  burstsInOrder(counters, counters + kStreams, streams, pinned);
  if (fakeFails) failedLaunchIsReportedOnce(counters, streams[0]);

  for (auto& s : streams) CHECK(cudaStreamDestroy(s));
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFree(counters));
  std::printf("launch_order: %d launches in %d rounds, %s\n", kRounds * kPerRound, kRounds,
              g_failures == 0 ? "all counts right" : "WRONG COUNTS");
  return g_failures == 0 ? 0 : 1;
}
