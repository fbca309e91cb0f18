// 13. cudaLaunchHostFunc and cudaStreamAddCallback: stream ordering between
//     host callbacks and device work. A callback (enqueued behind a slow
//     kernel) fills a pinned buffer and sets a host flag; the H2D copy of that
//     buffer and the kernel using it are enqueued after the callback and must
//     observe its writes. A later callback checks that the preceding D2H copy
//     has completed.
#include <atomic>
#include <vector>

#include "gpu_test_common.h"

constexpr int kN = 1 << 16;

__global__ void spin(unsigned long long ns) { gpu_spin_ns(ns); }

__global__ void consume(const int* in, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 5 + 1;
}

struct Ctx {
  int* pinned_in;        // filled by fill_cb
  const int* pinned_out; // checked by verify_cb
  std::atomic<int> flag{0};
  std::atomic<int> seq{0};
  int fill_order = -1;
  int verify_order = -1;
  int verify_bad = -1;
  cudaError_t verify_status = cudaErrorUnknown;
  int order[16];
  int n_order = 0;
};

static void CUDART_CB fill_cb(void* p) {
  Ctx* c = static_cast<Ctx*>(p);
  Rng rng(1313);
  for (int i = 0; i < kN; ++i) c->pinned_in[i] = rng.range(-100000, 100000);
  c->fill_order = c->seq++;
  c->flag = 1;
}

static void CUDART_CB verify_cb(cudaStream_t, cudaError_t status, void* p) {
  Ctx* c = static_cast<Ctx*>(p);
  c->verify_status = status;
  int bad = 0;
  for (int i = 0; i < kN; ++i)
    if (c->pinned_out[i] != c->pinned_in[i] * 5 + 1) ++bad;
  c->verify_bad = bad;
  c->verify_order = c->seq++;
}

struct OrderArg {
  Ctx* c;
  int id;
};
static void CUDART_CB order_cb(void* p) {
  OrderArg* a = static_cast<OrderArg*>(p);
  a->c->order[a->c->n_order++] = a->id;
}

int main() {
  Ctx ctx;
  int *h_in, *h_out;
  CHECK(cudaMallocHost(&h_in, sizeof(int) * kN));
  CHECK(cudaMallocHost(&h_out, sizeof(int) * kN));
  for (int i = 0; i < kN; ++i) h_in[i] = -7, h_out[i] = 0;  // not what fill_cb writes
  ctx.pinned_in = h_in;
  ctx.pinned_out = h_out;

  int *d_in, *d_out;
  CHECK(cudaMalloc(&d_in, sizeof(int) * kN));
  CHECK(cudaMalloc(&d_out, sizeof(int) * kN));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  spin<<<1, 1, 0, s>>>(200ull * 1000 * 1000);  // keeps the callback from running early
  CHECK_LAUNCH();
  CHECK(cudaLaunchHostFunc(s, fill_cb, &ctx));
  CHECK(cudaMemcpyAsync(d_in, h_in, sizeof(int) * kN, cudaMemcpyHostToDevice, s));
  consume<<<(kN + 255) / 256, 256, 0, s>>>(d_in, d_out, kN);
  CHECK_LAUNCH();
  CHECK(cudaMemcpyAsync(h_out, d_out, sizeof(int) * kN, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamAddCallback(s, verify_cb, &ctx, 0));
  CHECK(cudaStreamSynchronize(s));

  Rng rng(1313);
  int bad = 0;
  for (int i = 0; i < kN; ++i) {
    int v = rng.range(-100000, 100000);
    if (h_out[i] != v * 5 + 1) ++bad;
  }
  std::printf("flag=%d fill_order=%d verify_order=%d verify_status=%s verify_bad=%d\n",
              ctx.flag.load(), ctx.fill_order, ctx.verify_order, cudaGetErrorName(ctx.verify_status),
              ctx.verify_bad);
  std::printf("result checksum=%016llx bad=%d\n",
              static_cast<unsigned long long>(checksum_bytes(h_out, sizeof(int) * kN)), bad);
  expect(ctx.flag == 1, "host flag set by cudaLaunchHostFunc callback");
  expect(bad == 0, "H2D after callback copied the callback's data");
  expect(ctx.fill_order == 0 && ctx.verify_order == 1, "callbacks ran in stream order");
  expect(ctx.verify_status == cudaSuccess && ctx.verify_bad == 0,
         "cudaStreamAddCallback saw completed D2H");

  // Ten host functions interleaved with kernels run in order.
  OrderArg args[10];
  for (int i = 0; i < 10; ++i) {
    args[i] = OrderArg{&ctx, i};
    if (i % 3 == 0) {
      spin<<<1, 1, 0, s>>>(5ull * 1000 * 1000);
      CHECK_LAUNCH();
    }
    if (i % 2 == 0) {
      CHECK(cudaLaunchHostFunc(s, order_cb, &args[i]));
    } else {
      CHECK(cudaStreamAddCallback(s, [](cudaStream_t, cudaError_t, void* p) { order_cb(p); }, &args[i], 0));
    }
  }
  CHECK(cudaStreamSynchronize(s));
  bool in_order = ctx.n_order == 10;
  std::printf("order:");
  for (int i = 0; i < ctx.n_order; ++i) {
    std::printf(" %d", ctx.order[i]);
    in_order = in_order && ctx.order[i] == i;
  }
  std::printf("\n");
  expect(in_order, "10 host callbacks in enqueue order");

  // Cross-stream: stream B waits for an event recorded after a callback on A.
  cudaStream_t b;
  CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  cudaEvent_t ev;
  CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  for (int i = 0; i < kN; ++i) h_in[i] = 0;
  ctx.flag = 0;
  spin<<<1, 1, 0, s>>>(100ull * 1000 * 1000);
  CHECK_LAUNCH();
  CHECK(cudaLaunchHostFunc(s, fill_cb, &ctx));
  CHECK(cudaEventRecord(ev, s));
  CHECK(cudaStreamWaitEvent(b, ev, 0));
  CHECK(cudaMemcpyAsync(d_in, h_in, sizeof(int) * kN, cudaMemcpyHostToDevice, b));
  consume<<<(kN + 255) / 256, 256, 0, b>>>(d_in, d_out, kN);
  CHECK_LAUNCH();
  CHECK(cudaMemcpyAsync(h_out, d_out, sizeof(int) * kN, cudaMemcpyDeviceToHost, b));
  CHECK(cudaStreamSynchronize(b));
  Rng rng2(1313);
  bad = 0;
  for (int i = 0; i < kN; ++i) {
    int v = rng2.range(-100000, 100000);
    if (h_out[i] != v * 5 + 1) ++bad;
  }
  std::printf("cross-stream flag=%d bad=%d\n", ctx.flag.load(), bad);
  expect(ctx.flag == 1 && bad == 0, "other stream ordered after callback via event");

  // Host function on the legacy default stream.
  ctx.n_order = 0;
  OrderArg a0{&ctx, 42};
  CHECK(cudaLaunchHostFunc(0, order_cb, &a0));
  CHECK(cudaDeviceSynchronize());
  expect(ctx.n_order == 1 && ctx.order[0] == 42, "cudaLaunchHostFunc on stream 0");

  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaEventDestroy(ev));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaStreamDestroy(b));
  CHECK(cudaFree(d_in));
  CHECK(cudaFree(d_out));
  CHECK(cudaFreeHost(h_in));
  CHECK(cudaFreeHost(h_out));
  return finish("host_callbacks");
}
