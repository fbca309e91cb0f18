// cuFFT, forwarded: plans live in tallyd and run there in the shared context, like cuBLAS
// handles. A plan the application holds (an int) is the client's id for it. cuFFT running inside
// the application would need private driver tables of the real libcuda (docs/architecture.md,
// "Library calls"). The client exports these under libcufft.so.12's symbol version, and
// libtally_cufft.so (soname libcufft.so.12) makes a library that dlopens cuFFT by name (XLA)
// find them too. cufftXt* functions other than the two below answer CUFFT_NOT_SUPPORTED
// (generated stubs).
#include "client/api/api_util.h"
#include "client/library/library_call.h"

#include <cufft.h>
#include <cufftXt.h>

#include <cstdint>

using namespace tally::client::library;
using tally::library::functionId;

namespace {

constexpr Family kFamily = Family::kCufft;

// Plans are ids of the client's handle registry; an int holds every id the client hands out.
const void* key(cufftHandle plan) { return reinterpret_cast<const void*>(static_cast<intptr_t>(plan)); }

cufftResult result(int status) { return static_cast<cufftResult>(status); }

// The arguments every plan-making call shares after the plan: the shape, as the caller's type.
template <typename Int>
void putLayout(Call& c, int rank, Int* n, Int* inembed, Int istride, Int idist, Int* onembed, Int ostride,
               Int odist) {
  c.value(static_cast<int32_t>(rank));
  c.arrayIn(n, rank, sizeof(Int));
  c.arrayIn(inembed, rank, sizeof(Int));
  c.value(istride);
  c.value(idist);
  c.arrayIn(onembed, rank, sizeof(Int));
  c.value(ostride);
  c.value(odist);
}

// A call on an existing plan whose only output is a work-area size.
template <typename Fill>
cufftResult sizedCall(const char* name, cufftHandle plan, size_t* workSize, Fill fill) {
  Call c(kFamily, name, functionId(name));
  c.handle(key(plan));
  fill(c);
  c.hostOut(workSize, sizeof(size_t));
  return result(c.run(false));
}

// cufftPlan*: a plan created and made in one step; on failure nothing is left behind.
template <typename Make>
cufftResult createAndMake(cufftHandle* plan, Make make) {
  if (plan == nullptr) return CUFFT_INVALID_VALUE;
  cufftHandle fresh = 0;
  if (cufftResult r = cufftCreate(&fresh); r != CUFFT_SUCCESS) return r;
  size_t workSize = 0;
  if (cufftResult r = make(fresh, &workSize); r != CUFFT_SUCCESS) {
    cufftDestroy(fresh);
    return r;
  }
  *plan = fresh;
  return CUFFT_SUCCESS;
}

// The shapes that plan making, size queries and estimates share, in declaration order.
void put1d(Call& c, int nx, cufftType type, int batch) {
  c.value(static_cast<int32_t>(nx));
  c.value(static_cast<int32_t>(type));
  c.value(static_cast<int32_t>(batch));
}

void put2d(Call& c, int nx, int ny, cufftType type) {
  c.value(static_cast<int32_t>(nx));
  c.value(static_cast<int32_t>(ny));
  c.value(static_cast<int32_t>(type));
}

void put3d(Call& c, int nx, int ny, int nz, cufftType type) {
  c.value(static_cast<int32_t>(nx));
  c.value(static_cast<int32_t>(ny));
  c.value(static_cast<int32_t>(nz));
  c.value(static_cast<int32_t>(type));
}

// `Batch` is int32_t for the int functions, long long for the 64-bit ones.
template <typename Int, typename Batch>
void putMany(Call& c, int rank, Int* n, Int* inembed, Int istride, Int idist, Int* onembed, Int ostride, Int odist,
             cufftType type, Batch batch) {
  putLayout<Int>(c, rank, n, inembed, istride, idist, onembed, ostride, odist);
  c.value(static_cast<int32_t>(type));
  c.value(batch);
}

// A "many" plan making or size query (int or 64-bit layout) on an existing plan.
template <typename Int, typename Batch>
cufftResult manyCall(const char* name, cufftHandle plan, int rank, Int* n, Int* inembed, Int istride, Int idist,
                     Int* onembed, Int ostride, Int odist, cufftType type, Batch batch, size_t* workSize) {
  return sizedCall(name, plan, workSize, [&](Call& c) {
    putMany<Int>(c, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch);
  });
}

// Estimates need no plan: tallyd's cuFFT answers them.
template <typename Fill>
cufftResult estimate(const char* name, size_t* workSize, Fill fill) {
  Call c(kFamily, name, functionId(name));
  fill(c);
  c.hostOut(workSize, sizeof(size_t));
  return result(c.run(false));
}

cufftResult exec(const char* name, cufftHandle plan, const void* in, void* out, const int* direction) {
  Call c(kFamily, name, functionId(name));
  c.handle(key(plan));
  c.device(in);
  c.device(out);
  if (direction != nullptr) c.value(static_cast<int32_t>(*direction));
  return result(c.run(true));
}

}  // namespace

TALLY_API cufftResult cufftCreate(cufftHandle* plan) {
  if (plan == nullptr) return CUFFT_INVALID_VALUE;
  uint64_t id = 0;
  int status = createHandle(kFamily, "cufftCreate", true, id);
  if (status == CUFFT_SUCCESS) *plan = static_cast<cufftHandle>(id);
  return result(status);
}

TALLY_API cufftResult cufftDestroy(cufftHandle plan) {
  if (plan == CUFFT_PLAN_NULL) return CUFFT_SUCCESS;  // documented as safe to destroy
  return result(destroyHandle(kFamily, "cufftDestroy", key(plan), CUFFT_INVALID_PLAN));
}

TALLY_API cufftResult cufftSetStream(cufftHandle plan, cudaStream_t stream) {
  return result(setHandleStream(kFamily, "cufftSetStream", key(plan), stream, CUFFT_INVALID_PLAN));
}

TALLY_API cufftResult cufftMakePlan1d(cufftHandle plan, int nx, cufftType type, int batch, size_t* workSize) {
  return sizedCall("cufftMakePlan1d", plan, workSize, [&](Call& c) { put1d(c, nx, type, batch); });
}

TALLY_API cufftResult cufftMakePlan2d(cufftHandle plan, int nx, int ny, cufftType type, size_t* workSize) {
  return sizedCall("cufftMakePlan2d", plan, workSize, [&](Call& c) { put2d(c, nx, ny, type); });
}

TALLY_API cufftResult cufftMakePlan3d(cufftHandle plan, int nx, int ny, int nz, cufftType type, size_t* workSize) {
  return sizedCall("cufftMakePlan3d", plan, workSize, [&](Call& c) { put3d(c, nx, ny, nz, type); });
}

TALLY_API cufftResult cufftMakePlanMany(cufftHandle plan, int rank, int* n, int* inembed, int istride, int idist,
                                        int* onembed, int ostride, int odist, cufftType type, int batch,
                                        size_t* workSize) {
  return manyCall<int>("cufftMakePlanMany", plan, rank, n, inembed, istride, idist, onembed, ostride, odist, type,
                       static_cast<int32_t>(batch), workSize);
}

TALLY_API cufftResult cufftMakePlanMany64(cufftHandle plan, int rank, long long* n, long long* inembed,
                                          long long istride, long long idist, long long* onembed, long long ostride,
                                          long long odist, cufftType type, long long batch, size_t* workSize) {
  return manyCall<long long>("cufftMakePlanMany64", plan, rank, n, inembed, istride, idist, onembed, ostride, odist,
                             type, batch, workSize);
}

TALLY_API cufftResult cufftXtMakePlanMany(cufftHandle plan, int rank, long long* n, long long* inembed,
                                          long long istride, long long idist, cudaDataType inputType,
                                          long long* onembed, long long ostride, long long odist,
                                          cudaDataType outputType, long long batch, size_t* workSize,
                                          cudaDataType executionType) {
  return sizedCall("cufftXtMakePlanMany", plan, workSize, [&](Call& c) {
    putLayout<long long>(c, rank, n, inembed, istride, idist, onembed, ostride, odist);
    c.value(static_cast<int32_t>(inputType));
    c.value(static_cast<int32_t>(outputType));
    c.value(batch);
    c.value(static_cast<int32_t>(executionType));
  });
}

TALLY_API cufftResult cufftPlan1d(cufftHandle* plan, int nx, cufftType type, int batch) {
  return createAndMake(plan, [&](cufftHandle p, size_t* ws) { return cufftMakePlan1d(p, nx, type, batch, ws); });
}

TALLY_API cufftResult cufftPlan2d(cufftHandle* plan, int nx, int ny, cufftType type) {
  return createAndMake(plan, [&](cufftHandle p, size_t* ws) { return cufftMakePlan2d(p, nx, ny, type, ws); });
}

TALLY_API cufftResult cufftPlan3d(cufftHandle* plan, int nx, int ny, int nz, cufftType type) {
  return createAndMake(plan, [&](cufftHandle p, size_t* ws) { return cufftMakePlan3d(p, nx, ny, nz, type, ws); });
}

TALLY_API cufftResult cufftPlanMany(cufftHandle* plan, int rank, int* n, int* inembed, int istride, int idist,
                                    int* onembed, int ostride, int odist, cufftType type, int batch) {
  return createAndMake(plan, [&](cufftHandle p, size_t* ws) {
    return cufftMakePlanMany(p, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch, ws);
  });
}

// Size queries on an existing plan.
TALLY_API cufftResult cufftGetSize(cufftHandle plan, size_t* workSize) {
  return sizedCall("cufftGetSize", plan, workSize, [](Call&) {});
}

TALLY_API cufftResult cufftGetSize1d(cufftHandle plan, int nx, cufftType type, int batch, size_t* workSize) {
  return sizedCall("cufftGetSize1d", plan, workSize, [&](Call& c) { put1d(c, nx, type, batch); });
}

TALLY_API cufftResult cufftGetSize2d(cufftHandle plan, int nx, int ny, cufftType type, size_t* workSize) {
  return sizedCall("cufftGetSize2d", plan, workSize, [&](Call& c) { put2d(c, nx, ny, type); });
}

TALLY_API cufftResult cufftGetSize3d(cufftHandle plan, int nx, int ny, int nz, cufftType type, size_t* workSize) {
  return sizedCall("cufftGetSize3d", plan, workSize, [&](Call& c) { put3d(c, nx, ny, nz, type); });
}

TALLY_API cufftResult cufftGetSizeMany(cufftHandle plan, int rank, int* n, int* inembed, int istride, int idist,
                                       int* onembed, int ostride, int odist, cufftType type, int batch,
                                       size_t* workSize) {
  return manyCall<int>("cufftGetSizeMany", plan, rank, n, inembed, istride, idist, onembed, ostride, odist, type,
                       static_cast<int32_t>(batch), workSize);
}

TALLY_API cufftResult cufftGetSizeMany64(cufftHandle plan, int rank, long long* n, long long* inembed,
                                         long long istride, long long idist, long long* onembed, long long ostride,
                                         long long odist, cufftType type, long long batch, size_t* workSize) {
  return manyCall<long long>("cufftGetSizeMany64", plan, rank, n, inembed, istride, idist, onembed, ostride, odist,
                             type, batch, workSize);
}

TALLY_API cufftResult cufftEstimate1d(int nx, cufftType type, int batch, size_t* workSize) {
  return estimate("cufftEstimate1d", workSize, [&](Call& c) { put1d(c, nx, type, batch); });
}

TALLY_API cufftResult cufftEstimate2d(int nx, int ny, cufftType type, size_t* workSize) {
  return estimate("cufftEstimate2d", workSize, [&](Call& c) { put2d(c, nx, ny, type); });
}

TALLY_API cufftResult cufftEstimate3d(int nx, int ny, int nz, cufftType type, size_t* workSize) {
  return estimate("cufftEstimate3d", workSize, [&](Call& c) { put3d(c, nx, ny, nz, type); });
}

TALLY_API cufftResult cufftEstimateMany(int rank, int* n, int* inembed, int istride, int idist, int* onembed,
                                        int ostride, int odist, cufftType type, int batch, size_t* workSize) {
  return estimate("cufftEstimateMany", workSize, [&](Call& c) {
    putMany<int>(c, rank, n, inembed, istride, idist, onembed, ostride, odist, type, static_cast<int32_t>(batch));
  });
}

// Plan settings.
TALLY_API cufftResult cufftSetWorkArea(cufftHandle plan, void* workArea) {
  Call c(kFamily, "cufftSetWorkArea", functionId("cufftSetWorkArea"));
  c.handle(key(plan));
  c.device(workArea);
  return result(c.run(true));
}

TALLY_API cufftResult cufftSetAutoAllocation(cufftHandle plan, int autoAllocate) {
  Call c(kFamily, "cufftSetAutoAllocation", functionId("cufftSetAutoAllocation"));
  c.handle(key(plan));
  c.value(static_cast<int32_t>(autoAllocate));
  return result(c.run(true));
}

TALLY_API cufftResult cufftSetPlanPropertyInt64(cufftHandle plan, cufftProperty property, const long long value) {
  Call c(kFamily, "cufftSetPlanPropertyInt64", functionId("cufftSetPlanPropertyInt64"));
  c.handle(key(plan));
  c.value(static_cast<int32_t>(property));
  c.value(static_cast<int64_t>(value));
  return result(c.run(false));
}

TALLY_API cufftResult cufftGetPlanPropertyInt64(cufftHandle plan, cufftProperty property, long long* value) {
  Call c(kFamily, "cufftGetPlanPropertyInt64", functionId("cufftGetPlanPropertyInt64"));
  c.handle(key(plan));
  c.value(static_cast<int32_t>(property));
  c.hostOut(value, sizeof(long long));
  return result(c.run(false));
}

TALLY_API cufftResult cufftResetPlanProperty(cufftHandle plan, cufftProperty property) {
  Call c(kFamily, "cufftResetPlanProperty", functionId("cufftResetPlanProperty"));
  c.handle(key(plan));
  c.value(static_cast<int32_t>(property));
  return result(c.run(false));
}

// Transforms: one-way, like a kernel launch (an error surfaces at the next synchronizing call).
TALLY_API cufftResult cufftExecC2C(cufftHandle plan, cufftComplex* in, cufftComplex* out, int direction) {
  return exec("cufftExecC2C", plan, in, out, &direction);
}
TALLY_API cufftResult cufftExecZ2Z(cufftHandle plan, cufftDoubleComplex* in, cufftDoubleComplex* out, int direction) {
  return exec("cufftExecZ2Z", plan, in, out, &direction);
}
TALLY_API cufftResult cufftExecR2C(cufftHandle plan, cufftReal* in, cufftComplex* out) {
  return exec("cufftExecR2C", plan, in, out, nullptr);
}
TALLY_API cufftResult cufftExecC2R(cufftHandle plan, cufftComplex* in, cufftReal* out) {
  return exec("cufftExecC2R", plan, in, out, nullptr);
}
TALLY_API cufftResult cufftExecD2Z(cufftHandle plan, cufftDoubleReal* in, cufftDoubleComplex* out) {
  return exec("cufftExecD2Z", plan, in, out, nullptr);
}
TALLY_API cufftResult cufftExecZ2D(cufftHandle plan, cufftDoubleComplex* in, cufftDoubleReal* out) {
  return exec("cufftExecZ2D", plan, in, out, nullptr);
}
TALLY_API cufftResult cufftXtExec(cufftHandle plan, void* in, void* out, int direction) {
  return exec("cufftXtExec", plan, in, out, &direction);
}

// The version of the cuFFT that runs the transforms: tallyd's.
TALLY_API cufftResult cufftGetVersion(int* version) {
  Call c(kFamily, "cufftGetVersion", functionId("cufftGetVersion"));
  c.hostOut(version, sizeof(int));
  return version == nullptr ? CUFFT_INVALID_VALUE : result(c.run(false));
}

TALLY_API cufftResult cufftGetProperty(libraryPropertyType type, int* value) {
  Call c(kFamily, "cufftGetProperty", functionId("cufftGetProperty"));
  c.value(static_cast<int32_t>(type));
  c.hostOut(value, sizeof(int));
  return value == nullptr ? CUFFT_INVALID_VALUE : result(c.run(false));
}
