// 29. CUDA arrays, texture and surface objects: 1D/2D/3D arrays with copies in and out
//     (cudaMemcpy2DToArray/FromArray, cudaMemcpy3D, cudaMemcpy2DArrayToArray, cuMemcpyHtoA/AtoH,
//     cuMemcpy2D with an array side), cudaGetChannelDesc and cudaArrayGetInfo, a 2D texture with
//     linear filtering and normalized coordinates under clamp and wrap addressing, layered and
//     cubemap textures, a 3D texture, a mipmapped texture sampled per level (tex2DLod), a
//     texture over pitch-2D memory, a surface written by a
//     kernel and read back, and the texture object queries. Every value is checked against one
//     computed on the host and printed; sample points use filter weights that are exact in the
//     hardware's 8-bit fixed-point fractions, so the output is the same on every GPU.
#include <algorithm>
#include <cmath>
#include <vector>

#include "gpu_test_common.h"

__global__ void sample2D(cudaTextureObject_t tex, const float2* coords, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex2D<float>(tex, coords[i].x, coords[i].y);
}

__global__ void sampleLayered(cudaTextureObject_t tex, float* out, int w, int h, int layers) {
  int x = threadIdx.x, y = threadIdx.y, layer = blockIdx.x;
  if (x < w && y < h && layer < layers) out[(layer * h + y) * w + x] = tex2DLayered<float>(tex, x + 0.5f, y + 0.5f, layer);
}

__global__ void sampleCubemap(cudaTextureObject_t tex, const float4* directions, float* out, int n) {
  int i = threadIdx.x;
  if (i < n) out[i] = texCubemap<float>(tex, directions[i].x, directions[i].y, directions[i].z);
}

__global__ void sample3D(cudaTextureObject_t tex, float* out, int w, int h, int d) {
  int x = threadIdx.x, y = threadIdx.y, z = threadIdx.z;
  if (x < w && y < h && z < d) out[(z * h + y) * w + x] = tex3D<float>(tex, x + 0.5f, y + 0.5f, z + 0.5f);
}

__global__ void writeSurface(cudaSurfaceObject_t surf, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) surf2Dwrite(static_cast<float>(x * 100 + y), surf, x * static_cast<int>(sizeof(float)), y);
}

__global__ void readSurface(cudaSurfaceObject_t surf, float* out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) out[y * w + x] = surf2Dread<float>(surf, x * static_cast<int>(sizeof(float)), y) + 0.5f;
}

__global__ void sampleLod(cudaTextureObject_t tex, float* out, int levels) {
  int l = threadIdx.x;
  if (l < levels) out[l] = tex2DLod<float>(tex, 0.5f, 0.5f, static_cast<float>(l));
}

__global__ void samplePitch(cudaTextureObject_t tex, float* out, int w, int h) {
  int x = threadIdx.x, y = threadIdx.y;
  if (x < w && y < h) out[y * w + x] = tex2D<float>(tex, x + 0.5f, y + 0.5f);
}

static bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Bilinear filtering as the texture unit does it (CUDA C++ Programming Guide, "Linear Filtering"),
// for weights exact in 8 fractional bits. `wrap`: the coordinate wraps (else it clamps).
static float reference2D(const std::vector<float>& t, int w, int h, float u, float v, bool wrap) {
  auto index = [wrap](int i, int n) { return wrap ? ((i % n) + n) % n : (i < 0 ? 0 : i >= n ? n - 1 : i); };
  float xb = (wrap ? u - std::floor(u) : u) * w - 0.5f, yb = (wrap ? v - std::floor(v) : v) * h - 0.5f;
  int i = static_cast<int>(std::floor(xb)), j = static_cast<int>(std::floor(yb));
  float a = xb - i, b = yb - j;
  auto at = [&](int x, int y) { return t[index(y, h) * w + index(x, w)]; };
  return (1 - a) * (1 - b) * at(i, j) + a * (1 - b) * at(i + 1, j) + (1 - a) * b * at(i, j + 1) + a * b * at(i + 1, j + 1);
}

static void channelAndInfo() {
  cudaArray_t array = nullptr;
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<float4>();
  CHECK(cudaMalloc3DArray(&array, &desc, make_cudaExtent(5, 4, 3), cudaArraySurfaceLoadStore));
  cudaChannelFormatDesc got{};
  CHECK(cudaGetChannelDesc(&got, array));
  std::printf("channel desc: x=%d y=%d z=%d w=%d kind=%d\n", got.x, got.y, got.z, got.w, static_cast<int>(got.f));
  expect(got.x == 32 && got.y == 32 && got.z == 32 && got.w == 32 && got.f == cudaChannelFormatKindFloat,
         "cudaGetChannelDesc float4");
  cudaExtent extent{};
  unsigned flags = 0;
  CHECK(cudaArrayGetInfo(&got, &extent, &flags, array));
  std::printf("array info: %zu x %zu x %zu flags=%u\n", extent.width, extent.height, extent.depth, flags);
  expect(extent.width == 5 && extent.height == 4 && extent.depth == 3 && flags == cudaArraySurfaceLoadStore,
         "cudaArrayGetInfo extent and flags");
  cudaChannelFormatDesc uchar2 = cudaCreateChannelDesc(8, 8, 0, 0, cudaChannelFormatKindUnsigned);
  cudaArray_t small = nullptr;
  CHECK(cudaMallocArray(&small, &uchar2, 7, 0));
  CHECK(cudaArrayGetInfo(&got, &extent, &flags, small));
  std::printf("1D array info: %zu x %zu x %zu x=%d y=%d kind=%d\n", extent.width, extent.height, extent.depth, got.x, got.y,
              static_cast<int>(got.f));
  expect(extent.width == 7 && extent.height == 0 && extent.depth == 0 && got.x == 8 && got.y == 8 && got.z == 0,
         "cudaArrayGetInfo of a 1D uchar2 array");
  CHECK(cudaFreeArray(small));
  CHECK(cudaFreeArray(array));
}

static void copies() {
  // 2D: 12 x 5 floats, in through cudaMemcpy2DToArray from padded host rows, out whole and a window.
  const int w = 12, h = 5;
  std::vector<float> host(16 * h);
  for (int i = 0; i < 16 * h; ++i) host[i] = static_cast<float>(i * 3 - 7);
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
  cudaArray_t a = nullptr, b = nullptr;
  CHECK(cudaMallocArray(&a, &desc, w, h));
  CHECK(cudaMallocArray(&b, &desc, w, h));
  CHECK(cudaMemcpy2DToArray(a, 0, 0, host.data(), 16 * sizeof(float), w * sizeof(float), h, cudaMemcpyHostToDevice));
  std::vector<float> back(w * h, 0), expected(w * h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) expected[y * w + x] = host[y * 16 + x];
  CHECK(cudaMemcpy2DFromArray(back.data(), w * sizeof(float), a, 0, 0, w * sizeof(float), h, cudaMemcpyDeviceToHost));
  std::printf("2D array round trip: first %.1f last %.1f checksum %016llx\n", back[0], back[w * h - 1],
              static_cast<unsigned long long>(checksum_bytes(back.data(), back.size() * sizeof(float))));
  expect(same(back, expected), "2D array host -> array -> host");
  // A 3 x 2 window at (4, 2), async on a stream.
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  std::vector<float> window(6, 0);
  CHECK(cudaMemcpy2DFromArrayAsync(window.data(), 3 * sizeof(float), a, 4 * sizeof(float), 2, 3 * sizeof(float), 2,
                                   cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  bool windowOk = true;
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 3; ++x) windowOk = windowOk && window[y * 3 + x] == host[(2 + y) * 16 + 4 + x];
  std::printf("window: %.1f %.1f %.1f / %.1f %.1f %.1f\n", window[0], window[1], window[2], window[3], window[4], window[5]);
  expect(windowOk, "2D array window read asynchronously");
  // Array to array, then through device memory and back.
  CHECK(cudaMemcpy2DArrayToArray(b, 0, 0, a, 0, 0, w * sizeof(float), h, cudaMemcpyDeviceToDevice));
  float* device = nullptr;
  size_t pitch = 0;
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&device), &pitch, w * sizeof(float), h));
  CHECK(cudaMemcpy2DFromArray(device, pitch, b, 0, 0, w * sizeof(float), h, cudaMemcpyDeviceToDevice));
  CHECK(cudaMemset2D(device, pitch, 0, 2 * sizeof(float), 1));  // two zeros at the start of row 0
  CHECK(cudaMemcpy2DToArray(a, 0, 0, device, pitch, w * sizeof(float), h, cudaMemcpyDeviceToDevice));
  std::fill(back.begin(), back.end(), -1.0f);
  CHECK(cudaMemcpy2DFromArray(back.data(), w * sizeof(float), a, 0, 0, w * sizeof(float), h, cudaMemcpyDeviceToHost));
  expected[0] = expected[1] = 0.0f;
  expect(same(back, expected), "array -> array -> pitched device -> array");

  // 3D: 6 x 4 x 3 ints through cudaMemcpy3D with pitched host pointers, and a box in the middle.
  const int dw = 6, dh = 4, dd = 3;
  cudaChannelFormatDesc idesc = cudaCreateChannelDesc<int>();
  cudaArray_t volume = nullptr;
  CHECK(cudaMalloc3DArray(&volume, &idesc, make_cudaExtent(dw, dh, dd)));
  std::vector<int> vin(dw * dh * dd), vout(dw * dh * dd, 0);
  for (int i = 0; i < dw * dh * dd; ++i) vin[i] = i * i - 50;
  cudaMemcpy3DParms in{};
  in.srcPtr = make_cudaPitchedPtr(vin.data(), dw * sizeof(int), dw, dh);
  in.dstArray = volume;
  in.extent = make_cudaExtent(dw, dh, dd);
  in.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&in));
  cudaMemcpy3DParms out{};
  out.srcArray = volume;
  out.dstPtr = make_cudaPitchedPtr(vout.data(), dw * sizeof(int), dw, dh);
  out.extent = make_cudaExtent(dw, dh, dd);
  out.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3DAsync(&out, stream));
  CHECK(cudaStreamSynchronize(stream));
  std::printf("3D array round trip: checksum %016llx\n",
              static_cast<unsigned long long>(checksum_bytes(vout.data(), vout.size() * sizeof(int))));
  expect(vin == vout, "3D array host -> array -> host");
  std::vector<int> box(2 * 2 * 2, 0);
  cudaMemcpy3DParms part{};
  part.srcArray = volume;
  part.srcPos = make_cudaPos(3, 1, 1);
  part.dstPtr = make_cudaPitchedPtr(box.data(), 2 * sizeof(int), 2, 2);
  part.extent = make_cudaExtent(2, 2, 2);
  part.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&part));
  bool boxOk = true;
  for (int z = 0; z < 2; ++z)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 2; ++x) boxOk = boxOk && box[(z * 2 + y) * 2 + x] == vin[((1 + z) * dh + 1 + y) * dw + 3 + x];
  std::printf("3D box at (3,1,1): %d %d ... %d\n", box[0], box[1], box[7]);
  expect(boxOk, "3D array box read with srcPos");

  // Array -> pitched 3D device memory (cudaMalloc3D) -> host, one slice at a time from z = 1.
  cudaPitchedPtr pitched{};
  CHECK(cudaMalloc3D(&pitched, make_cudaExtent(dw * sizeof(int), dh, dd)));
  cudaMemcpy3DParms toDevice{};
  toDevice.srcArray = volume;
  toDevice.dstPtr = pitched;
  toDevice.extent = make_cudaExtent(dw, dh, dd);
  toDevice.kind = cudaMemcpyDeviceToDevice;
  CHECK(cudaMemcpy3D(&toDevice));
  std::vector<int> slices(dw * dh * 2, 0);
  cudaMemcpy3DParms toHost{};
  toHost.srcPtr = pitched;
  toHost.srcPos = make_cudaPos(0, 0, 1);
  toHost.dstPtr = make_cudaPitchedPtr(slices.data(), dw * sizeof(int), dw, dh);
  toHost.extent = make_cudaExtent(dw * sizeof(int), dh, 2);
  toHost.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&toHost));
  expect(std::equal(slices.begin(), slices.end(), vin.begin() + dw * dh),
         "3D array -> cudaMalloc3D memory -> host (slices 1 and 2)");
  CHECK(cudaFree(pitched.ptr));

  // Driver: a 1D array of 10 shorts through cuMemcpyHtoA / cuMemcpyAtoH, and cuMemcpy2D to it.
  auto arrayCreate = driver_fn<CUresult (*)(CUarray*, const CUDA_ARRAY3D_DESCRIPTOR*)>("cuArray3DCreate");
  auto getDescriptor = driver_fn<CUresult (*)(CUDA_ARRAY3D_DESCRIPTOR*, CUarray)>("cuArray3DGetDescriptor");
  auto htoa = driver_fn<CUresult (*)(CUarray, size_t, const void*, size_t)>("cuMemcpyHtoA");
  auto atoh = driver_fn<CUresult (*)(void*, CUarray, size_t, size_t)>("cuMemcpyAtoH");
  auto copy2D = driver_fn<CUresult (*)(const CUDA_MEMCPY2D*)>("cuMemcpy2D");
  auto arrayDestroy = driver_fn<CUresult (*)(CUarray)>("cuArrayDestroy");
  CUDA_ARRAY3D_DESCRIPTOR d1{};
  d1.Width = 10;
  d1.Format = CU_AD_FORMAT_SIGNED_INT16;
  d1.NumChannels = 1;
  CUarray line = nullptr;
  CU_CHECK(arrayCreate(&line, &d1));
  CUDA_ARRAY3D_DESCRIPTOR got{};
  CU_CHECK(getDescriptor(&got, line));
  expect(got.Width == 10 && got.Height == 0 && got.Format == CU_AD_FORMAT_SIGNED_INT16 && got.NumChannels == 1,
         "cuArray3DGetDescriptor");
  short shorts[10], shortsBack[10] = {};
  for (int i = 0; i < 10; ++i) shorts[i] = static_cast<short>(1000 - 37 * i);
  CU_CHECK(htoa(line, 0, shorts, sizeof shorts));
  short patch[3] = {-1, -2, -3};
  CUDA_MEMCPY2D p{};
  p.srcMemoryType = CU_MEMORYTYPE_HOST;
  p.srcHost = patch;
  p.srcPitch = sizeof patch;
  p.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  p.dstArray = line;
  p.dstXInBytes = 4 * sizeof(short);
  p.WidthInBytes = sizeof patch;
  p.Height = 1;
  CU_CHECK(copy2D(&p));
  CU_CHECK(atoh(shortsBack, line, 0, sizeof shortsBack));
  shorts[4] = -1, shorts[5] = -2, shorts[6] = -3;
  std::printf("1D driver array: %d %d %d %d %d ... %d\n", shortsBack[0], shortsBack[3], shortsBack[4], shortsBack[5],
              shortsBack[6], shortsBack[9]);
  expect(std::memcmp(shorts, shortsBack, sizeof shorts) == 0, "cuMemcpyHtoA, cuMemcpy2D to an array, cuMemcpyAtoH");
  CU_CHECK(arrayDestroy(line));

  CHECK(cudaFree(device));
  CHECK(cudaFreeArray(volume));
  CHECK(cudaFreeArray(a));
  CHECK(cudaFreeArray(b));
  CHECK(cudaStreamDestroy(stream));
}

static void filtered2D() {
  const int w = 16, h = 8;
  std::vector<float> texels(w * h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) texels[y * w + x] = static_cast<float>(x + 16 * y);
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
  cudaArray_t array = nullptr;
  CHECK(cudaMallocArray(&array, &desc, w, h));
  CHECK(cudaMemcpy2DToArray(array, 0, 0, texels.data(), w * sizeof(float), w * sizeof(float), h, cudaMemcpyHostToDevice));
  // Coordinates whose texel-space fractions are quarters (exact in the filter's 8 fractional bits).
  const float2 points[] = {{3.75f / w, 2.25f / h},  {8.0f / w, 4.0f / h},   {0.0f, 0.0f},      {1.0f, 1.0f},
                           {1.25f, 0.5f},           {-0.25f, 0.3125f},       {0.5f / w, 7.5f / h}, {15.25f / w, 1.75f / h}};
  const int n = sizeof points / sizeof points[0];
  float2* dPoints = nullptr;
  float* dOut = nullptr;
  CHECK(cudaMalloc(&dPoints, sizeof points));
  CHECK(cudaMalloc(&dOut, n * sizeof(float)));
  CHECK(cudaMemcpy(dPoints, points, sizeof points, cudaMemcpyHostToDevice));
  for (int mode = 0; mode < 2; ++mode) {
    bool wrap = mode == 1;
    cudaResourceDesc res{};
    res.resType = cudaResourceTypeArray;
    res.res.array.array = array;
    cudaTextureDesc tex{};
    tex.addressMode[0] = tex.addressMode[1] = wrap ? cudaAddressModeWrap : cudaAddressModeClamp;
    tex.filterMode = cudaFilterModeLinear;
    tex.readMode = cudaReadModeElementType;
    tex.normalizedCoords = 1;
    cudaTextureObject_t object = 0;
    CHECK(cudaCreateTextureObject(&object, &res, &tex, nullptr));
    sample2D<<<1, 32>>>(object, dPoints, dOut, n);
    CHECK_LAUNCH();
    float got[n];
    CHECK(cudaMemcpy(got, dOut, sizeof got, cudaMemcpyDeviceToHost));
    bool ok = true;
    for (int i = 0; i < n; ++i) {
      float want = reference2D(texels, w, h, points[i].x, points[i].y, wrap);
      std::printf("%s linear (%.6f, %.6f): %.4f expected %.4f\n", wrap ? "wrap " : "clamp", points[i].x, points[i].y,
                  got[i], want);
      ok = ok && std::fabs(got[i] - want) < 1e-4f;
    }
    expect(ok, wrap ? "2D texture, linear filter, normalized, wrap" : "2D texture, linear filter, normalized, clamp");
    if (!wrap) {
      cudaResourceDesc gotRes{};
      cudaTextureDesc gotTex{};
      CHECK(cudaGetTextureObjectResourceDesc(&gotRes, object));
      CHECK(cudaGetTextureObjectTextureDesc(&gotTex, object));
      expect(gotRes.resType == cudaResourceTypeArray && gotRes.res.array.array == array,
             "cudaGetTextureObjectResourceDesc names the array");
      expect(gotTex.filterMode == cudaFilterModeLinear && gotTex.normalizedCoords == 1 &&
                 gotTex.addressMode[0] == cudaAddressModeClamp,
             "cudaGetTextureObjectTextureDesc");
    }
    CHECK(cudaDestroyTextureObject(object));
  }
  CHECK(cudaFree(dPoints));
  CHECK(cudaFree(dOut));
  CHECK(cudaFreeArray(array));
}

static void layeredAndCubemap() {
  // Layered: 4 x 3 floats, 3 layers, point sampled at every texel.
  const int w = 4, h = 3, layers = 3;
  std::vector<float> texels(w * h * layers), got(w * h * layers, 0);
  for (int i = 0; i < w * h * layers; ++i) texels[i] = static_cast<float>(i) * 0.5f + 1.0f;
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
  cudaArray_t layered = nullptr;
  CHECK(cudaMalloc3DArray(&layered, &desc, make_cudaExtent(w, h, layers), cudaArrayLayered));
  cudaMemcpy3DParms in{};
  in.srcPtr = make_cudaPitchedPtr(texels.data(), w * sizeof(float), w, h);
  in.dstArray = layered;
  in.extent = make_cudaExtent(w, h, layers);
  in.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&in));
  cudaResourceDesc res{};
  res.resType = cudaResourceTypeArray;
  res.res.array.array = layered;
  cudaTextureDesc tex{};
  tex.filterMode = cudaFilterModePoint;
  tex.readMode = cudaReadModeElementType;
  cudaTextureObject_t object = 0;
  CHECK(cudaCreateTextureObject(&object, &res, &tex, nullptr));
  float* dOut = nullptr;
  CHECK(cudaMalloc(&dOut, got.size() * sizeof(float)));
  sampleLayered<<<layers, dim3(w, h)>>>(object, dOut, w, h, layers);
  CHECK_LAUNCH();
  CHECK(cudaMemcpy(got.data(), dOut, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  std::printf("layered: layer 0 first %.1f, layer 2 last %.1f (expected %.1f, %.1f)\n", got[0], got.back(), texels[0],
              texels.back());
  expect(same(got, texels), "layered 2D texture, every texel of every layer");
  CHECK(cudaDestroyTextureObject(object));
  CHECK(cudaFreeArray(layered));
  CHECK(cudaFree(dOut));

  // Cubemap: 8 x 8 faces, face f filled with 10 f + 1; the six axis directions pick the six faces.
  const int edge = 8;
  std::vector<float> faces(edge * edge * 6);
  for (int f = 0; f < 6; ++f)
    for (int i = 0; i < edge * edge; ++i) faces[f * edge * edge + i] = static_cast<float>(10 * f + 1);
  cudaArray_t cube = nullptr;
  CHECK(cudaMalloc3DArray(&cube, &desc, make_cudaExtent(edge, edge, 6), cudaArrayCubemap));
  cudaMemcpy3DParms cin{};
  cin.srcPtr = make_cudaPitchedPtr(faces.data(), edge * sizeof(float), edge, edge);
  cin.dstArray = cube;
  cin.extent = make_cudaExtent(edge, edge, 6);
  cin.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&cin));
  res.res.array.array = cube;
  CHECK(cudaCreateTextureObject(&object, &res, &tex, nullptr));
  const float4 directions[6] = {{1, 0.1f, 0.2f, 0}, {-1, 0.1f, 0.2f, 0}, {0.1f, 1, 0.2f, 0},
                                {0.1f, -1, 0.2f, 0}, {0.1f, 0.2f, 1, 0}, {0.1f, 0.2f, -1, 0}};
  float4* dDirections = nullptr;
  CHECK(cudaMalloc(&dDirections, sizeof directions));
  CHECK(cudaMalloc(&dOut, 6 * sizeof(float)));
  CHECK(cudaMemcpy(dDirections, directions, sizeof directions, cudaMemcpyHostToDevice));
  sampleCubemap<<<1, 6>>>(object, dDirections, dOut, 6);
  CHECK_LAUNCH();
  float cubeGot[6];
  CHECK(cudaMemcpy(cubeGot, dOut, sizeof cubeGot, cudaMemcpyDeviceToHost));
  bool cubeOk = true;
  for (int f = 0; f < 6; ++f) {
    std::printf("cubemap face %d: %.1f expected %.1f\n", f, cubeGot[f], static_cast<float>(10 * f + 1));
    cubeOk = cubeOk && cubeGot[f] == static_cast<float>(10 * f + 1);
  }
  expect(cubeOk, "cubemap texture, one direction per face");
  CHECK(cudaDestroyTextureObject(object));
  CHECK(cudaFreeArray(cube));
  CHECK(cudaFree(dDirections));
  CHECK(cudaFree(dOut));
}

static void volumeTexture() {
  const int w = 5, h = 4, d = 3;
  std::vector<float> texels(w * h * d), got(w * h * d, 0);
  for (int i = 0; i < w * h * d; ++i) texels[i] = static_cast<float>(7 * i % 23) - 3.0f;
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
  cudaArray_t volume = nullptr;
  CHECK(cudaMalloc3DArray(&volume, &desc, make_cudaExtent(w, h, d)));
  cudaMemcpy3DParms in{};
  in.srcPtr = make_cudaPitchedPtr(texels.data(), w * sizeof(float), w, h);
  in.dstArray = volume;
  in.extent = make_cudaExtent(w, h, d);
  in.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&in));
  cudaResourceDesc res{};
  res.resType = cudaResourceTypeArray;
  res.res.array.array = volume;
  cudaTextureDesc tex{};
  tex.filterMode = cudaFilterModePoint;
  tex.readMode = cudaReadModeElementType;
  cudaTextureObject_t object = 0;
  CHECK(cudaCreateTextureObject(&object, &res, &tex, nullptr));
  float* dOut = nullptr;
  CHECK(cudaMalloc(&dOut, got.size() * sizeof(float)));
  sample3D<<<1, dim3(w, h, d)>>>(object, dOut, w, h, d);
  CHECK_LAUNCH();
  CHECK(cudaMemcpy(got.data(), dOut, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  std::printf("3D texture: checksum %016llx expected %016llx\n",
              static_cast<unsigned long long>(checksum_bytes(got.data(), got.size() * sizeof(float))),
              static_cast<unsigned long long>(checksum_bytes(texels.data(), texels.size() * sizeof(float))));
  expect(same(got, texels), "3D texture, every texel");
  CHECK(cudaDestroyTextureObject(object));
  CHECK(cudaFreeArray(volume));
  CHECK(cudaFree(dOut));
}

static void surface() {
  const int w = 24, h = 10;
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
  cudaArray_t array = nullptr;
  CHECK(cudaMallocArray(&array, &desc, w, h, cudaArraySurfaceLoadStore));
  cudaResourceDesc res{};
  res.resType = cudaResourceTypeArray;
  res.res.array.array = array;
  cudaSurfaceObject_t surf = 0;
  CHECK(cudaCreateSurfaceObject(&surf, &res));
  writeSurface<<<dim3(3, 2), dim3(8, 5)>>>(surf, w, h);
  CHECK_LAUNCH();
  std::vector<float> got(w * h, 0), expected(w * h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) expected[y * w + x] = static_cast<float>(x * 100 + y);
  CHECK(cudaMemcpy2DFromArray(got.data(), w * sizeof(float), array, 0, 0, w * sizeof(float), h, cudaMemcpyDeviceToHost));
  std::printf("surface written: (0,0) %.1f (23,9) %.1f expected %.1f %.1f\n", got[0], got[w * h - 1], expected[0],
              expected[w * h - 1]);
  expect(same(got, expected), "surface written by a kernel, read back by copy");
  float* dOut = nullptr;
  CHECK(cudaMalloc(&dOut, got.size() * sizeof(float)));
  readSurface<<<dim3(3, 2), dim3(8, 5)>>>(surf, dOut, w, h);
  CHECK_LAUNCH();
  CHECK(cudaMemcpy(got.data(), dOut, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (float& v : expected) v += 0.5f;
  expect(same(got, expected), "surface read by a kernel");
  cudaResourceDesc gotRes{};
  CHECK(cudaGetSurfaceObjectResourceDesc(&gotRes, surf));
  expect(gotRes.resType == cudaResourceTypeArray && gotRes.res.array.array == array, "cudaGetSurfaceObjectResourceDesc");
  CHECK(cudaDestroySurfaceObject(surf));
  CHECK(cudaFreeArray(array));
  CHECK(cudaFree(dOut));
}

static void mipmapped() {
  const int edge = 16, levels = 3;
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
  cudaMipmappedArray_t mm = nullptr;
  CHECK(cudaMallocMipmappedArray(&mm, &desc, make_cudaExtent(edge, edge, 0), levels, 0));
  bool shapesOk = true;
  for (int l = 0; l < levels; ++l) {
    cudaArray_t level = nullptr;
    CHECK(cudaGetMipmappedArrayLevel(&level, mm, l));
    cudaChannelFormatDesc got{};
    cudaExtent extent{};
    unsigned flags = 0;
    CHECK(cudaArrayGetInfo(&got, &extent, &flags, level));
    int w = edge >> l;
    std::printf("mipmap level %d: %zu x %zu (expected %d x %d)\n", l, extent.width, extent.height, w, w);
    shapesOk = shapesOk && extent.width == static_cast<size_t>(w) && extent.height == static_cast<size_t>(w);
    std::vector<float> fill(w * w, static_cast<float>(10 * (l + 1)));
    CHECK(cudaMemcpy2DToArray(level, 0, 0, fill.data(), w * sizeof(float), w * sizeof(float), w, cudaMemcpyHostToDevice));
  }
  expect(shapesOk, "cudaGetMipmappedArrayLevel halves each level");
  cudaResourceDesc res{};
  res.resType = cudaResourceTypeMipmappedArray;
  res.res.mipmap.mipmap = mm;
  cudaTextureDesc tex{};
  tex.addressMode[0] = tex.addressMode[1] = cudaAddressModeClamp;
  tex.filterMode = cudaFilterModePoint;
  tex.mipmapFilterMode = cudaFilterModePoint;
  tex.readMode = cudaReadModeElementType;
  tex.normalizedCoords = 1;
  tex.maxMipmapLevelClamp = static_cast<float>(levels - 1);
  cudaTextureObject_t object = 0;
  CHECK(cudaCreateTextureObject(&object, &res, &tex, nullptr));
  float* dOut = nullptr;
  CHECK(cudaMalloc(&dOut, levels * sizeof(float)));
  sampleLod<<<1, levels>>>(object, dOut, levels);
  CHECK_LAUNCH();
  float got[levels];
  CHECK(cudaMemcpy(got, dOut, sizeof got, cudaMemcpyDeviceToHost));
  bool ok = true;
  for (int l = 0; l < levels; ++l) {
    std::printf("tex2DLod level %d: %.1f expected %.1f\n", l, got[l], static_cast<float>(10 * (l + 1)));
    ok = ok && got[l] == static_cast<float>(10 * (l + 1));
  }
  expect(ok, "mipmapped texture, one level per lod");
  CHECK(cudaDestroyTextureObject(object));
  CHECK(cudaFreeMipmappedArray(mm));
  CHECK(cudaFree(dOut));
}

static void pitchTexture() {
  const int w = 9, h = 6;
  std::vector<float> texels(w * h), got(w * h, 0);
  for (int i = 0; i < w * h; ++i) texels[i] = static_cast<float>(i) * 0.25f - 2.0f;
  float* device = nullptr;
  size_t pitch = 0;
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&device), &pitch, w * sizeof(float), h));
  CHECK(cudaMemcpy2D(device, pitch, texels.data(), w * sizeof(float), w * sizeof(float), h, cudaMemcpyHostToDevice));
  cudaResourceDesc res{};
  res.resType = cudaResourceTypePitch2D;
  res.res.pitch2D.devPtr = device;
  res.res.pitch2D.desc = cudaCreateChannelDesc<float>();
  res.res.pitch2D.width = w;
  res.res.pitch2D.height = h;
  res.res.pitch2D.pitchInBytes = pitch;
  cudaTextureDesc tex{};
  tex.filterMode = cudaFilterModePoint;
  tex.readMode = cudaReadModeElementType;
  cudaTextureObject_t object = 0;
  CHECK(cudaCreateTextureObject(&object, &res, &tex, nullptr));
  float* dOut = nullptr;
  CHECK(cudaMalloc(&dOut, got.size() * sizeof(float)));
  samplePitch<<<1, dim3(w, h)>>>(object, dOut, w, h);
  CHECK_LAUNCH();
  CHECK(cudaMemcpy(got.data(), dOut, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  std::printf("pitch2D texture: (0,0) %.2f (8,5) %.2f expected %.2f %.2f\n", got[0], got.back(), texels[0], texels.back());
  expect(same(got, texels), "texture over pitch-2D device memory");
  CHECK(cudaDestroyTextureObject(object));
  CHECK(cudaFree(device));
  CHECK(cudaFree(dOut));
}

int main() {
  CHECK(cudaSetDevice(0));
  channelAndInfo();
  copies();
  filtered2D();
  layeredAndCubemap();
  volumeTexture();
  surface();
  pitchTexture();
  mipmapped();
  return finish("textures_surfaces");
}
