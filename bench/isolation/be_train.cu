// Training-like best-effort client for the isolation benchmark (bench/isolation/run.sh); the
// shapes are in be_workload.cuh. Built twice by CMake: with PTX (tallyd can transform its
// kernels) and SASS only (as stock frameworks ship).
//
//   be_train [--shape mixed|long|short|mem] [--block-us US | --block-iterations N]
//            [--seconds S] [--lead S]
// prints {"iterations":N,"seconds":S,"iterations_per_s":R,"shape":..,"block_us":..,"block_iterations":..}
#include "be_workload.cuh"

int main(int argc, char** argv) {
  using namespace isolation;
  Args args(argc, argv,
            "[--shape mixed|long|short|mem] [--block-us US | --block-iterations N] [--seconds S] [--lead S]");
  const double seconds = args.number("seconds", 10);
  const double lead = args.number("lead", 0);  // uncounted seconds before the window: HP starts meanwhile
  BeConfig config = beConfig(args);
  args.finish();

  const int sms = deviceSms();
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  BeWorkload be(config, sms, stream);
  be.calibrate(stream);
  BeResult r = runBe(be, lead, seconds);
  std::printf("%s\n", beJson(r, be.config()).c_str());
  return 0;
}
