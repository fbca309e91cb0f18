/* Synthetic miniature of cuda.h: golden input for tests/unit/codegen
 * (Golden.*).  Exercises the generator paths the real CUDA 13.0 headers do
 * not: exports whose only signature is a cudaTypedefs.h PFN typedef. */
#ifndef __cuda_cuda_h__
#define __cuda_cuda_h__

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDA_API_VERSION_INTERNAL) || defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
    #define __CUDA_API_PER_THREAD_DEFAULT_STREAM
    #define __CUDA_API_PTDS(api) api ## _ptds
    #define __CUDA_API_PTSZ(api) api ## _ptsz
#else
    #define __CUDA_API_PTDS(api) api
    #define __CUDA_API_PTSZ(api) api
#endif

#define cuThingAlloc                        cuThingAlloc_v2
#define cuThingCopy                         __CUDA_API_PTDS(cuThingCopy_v2)
#define cuGraphInstantiate                  cuGraphInstantiateWithFlags
#if defined(__CUDA_API_PER_THREAD_DEFAULT_STREAM)
    #define cuThingLaunch                   __CUDA_API_PTSZ(cuThingLaunch)
#endif

#define CUDA_VERSION 13000

#ifdef _WIN32
#define CUDAAPI __stdcall
#else
#define CUDAAPI
#endif

typedef unsigned long long CUdeviceptr_v2;
typedef CUdeviceptr_v2 CUdeviceptr;
typedef struct CUstream_st *CUstream;

typedef enum cudaError_enum {
    CUDA_SUCCESS                              = 0,
    CUDA_ERROR_INVALID_VALUE                  = 1, /* , = 5 in a comment */
    CUDA_ERROR_NOT_SUPPORTED                  = 801,
    CUDA_ERROR_UNKNOWN                        = 999
} CUresult;

#ifdef __cplusplus
extern "C" {
#endif

CUresult CUDAAPI cuInit(unsigned int Flags);
CUresult CUDAAPI cuThingAlloc(CUdeviceptr *dptr,
                              size_t bytesize);   /* -> cuThingAlloc_v2 */
CUresult CUDAAPI cuThingCopy(CUdeviceptr dst, size_t n);
CUresult CUDAAPI cuThingLaunch(CUstream hStream);
CUresult CUDAAPI cuGraphInstantiate(void **phGraphExec, void *hGraph, unsigned long long flags);
const char *cuNotAResult(int x);

#if defined(__CUDA_API_VERSION_INTERNAL)
    /* Like the real cuda.h, minus "#undef cuThingAlloc": the generator must
       #undef names that stay macros in the internal configuration. */
    #undef cuThingCopy
    #undef cuThingLaunch
    #undef cuGraphInstantiate
    CUresult CUDAAPI cuThingCopy_v2(CUdeviceptr dst, size_t n);
    CUresult CUDAAPI cuThingLaunch(CUstream hStream);
#elif defined(__CUDA_API_PER_THREAD_DEFAULT_STREAM)
static inline CUresult cuThingHelper_ptsz(CUstream hStream) { return cuThingLaunch(hStream); }
#endif

#ifdef __cplusplus
}
#endif
#endif
