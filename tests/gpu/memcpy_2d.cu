// 12. Pitched memory: cudaMallocPitch, cudaMemcpy2D / cudaMemcpy2DAsync in all
//     directions (H2D, D2D, D2H, H2H), cudaMemset2D / cudaMemset2DAsync,
//     sub-rectangle copies, a kernel working on pitched rows.
#include <vector>

#include "gpu_test_common.h"

__global__ void pitched_op(float* base, size_t pitch, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) {
    float* row = reinterpret_cast<float*>(reinterpret_cast<char*>(base) + y * pitch);
    row[x] = row[x] * 2.0f + static_cast<float>(x - y);
  }
}

static uint64_t rect_checksum(const float* p, size_t pitch_bytes, int w, int h) {
  uint64_t c = 0;
  for (int y = 0; y < h; ++y)
    c = c * 1099511628211ull +
        checksum_bytes(reinterpret_cast<const char*>(p) + y * pitch_bytes, sizeof(float) * w);
  return c;
}

int main() {
  const int w = 777, h = 333;  // elements
  const size_t wb = sizeof(float) * w;
  const size_t hpitch = wb + 64;  // padded host rows
  const size_t hpitch_floats = hpitch / sizeof(float);

  Rng rng(12);
  std::vector<float> src(hpitch_floats * h, -1.0f), dst(hpitch_floats * h, 0.0f);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) src[y * hpitch_floats + x] = static_cast<float>(rng.range(-4096, 4096)) / 8.0f;

  float *d1, *d2;
  size_t p1 = 0, p2 = 0;
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&d1), &p1, wb, h));
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&d2), &p2, wb, h));
  std::printf("pitch >= row bytes and 128-byte aligned: %s\n",
              (p1 >= wb && p1 % 128 == 0 && p2 == p1) ? "yes" : "no");
  expect(p1 >= wb && p1 % 128 == 0, "cudaMallocPitch pitch");

  // H2D, kernel, D2D, D2H.
  CHECK(cudaMemcpy2D(d1, p1, src.data(), hpitch, wb, h, cudaMemcpyHostToDevice));
  dim3 block(32, 8), grid((w + 31) / 32, (h + 7) / 8);
  pitched_op<<<grid, block>>>(d1, p1, w, h);
  CHECK_LAUNCH();
  CHECK(cudaMemset2D(d2, p2, 0, wb, h));
  CHECK(cudaMemcpy2D(d2, p2, d1, p1, wb, h, cudaMemcpyDeviceToDevice));
  // cudaMemset2D a sub-rectangle: rows 10..59, columns 20..119 -> bytes 0x7F.
  char* sub = reinterpret_cast<char*>(d2) + 10 * p2 + 20 * sizeof(float);
  CHECK(cudaMemset2D(sub, p2, 0x7F, 100 * sizeof(float), 50));
  CHECK(cudaMemcpy2D(dst.data(), hpitch, d2, p2, wb, h, cudaMemcpyDeviceToHost));

  float pattern;
  std::memset(&pattern, 0x7F, sizeof pattern);
  int bad = 0, bad_pad = 0;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      float want = src[y * hpitch_floats + x] * 2.0f + static_cast<float>(x - y);
      if (y >= 10 && y < 60 && x >= 20 && x < 120) want = pattern;
      if (std::memcmp(&dst[y * hpitch_floats + x], &want, 4) != 0) ++bad;
    }
    for (size_t x = w; x < hpitch_floats; ++x)
      if (dst[y * hpitch_floats + x] != 0.0f) ++bad_pad;  // host padding untouched
  }
  std::printf("sync 2D: checksum=%016llx bad=%d bad_pad=%d\n",
              static_cast<unsigned long long>(rect_checksum(dst.data(), hpitch, w, h)), bad, bad_pad);
  expect(bad == 0, "cudaMemcpy2D H2D/D2D/D2H + cudaMemset2D");
  expect(bad_pad == 0, "host row padding not written");

  // Sub-rectangle D2H: rows 100..139, columns 300..399 into a tight buffer.
  std::vector<float> tile(100 * 40);
  CHECK(cudaMemcpy2D(tile.data(), 100 * sizeof(float),
                     reinterpret_cast<char*>(d1) + 100 * p1 + 300 * sizeof(float), p1,
                     100 * sizeof(float), 40, cudaMemcpyDeviceToHost));
  bad = 0;
  for (int y = 0; y < 40; ++y)
    for (int x = 0; x < 100; ++x) {
      int gy = 100 + y, gx = 300 + x;
      float want = src[gy * hpitch_floats + gx] * 2.0f + static_cast<float>(gx - gy);
      if (tile[y * 100 + x] != want) ++bad;
    }
  expect(bad == 0, "sub-rectangle cudaMemcpy2D D2H");

  // H2H 2D copy (host pitch -> tight).
  std::vector<float> tight(static_cast<size_t>(w) * h);
  CHECK(cudaMemcpy2D(tight.data(), wb, src.data(), hpitch, wb, h, cudaMemcpyHostToHost));
  bad = 0;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      if (tight[y * w + x] != src[y * hpitch_floats + x]) ++bad;
  expect(bad == 0, "cudaMemcpy2D H2H");

  // Async versions with pinned host memory on a stream.
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *hp_src, *hp_dst;
  CHECK(cudaMallocHost(&hp_src, hpitch * h));
  CHECK(cudaMallocHost(&hp_dst, hpitch * h));
  for (size_t i = 0; i < hpitch_floats * h; ++i) hp_src[i] = src[i] + 1.0f;
  std::memset(hp_dst, 0, hpitch * h);
  CHECK(cudaMemset2DAsync(d1, p1, 0, wb, h, s));
  CHECK(cudaMemcpy2DAsync(d1, p1, hp_src, hpitch, wb, h, cudaMemcpyHostToDevice, s));
  pitched_op<<<grid, block, 0, s>>>(d1, p1, w, h);
  CHECK_LAUNCH();
  CHECK(cudaMemcpy2DAsync(d2, p2, d1, p1, wb, h, cudaMemcpyDeviceToDevice, s));
  CHECK(cudaMemset2DAsync(d2 + 5, p2, 0, 3 * sizeof(float), h, s));  // zero columns 5..7
  CHECK(cudaMemcpy2DAsync(hp_dst, hpitch, d2, p2, wb, h, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  bad = 0;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      float want = (src[y * hpitch_floats + x] + 1.0f) * 2.0f + static_cast<float>(x - y);
      if (x >= 5 && x < 8) want = 0.0f;
      if (hp_dst[y * hpitch_floats + x] != want) ++bad;
    }
  std::printf("async 2D: checksum=%016llx bad=%d\n",
              static_cast<unsigned long long>(rect_checksum(hp_dst, hpitch, w, h)), bad);
  expect(bad == 0, "cudaMemcpy2DAsync H2D/D2D/D2H + cudaMemset2DAsync");

  // Async H2H and a 2D copy between a pitched and a linear device buffer.
  CHECK(cudaMemcpy2DAsync(hp_dst, hpitch, hp_src, hpitch, wb, h, cudaMemcpyHostToHost, s));
  float* dlin;
  CHECK(cudaMalloc(&dlin, wb * h));
  CHECK(cudaMemcpy2DAsync(dlin, wb, d2, p2, wb, h, cudaMemcpyDeviceToDevice, s));
  std::vector<float> lin(static_cast<size_t>(w) * h);
  CHECK(cudaMemcpyAsync(lin.data(), dlin, wb * h, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  bad = 0;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      if (hp_dst[y * hpitch_floats + x] != src[y * hpitch_floats + x] + 1.0f) ++bad;
      float want = (src[y * hpitch_floats + x] + 1.0f) * 2.0f + static_cast<float>(x - y);
      if (x >= 5 && x < 8) want = 0.0f;
      if (lin[y * w + x] != want) ++bad;
    }
  expect(bad == 0, "cudaMemcpy2DAsync H2H and pitched->linear D2D");

  // cudaMemset3D over a sub-box of a cudaMalloc3D allocation (slices not contiguous: the box is
  // shorter than the allocation), then cudaMemset3DAsync over all of it but one byte column.
  const cudaExtent alloc = make_cudaExtent(100, 7, 5);
  cudaPitchedPtr box;
  CHECK(cudaMalloc3D(&box, alloc));
  CHECK(cudaMemset3DAsync(box, 0x11, make_cudaExtent(99, 7, 5), s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemset3D(box, 0x5a, make_cudaExtent(40, 3, 4)));
  std::vector<unsigned char> cube(box.pitch * alloc.height * alloc.depth);
  CHECK(cudaMemcpy(cube.data(), box.ptr, cube.size(), cudaMemcpyDeviceToHost));
  // Bytes of the allocation's box at (x, y, z) for which `wrong` holds; `at` is the byte's offset.
  auto countWrong = [&](size_t pitch, auto&& wrong) {
    int n = 0;
    for (size_t z = 0; z < alloc.depth; ++z)
      for (size_t y = 0; y < alloc.height; ++y)
        for (size_t x = 0; x < alloc.width; ++x) n += wrong(x, y, z, (z * alloc.height + y) * pitch + x) ? 1 : 0;
    return n;
  };
  bad = countWrong(box.pitch, [&](size_t x, size_t y, size_t z, size_t at) {
    if (x >= 99) return false;  // never set
    return cube[at] != (x < 40 && y < 3 && z < 4 ? 0x5a : 0x11);
  });
  std::printf("cudaMemset3D box: bad=%d\n", bad);
  expect(bad == 0, "cudaMemset3D / cudaMemset3DAsync on a pitched 3D allocation");
  // One row wider than the pitch is a linear range (measured natively on the H200: accepted).
  EXPECT_ERR(cudaMemset3D(box, 0, make_cudaExtent(box.pitch + 1, 1, 1)), cudaSuccess);
  // cudaMemcpy3DPeer on one device: the whole box into a second pitched allocation.
  cudaPitchedPtr box2;
  CHECK(cudaMalloc3D(&box2, alloc));
  cudaMemcpy3DPeerParms peerBox{};
  peerBox.srcPtr = box;
  peerBox.srcDevice = 0;
  peerBox.dstPtr = box2;
  peerBox.dstDevice = 0;
  peerBox.extent = make_cudaExtent(alloc.width, alloc.height, alloc.depth);
  CHECK(cudaMemcpy3DPeer(&peerBox));
  CHECK(cudaMemcpy(cube.data(), box.ptr, cube.size(), cudaMemcpyDeviceToHost));  // as the single-row memset left it
  std::vector<unsigned char> cube2(box2.pitch * alloc.height * alloc.depth);
  CHECK(cudaMemcpy(cube2.data(), box2.ptr, cube2.size(), cudaMemcpyDeviceToHost));
  bad = countWrong(box2.pitch, [&](size_t x, size_t y, size_t z, size_t at) {
    return cube2[at] != cube[(z * alloc.height + y) * box.pitch + x];
  });
  expect(bad == 0, "cudaMemcpy3DPeer of a pitched box on one device");
  CHECK(cudaFree(box2.ptr));
  CHECK(cudaFree(box.ptr));

  // Peer copies on one device are device-to-device copies.
  float* peer;
  CHECK(cudaMalloc(&peer, wb * h));
  CHECK(cudaMemcpyPeer(peer, 0, dlin, 0, wb * h));
  CHECK(cudaMemcpyPeerAsync(dlin, 0, peer, 0, wb, s));  // the first row back onto itself
  std::vector<float> peerCopy(static_cast<size_t>(w) * h);
  CHECK(cudaMemcpyAsync(peerCopy.data(), peer, wb * h, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  expect(peerCopy == lin, "cudaMemcpyPeer / cudaMemcpyPeerAsync on one device");
  int devices = 0;
  CHECK(cudaGetDeviceCount(&devices));
  EXPECT_ERR(cudaMemcpyPeer(peer, devices, dlin, 0, wb), cudaErrorInvalidDevice);
  CHECK(cudaFree(peer));

  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFreeHost(hp_src));
  CHECK(cudaFreeHost(hp_dst));
  CHECK(cudaFree(d1));
  CHECK(cudaFree(d2));
  CHECK(cudaFree(dlin));
  return finish("memcpy_2d");
}
