// A static SM split, natively, as the isolation benchmark's baseline for tallyd's partitions: one
// process runs the HP workload (hp_workload.cuh) in one thread on a stream of a green context of
// --hp-sms SMs and the BE workload (be_workload.cuh) in another thread on a stream of a green
// context of the remaining SMs. With --hp-sms 0 both run on streams of the primary context, HP at
// the highest stream priority and BE at the lowest: one shared context with stream priorities,
// what tallyd's default policy does, without remoting. BE starts first; HP joins after --lead
// seconds (as run.sh starts the two processes); each then measures for --seconds.
// --hp-overlap 1 is tallyd's overlapped reserve, natively: HP's green context spans every SM (its
// stream at the highest priority), BE's the rest of the --hp-sms split (lowest priority; with
// --hp-sms 0, every SM too), so HP may also take the SMs BE's blocks free. --pdl 1 chains HP's
// kernels as hp_infer --pdl does. Prints one JSON line:
//   {"hp":{..as hp_infer..},"be":{..as be_train..},"hp_sms":N,"be_sms":M}
//
//   green_split --rate REQ_PER_S [--hp-sms N] [--hp-overlap 1] [--pdl 1] [--request large|small]
//               [--shape ...] [--block-us US | --block-iterations N] [--seconds S] [--lead S]
//               [--seed N] [--service-log FILE]
//
// Kernels of the runtime's (primary context's) module, cudaMalloc memory and events work on a
// green context's streams (bench/micro/green_ctx_probe.cu checks it); a partition is at least
// 8 SMs and a multiple of 8 (the driver rounds up).
#include <cuda.h>

#include <thread>

#include "be_workload.cuh"
#include "hp_workload.cuh"

#define CU_CHECK(x)                                                                          \
  do {                                                                                       \
    CUresult r_ = (x);                                                                       \
    if (r_ != CUDA_SUCCESS) {                                                                \
      const char* name_ = nullptr;                                                           \
      cuGetErrorName(r_, &name_);                                                            \
      std::fprintf(stderr, "green_split: %s failed: %s\n", #x, name_ ? name_ : "?");         \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

namespace {

struct Partition {
  cudaStream_t stream = nullptr;
  unsigned sms = 0;
};

Partition greenStream(CUdevice dev, CUdevResource resource, int priority) {
  CUdevResourceDesc desc;
  CU_CHECK(cuDevResourceGenerateDesc(&desc, &resource, 1));
  CUgreenCtx green;
  CU_CHECK(cuGreenCtxCreate(&green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
  CUstream stream;
  CU_CHECK(cuGreenCtxStreamCreate(&stream, green, CU_STREAM_NON_BLOCKING, priority));
  return {stream, resource.sm.smCount};
}

// Streams in two green contexts: `hpSms` SMs for HP, the rest of the GPU for BE, at equal stream
// priorities (the split alone is what this baseline measures). Overlapped: HP's context spans
// every SM and its stream has the highest priority, BE's the lowest.
void split(unsigned hpSms, bool overlap, Partition* hp, Partition* be) {
  CUdevice dev;
  CU_CHECK(cuDeviceGet(&dev, 0));
  CUdevResource all, group, rest;
  CU_CHECK(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
  int lowest = 0, highest = 0;
  CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
  if (overlap && hpSms == 0) {
    *hp = greenStream(dev, all, highest);
    *be = greenStream(dev, all, lowest);
    return;
  }
  unsigned groups = 1;
  CU_CHECK(cuDevSmResourceSplitByCount(&group, &groups, &all, &rest, 0, hpSms));
  if (groups != 1 || rest.sm.smCount == 0) {
    std::fprintf(stderr, "green_split: cannot split %u SMs into %u for HP and the rest for BE\n", all.sm.smCount,
                 hpSms);
    std::exit(1);
  }
  if (group.sm.smCount != hpSms)
    std::fprintf(stderr, "green_split: HP partition has %u SMs (asked for %u)\n", group.sm.smCount, hpSms);
  *hp = overlap ? greenStream(dev, all, highest) : greenStream(dev, group, 0);
  *be = greenStream(dev, rest, overlap ? lowest : 0);
}

// Both on the primary context (every SM), HP's stream at the device's highest priority and BE's
// at its lowest.
void shareByPriority(int sms, Partition* hp, Partition* be) {
  int lowest = 0, highest = 0;
  CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
  CHECK(cudaStreamCreateWithPriority(&hp->stream, cudaStreamNonBlocking, highest));
  CHECK(cudaStreamCreateWithPriority(&be->stream, cudaStreamNonBlocking, lowest));
  hp->sms = be->sms = unsigned(sms);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace isolation;
  Args args(argc, argv,
            "--rate REQ_PER_S [--hp-sms N] [--hp-overlap 1] [--pdl 1] [--request large|small] "
            "[--shape mixed|long|short|mem] [--block-us US | --block-iterations N] [--seconds S] [--lead S] "
            "[--seed N] [--service-log FILE]");
  const unsigned hpSms = unsigned(args.number("hp-sms", 40));
  const bool overlap = args.number("hp-overlap", 0) != 0;
  const bool chained = args.number("pdl", 0) != 0;
  const RequestKind kind = requestKind(args.text("request", "small"));
  BeConfig beConfigured = beConfig(args);
  HpLoop loop;
  loop.rate = args.number("rate", 0);
  loop.seconds = args.number("seconds", 10);
  loop.seed = unsigned(args.number("seed", 1));
  const double lead = args.number("lead", 1);
  const std::string serviceLog = args.text("service-log", "");
  args.finish();
  if (loop.rate <= 0) args.usageError();

  const int sms = deviceSms();
  CHECK(cudaFree(nullptr));  // the primary context, which the green contexts derive from
  Partition hpPart, bePart;
  if (hpSms == 0 && !overlap) {
    shareByPriority(sms, &hpPart, &bePart);
  } else {
    split(hpSms, overlap, &hpPart, &bePart);
  }

  HpModel hp(kind, hpPart.stream, chained);
  // The BE's launches are sized by the whole device, as be_train's are: the same work per iteration.
  BeWorkload be(beConfigured, sms, bePart.stream);
  cudaStream_t whole;
  CHECK(cudaStreamCreateWithFlags(&whole, cudaStreamNonBlocking));
  be.calibrate(whole);

  BeResult beResult;
  std::thread beThread([&] { beResult = runBe(be, lead, loop.seconds); });
  std::this_thread::sleep_for(std::chrono::duration<double>(lead));
  HpResult hpResult = runHp(hp, loop);
  beThread.join();
  writeServiceLog(hpResult, serviceLog);
  std::printf("{\"hp\":%s,\"be\":%s,\"hp_sms\":%u,\"be_sms\":%u}\n", hpJson(hpResult, kind).c_str(),
              beJson(beResult, be.config()).c_str(), hpPart.sms, bePart.sms);
  return 0;
}
