// Inference-like high-priority client for the isolation benchmark (bench/isolation/run.sh); the
// requests and the arrival loop are in hp_workload.cuh. Prints one JSON object:
//   service  = completion - start of the request        (µs, p50/p99/mean)
//   response = completion - scheduled arrival           (µs, p50/p99/mean)
//
//   hp_infer [--request large|small] --solo SECONDS      closed loop: the solo service time
//   hp_infer [--request large|small] --rate REQ_PER_S --seconds S [--seed N]
// --service-log FILE also writes every request's start, service and response time (TSV).
// --pdl 1 chains the request's kernels with programmatic dependent launch (hp_workload.cuh).
#include "hp_workload.cuh"

int main(int argc, char** argv) {
  using namespace isolation;
  Args args(argc, argv, "[--request large|small] (--solo SECONDS | --rate REQ_PER_S --seconds S [--seed N]) "
                        "[--service-log FILE] [--pdl 1]");
  HpLoop loop;
  loop.solo = args.number("solo", 0);
  loop.rate = args.number("rate", 0);
  loop.seconds = args.number("seconds", 10);
  loop.seed = unsigned(args.number("seed", 1));
  const RequestKind kind = requestKind(args.text("request", "large"));
  const std::string serviceLog = args.text("service-log", "");
  const bool chained = args.number("pdl", 0) != 0;
  args.finish();
  if (loop.solo <= 0 && loop.rate <= 0) args.usageError();

  deviceSms();
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  HpModel model(kind, stream, chained);
  HpResult r = runHp(model, loop);
  writeServiceLog(r, serviceLog);
  std::printf("%s\n", hpJson(r, kind).c_str());
  return 0;
}
