/* Synthetic miniature of cudaTypedefs.h (see cuda.h here). */
#ifndef CUDATYPEDEFS_H
#define CUDATYPEDEFS_H
#include <cuda.h>
#ifdef __cplusplus
extern "C" {
#endif
typedef CUresult (CUDAAPI *PFN_cuInit_v2000)(unsigned int Flags);
typedef CUresult (CUDAAPI *PFN_cuThingAlloc_v3020)(CUdeviceptr_v2 *dptr, size_t bytesize);
typedef CUresult (CUDAAPI *PFN_cuThingCopy_v3020)(CUdeviceptr_v2 dst, size_t n);
typedef CUresult (CUDAAPI *PFN_cuThingCopy_v7000_ptds)(CUdeviceptr_v2 dst, size_t n);
typedef CUresult (CUDAAPI *PFN_cuThingLaunch_v4000)(CUstream hStream);
typedef CUresult (CUDAAPI *PFN_cuThingLaunch_v7000_ptsz)(CUstream hStream);
typedef CUresult (CUDAAPI *PFN_cuGraphInstantiateWithFlags_v11040)(void **phGraphExec, void *hGraph, unsigned long long flags);
#if defined(__CUDA_API_VERSION_INTERNAL)
    typedef CUresult (CUDAAPI *PFN_cuThingAlloc_v2000)(unsigned int *dptr, unsigned int bytesize);
    typedef CUresult (CUDAAPI *PFN_cuThingCopy_v2000)(unsigned int dst, unsigned int n);
    typedef CUresult (CUDAAPI *PFN_cuGraphInstantiate_v10000)(void **phGraphExec, void *hGraph, void **phErrorNode, char *logBuffer, size_t bufferSize);
    typedef CUresult (CUDAAPI *PFN_cuGraphInstantiate_v11000)(void **phGraphExec, void *hGraph, void **phErrorNode, char *logBuffer, size_t bufferSize);
#endif
#ifdef __cplusplus
}
#endif
#endif
