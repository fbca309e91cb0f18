/* Synthetic miniature of cuda_runtime_api.h (see cuda.h here). */
#if !defined(__CUDA_RUNTIME_API_H__)
#define __CUDA_RUNTIME_API_H__
#define CUDART_VERSION  13000
#define __CUDART_API_VERSION CUDART_VERSION
/* Stand-ins for crt/host_defines.h. */
#define __host__
#define __cudart_builtin__
#define __device_builtin__
#define CUDARTAPI
#define __CUDA_DEPRECATED __attribute__((deprecated))

#include <stddef.h>
#include "driver_types.h"

#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM) || defined(__CUDA_API_VERSION_INTERNAL)
    #define __CUDART_API_PER_THREAD_DEFAULT_STREAM
    #define __CUDART_API_PTDS(api) api ## _ptds
    #define __CUDART_API_PTSZ(api) api ## _ptsz
#else
    #define __CUDART_API_PTDS(api) api
    #define __CUDART_API_PTSZ(api) api
#endif
#if defined(__CUDART_API_PER_THREAD_DEFAULT_STREAM)
    #define cudaThingCopy                  __CUDART_API_PTDS(cudaThingCopy)
    #define cudaThingWait                  __CUDART_API_PTSZ(cudaThingWait)
#endif

#if defined(__cplusplus)
#define __dv(v) \
        = v
#else
#define __dv(v)
#endif

#if defined(__cplusplus)
extern "C" {
#endif
extern __host__ cudaError_t CUDARTAPI cudaThingAlloc(void **devPtr, size_t size);
extern __host__ __cudart_builtin__ cudaError_t CUDARTAPI cudaThingCopy(void *dst, const void *src, size_t count, cudaStream_t stream __dv(0));
#if __CUDART_API_VERSION >= 11010
extern __host__ cudaError_t CUDARTAPI cudaThingWait(
    cudaStream_t stream, /* the stream, (not a param) */
#if defined(__cplusplus)
    unsigned int flags = 0);
#else
    unsigned int flags);
#endif
#endif
#if __CUDART_API_VERSION >= 99000
extern __host__ cudaError_t CUDARTAPI cudaFromTheFuture(void);
#endif
extern __host__ __CUDA_DEPRECATED cudaError_t CUDARTAPI cudaThingOld(void);
extern __host__ const char* CUDARTAPI cudaThingName(cudaError_t error);
#if defined(__CUDART_API_PER_THREAD_DEFAULT_STREAM) && !defined(__CUDA_API_VERSION_INTERNAL)
    #undef cudaThingWait
    static __inline__ __host__ cudaError_t cudaThingWait(cudaStream_t stream, unsigned int flags)
    {
        return cudaThingWait_ptsz(stream, flags);
    }
#endif
#if defined(__cplusplus)
}
#endif
#endif
