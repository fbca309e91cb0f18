// cuFFT through tallyd: plans made in one step and in two (create, then make), 1D/2D/3D and
// batched "many" layouts, complex, real and double-precision transforms, a plan on a stream of
// the application's, a work area the application provides (auto-allocation off), the 64-bit
// cufftXt plan and exec PyTorch uses, size queries, and a plan handle that is not one. Results
// are checked against a direct DFT on the host; printed values are rounded so the native run
// and the runs through tallyd print the same text.
#include "gpu_test_common.h"

#include <cufft.h>
#include <cufftXt.h>

#include <cmath>
#include <complex>
#include <vector>

#define CHECK_FFT(call)                                                          \
  do {                                                                           \
    cufftResult r_ = (call);                                                     \
    if (r_ != CUFFT_SUCCESS) {                                                   \
      std::printf("FATAL line %d: %s -> cufftResult %d\n", __LINE__, #call, r_); \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)

namespace {

using Complex = std::complex<double>;

std::vector<Complex> signal(int n, int seed) {
  std::vector<Complex> v(n);
  for (int i = 0; i < n; ++i) v[i] = Complex(std::sin(0.1 * i + seed), std::cos(0.37 * i * seed) * 0.5);
  return v;
}

// Direct DFT of `in` (length n, stride 1), sign -1 forward.
std::vector<Complex> dft(const std::vector<Complex>& in, int sign) {
  const size_t n = in.size();
  std::vector<Complex> out(n);
  for (size_t k = 0; k < n; ++k) {
    Complex s = 0;
    for (size_t j = 0; j < n; ++j) s += in[j] * std::polar(1.0, sign * 2 * M_PI * double(j * k % n) / double(n));
    out[k] = s;
  }
  return out;
}

double maxError(const std::vector<Complex>& a, const std::vector<Complex>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

double maxAbs(const std::vector<Complex>& a) {
  double m = 0;
  for (const Complex& c : a) m = std::max(m, std::abs(c));
  return m;
}

std::vector<cufftComplex> toFloat(const std::vector<Complex>& v) {
  std::vector<cufftComplex> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = make_cuFloatComplex(float(v[i].real()), float(v[i].imag()));
  return out;
}

std::vector<Complex> fromFloat(const std::vector<cufftComplex>& v) {
  std::vector<Complex> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Complex(v[i].x, v[i].y);
  return out;
}

// 1D complex transform, forward and back, made in one step (cufftPlan1d), on a stream.
void complexRoundTrip() {
  const int n = 1000;
  auto x = signal(n, 1);
  auto host = toFloat(x);
  cufftComplex* d;
  CHECK(cudaMalloc(&d, n * sizeof(cufftComplex)));
  CHECK(cudaMemcpy(d, host.data(), n * sizeof(cufftComplex), cudaMemcpyHostToDevice));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  cufftHandle plan;
  CHECK_FFT(cufftPlan1d(&plan, n, CUFFT_C2C, 1));
  CHECK_FFT(cufftSetStream(plan, s));
  CHECK_FFT(cufftExecC2C(plan, d, d, CUFFT_FORWARD));
  std::vector<cufftComplex> spectrum(n);
  CHECK(cudaMemcpyAsync(spectrum.data(), d, n * sizeof(cufftComplex), cudaMemcpyDeviceToHost, s));
  CHECK_FFT(cufftExecC2C(plan, d, d, CUFFT_INVERSE));
  CHECK(cudaMemcpyAsync(host.data(), d, n * sizeof(cufftComplex), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  auto want = dft(x, -1);
  double err = maxError(fromFloat(spectrum), want) / maxAbs(want);
  std::printf("c2c n=%d |X|max=%.3f\n", n, maxAbs(want));
  expect(err < 1e-5, "C2C forward matches the DFT");
  std::vector<Complex> back = fromFloat(host);
  for (Complex& c : back) c /= n;
  expect(maxError(back, x) < 1e-5, "C2C inverse restores the signal");
  CHECK_FFT(cufftDestroy(plan));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
}

// Double precision, batched with cufftPlanMany (embedded layout, stride 1, distance n).
void batchedDouble() {
  const int n = 64, batch = 5;
  std::vector<Complex> x(n * batch);
  for (int b = 0; b < batch; ++b) {
    auto one = signal(n, b + 2);
    std::copy(one.begin(), one.end(), x.begin() + b * n);
  }
  cufftDoubleComplex *in, *out;
  CHECK(cudaMalloc(&in, x.size() * sizeof(cufftDoubleComplex)));
  CHECK(cudaMalloc(&out, x.size() * sizeof(cufftDoubleComplex)));
  CHECK(cudaMemcpy(in, x.data(), x.size() * sizeof(Complex), cudaMemcpyHostToDevice));
  int dims[1] = {n};
  cufftHandle plan;
  CHECK_FFT(cufftPlanMany(&plan, 1, dims, dims, 1, n, dims, 1, n, CUFFT_Z2Z, batch));
  CHECK_FFT(cufftExecZ2Z(plan, in, out, CUFFT_FORWARD));
  std::vector<Complex> got(x.size());
  CHECK(cudaMemcpy(got.data(), out, got.size() * sizeof(Complex), cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int b = 0; b < batch; ++b) {
    std::vector<Complex> one(x.begin() + b * n, x.begin() + (b + 1) * n);
    std::vector<Complex> g(got.begin() + b * n, got.begin() + (b + 1) * n);
    worst = std::max(worst, maxError(g, dft(one, -1)));
  }
  std::printf("z2z many n=%d batch=%d\n", n, batch);
  expect(worst < 1e-10, "Z2Z batched matches the DFT");
  CHECK_FFT(cufftDestroy(plan));
  CHECK(cudaFree(in));
  CHECK(cudaFree(out));
}

// 2D real-to-complex and back, made in two steps with the application's own work area.
void realTwoDimensional() {
  const int nx = 24, ny = 30, half = ny / 2 + 1;
  std::vector<float> x(nx * ny);
  for (int i = 0; i < nx * ny; ++i) x[i] = std::sin(0.05f * i) + 0.25f * float(i % 7);
  float* real;
  cufftComplex* spec;
  CHECK(cudaMalloc(&real, x.size() * sizeof(float)));
  CHECK(cudaMalloc(&spec, nx * half * sizeof(cufftComplex)));
  CHECK(cudaMemcpy(real, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
  cufftHandle fwd, inv;
  CHECK_FFT(cufftCreate(&fwd));
  CHECK_FFT(cufftCreate(&inv));
  CHECK_FFT(cufftSetAutoAllocation(fwd, 0));
  size_t estimate = 0, work = 0, invWork = 0;
  CHECK_FFT(cufftEstimate2d(nx, ny, CUFFT_R2C, &estimate));
  CHECK_FFT(cufftMakePlan2d(fwd, nx, ny, CUFFT_R2C, &work));
  CHECK_FFT(cufftMakePlan2d(inv, nx, ny, CUFFT_C2R, &invWork));
  size_t asked = 0;
  CHECK_FFT(cufftGetSize(fwd, &asked));
  std::printf("r2c 2d %dx%d: work area reported %s\n", nx, ny, asked == work ? "consistently" : "inconsistently");
  std::printf("estimate %s\n", estimate > 0 ? "nonzero" : "zero");
  expect(asked == work, "cufftGetSize agrees with cufftMakePlan2d");
  void* area = nullptr;
  CHECK(cudaMalloc(&area, work > 0 ? work : 1));
  CHECK_FFT(cufftSetWorkArea(fwd, area));
  CHECK_FFT(cufftExecR2C(fwd, real, spec));
  // The spectrum's DC term is the sum of the samples (read now: C2R overwrites its input).
  cufftComplex dc;
  CHECK(cudaMemcpy(&dc, spec, sizeof dc, cudaMemcpyDeviceToHost));
  CHECK_FFT(cufftExecC2R(inv, spec, real));
  std::vector<float> back(x.size());
  CHECK(cudaMemcpy(back.data(), real, back.size() * sizeof(float), cudaMemcpyDeviceToHost));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, double(std::fabs(back[i] / (nx * ny) - x[i])));
  expect(worst < 1e-4, "R2C then C2R restores the 2D signal");
  double sum = 0;
  for (float v : x) sum += v;
  std::printf("r2c dc=%.2f\n", dc.x);
  expect(std::fabs(dc.x - sum) < 1e-2 * std::fabs(sum) + 1e-3, "R2C DC term is the sum");
  CHECK_FFT(cufftDestroy(fwd));
  CHECK_FFT(cufftDestroy(inv));
  CHECK(cudaFree(area));
  CHECK(cudaFree(real));
  CHECK(cudaFree(spec));
}

// 3D double real-to-complex, and the 64-bit Xt plan with cufftXtExec (as PyTorch calls cuFFT).
void threeDimensionalAndXt() {
  const int n0 = 8, n1 = 6, n2 = 10;
  std::vector<double> x(n0 * n1 * n2);
  double sum = 0;
  for (size_t i = 0; i < x.size(); ++i) sum += (x[i] = std::cos(0.3 * double(i)));
  double* real;
  cufftDoubleComplex* spec;
  CHECK(cudaMalloc(&real, x.size() * sizeof(double)));
  CHECK(cudaMalloc(&spec, n0 * n1 * (n2 / 2 + 1) * sizeof(cufftDoubleComplex)));
  CHECK(cudaMemcpy(real, x.data(), x.size() * sizeof(double), cudaMemcpyHostToDevice));
  cufftHandle plan;
  CHECK_FFT(cufftPlan3d(&plan, n0, n1, n2, CUFFT_D2Z));
  CHECK_FFT(cufftExecD2Z(plan, real, spec));
  cufftDoubleComplex dc;
  CHECK(cudaMemcpy(&dc, spec, sizeof dc, cudaMemcpyDeviceToHost));
  expect(std::fabs(dc.x - sum) < 1e-9, "D2Z 3D DC term is the sum");
  CHECK_FFT(cufftDestroy(plan));

  const long long n = 256, batch = 3;
  std::vector<Complex> xs(n * batch);
  for (long long b = 0; b < batch; ++b) {
    auto one = signal(int(n), int(b) + 7);
    std::copy(one.begin(), one.end(), xs.begin() + b * n);
  }
  auto host = toFloat(xs);
  cufftComplex* d;
  CHECK(cudaMalloc(&d, host.size() * sizeof(cufftComplex)));
  CHECK(cudaMemcpy(d, host.data(), host.size() * sizeof(cufftComplex), cudaMemcpyHostToDevice));
  long long dims[1] = {n};
  size_t work = 0;
  CHECK_FFT(cufftCreate(&plan));
  CHECK_FFT(cufftXtMakePlanMany(plan, 1, dims, nullptr, 1, n, CUDA_C_32F, nullptr, 1, n, CUDA_C_32F, batch, &work,
                                CUDA_C_32F));
  CHECK_FFT(cufftXtExec(plan, d, d, CUFFT_FORWARD));
  CHECK(cudaMemcpy(host.data(), d, host.size() * sizeof(cufftComplex), cudaMemcpyDeviceToHost));
  auto got = fromFloat(host);
  std::vector<Complex> last(xs.end() - n, xs.end()), lastGot(got.end() - n, got.end());
  auto want = dft(last, -1);
  expect(maxError(lastGot, want) / maxAbs(want) < 1e-5, "cufftXtMakePlanMany + cufftXtExec match the DFT");
  CHECK_FFT(cufftDestroy(plan));
  CHECK(cudaFree(d));
  CHECK(cudaFree(real));
  CHECK(cudaFree(spec));
}

void versionAndBadPlan() {
  int version = 0;
  CHECK_FFT(cufftGetVersion(&version));
  std::printf("cufft major version %d\n", version / 1000);
  expect(version / 1000 == CUFFT_VERSION / 1000, "cufftGetVersion names the major version built against");
  cufftResult r = cufftExecC2C(987654, nullptr, nullptr, CUFFT_FORWARD);
  std::printf("exec with a plan that is not one -> %s\n", r == CUFFT_INVALID_PLAN ? "CUFFT_INVALID_PLAN" : "other");
  expect(r == CUFFT_INVALID_PLAN, "a plan that is not one is refused");
  expect(cufftDestroy(CUFFT_PLAN_NULL) == CUFFT_SUCCESS, "cufftDestroy(CUFFT_PLAN_NULL) is harmless");
}

}  // namespace

int main() {
  complexRoundTrip();
  batchedDouble();
  realTwoDimensional();
  threeDimensionalAndXt();
  versionAndBadPlan();
  CHECK(cudaDeviceSynchronize());
  return finish("cufft_forwarding");
}
