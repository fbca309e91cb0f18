// cuFFT plans and transforms (client/library/cufft.cc writes the layouts). A plan is a tenant
// library object like a cuBLAS handle: created on the tenant's legacy default stream, bound again
// whenever its stream moved (SM partitions), destroyed with the tenant. Transforms are GPU work
// and go through the scheduler.
#include "server/library/library_call.h"

#include <cufft.h>
#include <cufftXt.h>

#include <algorithm>
#include <cstdint>

namespace tally::server::library {
namespace {

template <typename Fn>
Fn cufft(const char* name) {
  return resolve<Fn>(Library::kCufft, name);
}

// A plan is an int, which may be 0: stored off by one, so that a live object is never null.
void* objectOf(cufftHandle plan) { return reinterpret_cast<void*>(static_cast<intptr_t>(plan) + 1); }
cufftHandle planOf(void* object) { return static_cast<cufftHandle>(reinterpret_cast<intptr_t>(object) - 1); }

int createReal(void** object) {
  static auto* fn = cufft<decltype(&::cufftCreate)>("cufftCreate");
  if (fn == nullptr) return CUFFT_SETUP_FAILED;
  cufftHandle plan = 0;
  int status = fn(&plan);
  if (status == CUFFT_SUCCESS) *object = objectOf(plan);
  return status;
}
void destroyReal(void* object) {
  static auto* fn = cufft<decltype(&::cufftDestroy)>("cufftDestroy");
  if (fn != nullptr) fn(planOf(object));
}
int bindStream(void* object, CUstream s) {
  static auto* fn = cufft<decltype(&::cufftSetStream)>("cufftSetStream");
  return fn != nullptr ? fn(planOf(object), reinterpret_cast<cudaStream_t>(s)) : CUFFT_SETUP_FAILED;
}
size_t version() {
  static auto* fn = cufft<decltype(&::cufftGetVersion)>("cufftGetVersion");
  int v = 0;
  return fn != nullptr && fn(&v) == CUFFT_SUCCESS ? static_cast<size_t>(v) : 0;
}
constexpr HandleOps kHandle{kCufftHandleType, &createReal, &destroyReal, &bindStream, CUFFT_ALLOC_FAILED, &version};

int create(LibraryCall& c) { return createHandle(c, kHandle); }
int destroy(LibraryCall& c) { return destroyHandle(c, kHandle); }
int setStream(LibraryCall& c) { return setHandleStream(c, kHandle); }

cufftHandle plan(LibraryCall& c) { return planOf(c.handle(kCufftHandleType)); }

template <typename T>
T get(LibraryCall& c) {
  return c.reader().get<T>();
}

// What putLayout wrote: rank, n[rank], inembed[rank]?, istride, idist, onembed[rank]?, ostride, odist.
template <typename Int>
struct Layout {
  int rank = 0;
  Int* n = nullptr;
  Int* inembed = nullptr;
  Int istride = 0, idist = 0;
  Int* onembed = nullptr;
  Int ostride = 0, odist = 0;
};

template <typename Int>
Layout<Int> readLayout(LibraryCall& c) {
  Layout<Int> l;
  l.rank = get<int32_t>(c);
  // The arrays are copies in the call's scratch; cuFFT takes them as non-const.
  auto array = [&] { return static_cast<Int*>(const_cast<void*>(c.arrayIn(l.rank, sizeof(Int)))); };
  l.n = array();
  l.inembed = array();
  l.istride = get<Int>(c);
  l.idist = get<Int>(c);
  l.onembed = array();
  l.ostride = get<Int>(c);
  l.odist = get<Int>(c);
  if (l.n == nullptr) c.refuse("a plan without its sizes");
  return l;
}

size_t* workSize(LibraryCall& c) { return static_cast<size_t*>(c.hostOut(sizeof(size_t))); }

// Calls the real `Real` (the executor's namesake) once every argument was read and accepted.
template <auto Real, typename... Args>
int callReal(LibraryCall& c, Args... args) {
  if (c.refused()) return c.refusal();
  static auto* fn = cufft<decltype(Real)>(c.name());
  if (fn == nullptr) return c.missing();
  return fn(args...);
}

// The shapes that plan making, size queries and estimates share (client/library/cufft.cc
// writes them in declaration order, the work-area size output last).
struct Shape1d {
  int32_t nx;
  cufftType type;
  int32_t batch;
};
Shape1d read1d(LibraryCall& c) {
  Shape1d d{};
  d.nx = get<int32_t>(c);
  d.type = static_cast<cufftType>(get<int32_t>(c));
  d.batch = get<int32_t>(c);
  return d;
}

struct Shape2d {
  int32_t nx, ny;
  cufftType type;
};
Shape2d read2d(LibraryCall& c) {
  Shape2d d{};
  d.nx = get<int32_t>(c);
  d.ny = get<int32_t>(c);
  d.type = static_cast<cufftType>(get<int32_t>(c));
  return d;
}

struct Shape3d {
  int32_t nx, ny, nz;
  cufftType type;
};
Shape3d read3d(LibraryCall& c) {
  Shape3d d{};
  d.nx = get<int32_t>(c);
  d.ny = get<int32_t>(c);
  d.nz = get<int32_t>(c);
  d.type = static_cast<cufftType>(get<int32_t>(c));
  return d;
}

// `Batch` is int32_t for the int functions, long long for the 64-bit ones.
template <typename Int, typename Batch>
struct ShapeMany {
  Layout<Int> layout;
  cufftType type;
  Batch batch;
};
template <typename Int, typename Batch>
ShapeMany<Int, Batch> readMany(LibraryCall& c) {
  ShapeMany<Int, Batch> d{};
  d.layout = readLayout<Int>(c);
  d.type = static_cast<cufftType>(get<int32_t>(c));
  d.batch = get<Batch>(c);
  return d;
}

// cufftMakePlan1d and cufftGetSize1d take the same arguments, and so on for each shape.
template <auto Real>
int onPlan1d(LibraryCall& c) {
  cufftHandle p = plan(c);
  Shape1d d = read1d(c);
  size_t* ws = workSize(c);
  return callReal<Real>(c, p, d.nx, d.type, d.batch, ws);
}

template <auto Real>
int onPlan2d(LibraryCall& c) {
  cufftHandle p = plan(c);
  Shape2d d = read2d(c);
  size_t* ws = workSize(c);
  return callReal<Real>(c, p, d.nx, d.ny, d.type, ws);
}

template <auto Real>
int onPlan3d(LibraryCall& c) {
  cufftHandle p = plan(c);
  Shape3d d = read3d(c);
  size_t* ws = workSize(c);
  return callReal<Real>(c, p, d.nx, d.ny, d.nz, d.type, ws);
}

template <auto Real, typename Int, typename Batch>
int onPlanMany(LibraryCall& c) {
  cufftHandle p = plan(c);
  auto d = readMany<Int, Batch>(c);
  size_t* ws = workSize(c);
  const Layout<Int>& l = d.layout;
  return callReal<Real>(c, p, l.rank, l.n, l.inembed, l.istride, l.idist, l.onembed, l.ostride, l.odist, d.type,
                        d.batch, ws);
}

int xtMakePlanMany(LibraryCall& c) {
  cufftHandle p = plan(c);
  Layout<long long> l = readLayout<long long>(c);
  auto inputType = static_cast<cudaDataType>(get<int32_t>(c));
  auto outputType = static_cast<cudaDataType>(get<int32_t>(c));
  auto batch = get<long long>(c);
  auto executionType = static_cast<cudaDataType>(get<int32_t>(c));
  size_t* ws = workSize(c);
  return callReal<&::cufftXtMakePlanMany>(c, p, l.rank, l.n, l.inembed, l.istride, l.idist, inputType, l.onembed,
                                          l.ostride, l.odist, outputType, batch, ws, executionType);
}

int getSize(LibraryCall& c) {
  cufftHandle p = plan(c);
  size_t* ws = workSize(c);
  return callReal<&::cufftGetSize>(c, p, ws);
}

int estimate1d(LibraryCall& c) {
  Shape1d d = read1d(c);
  size_t* ws = workSize(c);
  return callReal<&::cufftEstimate1d>(c, d.nx, d.type, d.batch, ws);
}

int estimate2d(LibraryCall& c) {
  Shape2d d = read2d(c);
  size_t* ws = workSize(c);
  return callReal<&::cufftEstimate2d>(c, d.nx, d.ny, d.type, ws);
}

int estimate3d(LibraryCall& c) {
  Shape3d d = read3d(c);
  size_t* ws = workSize(c);
  return callReal<&::cufftEstimate3d>(c, d.nx, d.ny, d.nz, d.type, ws);
}

int estimateMany(LibraryCall& c) {
  auto d = readMany<int, int32_t>(c);
  size_t* ws = workSize(c);
  const Layout<int>& l = d.layout;
  return callReal<&::cufftEstimateMany>(c, l.rank, l.n, l.inembed, l.istride, l.idist, l.onembed, l.ostride, l.odist,
                                        d.type, d.batch, ws);
}

// cuFFT writes the plan's whole work area there: all of it must be the tenant's memory.
int setWorkArea(LibraryCall& c) {
  cufftHandle p = plan(c);
  uint64_t address = c.readId();
  size_t bytes = 0;
  static auto* sizeOf = cufft<decltype(&::cufftGetSize)>("cufftGetSize");
  if (!c.refused() && address != 0 && (sizeOf == nullptr || sizeOf(p, &bytes) != CUFFT_SUCCESS)) bytes = 0;
  void* area = c.ownedRange(address, std::max<size_t>(bytes, 1), "work area");
  return callReal<&::cufftSetWorkArea>(c, p, area);
}

int setAutoAllocation(LibraryCall& c) {
  cufftHandle p = plan(c);
  auto automatic = get<int32_t>(c);
  return callReal<&::cufftSetAutoAllocation>(c, p, automatic);
}

int setPlanProperty(LibraryCall& c) {
  cufftHandle p = plan(c);
  auto property = static_cast<cufftProperty>(get<int32_t>(c));
  auto value = get<int64_t>(c);
  return callReal<&::cufftSetPlanPropertyInt64>(c, p, property, value);
}

int getPlanProperty(LibraryCall& c) {
  cufftHandle p = plan(c);
  auto property = static_cast<cufftProperty>(get<int32_t>(c));
  auto* value = static_cast<long long*>(c.hostOut(sizeof(long long)));
  return callReal<&::cufftGetPlanPropertyInt64>(c, p, property, value);
}

int resetPlanProperty(LibraryCall& c) {
  cufftHandle p = plan(c);
  auto property = static_cast<cufftProperty>(get<int32_t>(c));
  return callReal<&::cufftResetPlanProperty>(c, p, property);
}

// A transform: plan, input and output device addresses (owned by the tenant), and for the
// complex-to-complex kinds the direction.
template <typename In, typename Out, auto Real>
int transform(LibraryCall& c) {
  cufftHandle p = plan(c);
  auto* in = static_cast<In*>(c.device());
  auto* out = static_cast<Out*>(c.device());
  return callReal<Real>(c, p, in, out);
}

template <typename In, typename Out, auto Real>
int transformWithDirection(LibraryCall& c) {
  cufftHandle p = plan(c);
  auto* in = static_cast<In*>(c.device());
  auto* out = static_cast<Out*>(c.device());
  auto direction = get<int32_t>(c);
  return callReal<Real>(c, p, in, out, direction);
}

int execC2C(LibraryCall& c) { return transformWithDirection<cufftComplex, cufftComplex, &::cufftExecC2C>(c); }
int execZ2Z(LibraryCall& c) {
  return transformWithDirection<cufftDoubleComplex, cufftDoubleComplex, &::cufftExecZ2Z>(c);
}
int execR2C(LibraryCall& c) { return transform<cufftReal, cufftComplex, &::cufftExecR2C>(c); }
int execC2R(LibraryCall& c) { return transform<cufftComplex, cufftReal, &::cufftExecC2R>(c); }
int execD2Z(LibraryCall& c) { return transform<cufftDoubleReal, cufftDoubleComplex, &::cufftExecD2Z>(c); }
int execZ2D(LibraryCall& c) { return transform<cufftDoubleComplex, cufftDoubleReal, &::cufftExecZ2D>(c); }
int xtExec(LibraryCall& c) { return transformWithDirection<void, void, &::cufftXtExec>(c); }

int getVersion(LibraryCall& c) {
  auto* v = static_cast<int*>(c.hostOut(sizeof(int)));
  return callReal<&::cufftGetVersion>(c, v);
}

int getProperty(LibraryCall& c) {
  auto type = static_cast<libraryPropertyType>(get<int32_t>(c));
  auto* value = static_cast<int*>(c.hostOut(sizeof(int)));
  return callReal<&::cufftGetProperty>(c, type, value);
}

#define TALLY_CUFFT_EXECUTOR(name, fn, work) {functionId(#name), #name, &(fn), (work)}

}  // namespace

const std::vector<Executor>& cufftExecutors() {
  static const std::vector<Executor> table = {
      TALLY_CUFFT_EXECUTOR(cufftCreate, create, false),
      TALLY_CUFFT_EXECUTOR(cufftDestroy, destroy, false),
      TALLY_CUFFT_EXECUTOR(cufftSetStream, setStream, false),
      TALLY_CUFFT_EXECUTOR(cufftMakePlan1d, onPlan1d<&::cufftMakePlan1d>, false),
      TALLY_CUFFT_EXECUTOR(cufftMakePlan2d, onPlan2d<&::cufftMakePlan2d>, false),
      TALLY_CUFFT_EXECUTOR(cufftMakePlan3d, onPlan3d<&::cufftMakePlan3d>, false),
      TALLY_CUFFT_EXECUTOR(cufftMakePlanMany, (onPlanMany<&::cufftMakePlanMany, int, int32_t>), false),
      TALLY_CUFFT_EXECUTOR(cufftMakePlanMany64, (onPlanMany<&::cufftMakePlanMany64, long long, long long>), false),
      TALLY_CUFFT_EXECUTOR(cufftXtMakePlanMany, xtMakePlanMany, false),
      TALLY_CUFFT_EXECUTOR(cufftGetSize, getSize, false),
      TALLY_CUFFT_EXECUTOR(cufftGetSize1d, onPlan1d<&::cufftGetSize1d>, false),
      TALLY_CUFFT_EXECUTOR(cufftGetSize2d, onPlan2d<&::cufftGetSize2d>, false),
      TALLY_CUFFT_EXECUTOR(cufftGetSize3d, onPlan3d<&::cufftGetSize3d>, false),
      TALLY_CUFFT_EXECUTOR(cufftGetSizeMany, (onPlanMany<&::cufftGetSizeMany, int, int32_t>), false),
      TALLY_CUFFT_EXECUTOR(cufftGetSizeMany64, (onPlanMany<&::cufftGetSizeMany64, long long, long long>), false),
      TALLY_CUFFT_EXECUTOR(cufftEstimate1d, estimate1d, false),
      TALLY_CUFFT_EXECUTOR(cufftEstimate2d, estimate2d, false),
      TALLY_CUFFT_EXECUTOR(cufftEstimate3d, estimate3d, false),
      TALLY_CUFFT_EXECUTOR(cufftEstimateMany, estimateMany, false),
      TALLY_CUFFT_EXECUTOR(cufftSetWorkArea, setWorkArea, false),
      TALLY_CUFFT_EXECUTOR(cufftSetAutoAllocation, setAutoAllocation, false),
      TALLY_CUFFT_EXECUTOR(cufftSetPlanPropertyInt64, setPlanProperty, false),
      TALLY_CUFFT_EXECUTOR(cufftGetPlanPropertyInt64, getPlanProperty, false),
      TALLY_CUFFT_EXECUTOR(cufftResetPlanProperty, resetPlanProperty, false),
      TALLY_CUFFT_EXECUTOR(cufftExecC2C, execC2C, true),
      TALLY_CUFFT_EXECUTOR(cufftExecZ2Z, execZ2Z, true),
      TALLY_CUFFT_EXECUTOR(cufftExecR2C, execR2C, true),
      TALLY_CUFFT_EXECUTOR(cufftExecC2R, execC2R, true),
      TALLY_CUFFT_EXECUTOR(cufftExecD2Z, execD2Z, true),
      TALLY_CUFFT_EXECUTOR(cufftExecZ2D, execZ2D, true),
      TALLY_CUFFT_EXECUTOR(cufftXtExec, xtExec, true),
      TALLY_CUFFT_EXECUTOR(cufftGetVersion, getVersion, false),
      TALLY_CUFFT_EXECUTOR(cufftGetProperty, getProperty, false),
  };
  return table;
}

#undef TALLY_CUFFT_EXECUTOR

}  // namespace tally::server::library
