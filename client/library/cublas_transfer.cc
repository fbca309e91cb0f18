// cuBLAS's host<->device helpers (cublasSet/GetVector, cublasSet/GetMatrix and their Async and
// _64 forms) are strided copies: they are answered with the client's own 2-D copies, which tallyd
// already checks (the device side must be the tenant's memory). Nothing of cuBLAS is involved.
#include "client/api/api_util.h"

#include <cublas_api.h>
#include <cuda_runtime_api.h>

namespace {

// A vector of `n` elements `inc` elements apart is a 2-D copy of n rows of one element.
struct Strided {
  int64_t rows;      // elements per column (matrix) or 1 (vector element)
  int64_t cols;      // columns (matrix) or elements (vector)
  int64_t elemSize;
  int64_t srcLd;     // in elements
  int64_t dstLd;
};

cublasStatus_t copy(const Strided& s, const void* src, void* dst, cudaMemcpyKind kind, cudaStream_t stream, bool async) {
  if (s.rows < 0 || s.cols < 0 || s.elemSize <= 0 || s.srcLd < s.rows || s.dstLd < s.rows || s.srcLd <= 0 ||
      s.dstLd <= 0) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (s.rows == 0 || s.cols == 0) return CUBLAS_STATUS_SUCCESS;
  size_t width = static_cast<size_t>(s.rows * s.elemSize);
  size_t srcPitch = static_cast<size_t>(s.srcLd * s.elemSize), dstPitch = static_cast<size_t>(s.dstLd * s.elemSize);
  cudaError_t e = async ? cudaMemcpy2DAsync(dst, dstPitch, src, srcPitch, width, static_cast<size_t>(s.cols), kind, stream)
                        : cudaMemcpy2D(dst, dstPitch, src, srcPitch, width, static_cast<size_t>(s.cols), kind);
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_MAPPING_ERROR;
}

Strided vector(int64_t n, int64_t elemSize, int64_t incSrc, int64_t incDst) {
  // Negative or zero increments are invalid for these helpers (as natively).
  if (incSrc <= 0 || incDst <= 0) return {-1, 0, 0, 0, 0};
  return {1, n, elemSize, incSrc, incDst};
}

}  // namespace

#define TALLY_VECTOR_COPY(NAME, INT, KIND, ASYNC)                                                           \
  TALLY_API cublasStatus_t NAME(INT n, INT elemSize, const void* x, INT incx, void* y, INT incy TALLY_STREAM_PARAM_##ASYNC) { \
    return copy(vector(n, elemSize, incx, incy), x, y, KIND, TALLY_STREAM_ARG_##ASYNC, ASYNC);              \
  }
#define TALLY_MATRIX_COPY(NAME, INT, KIND, ASYNC)                                                              \
  TALLY_API cublasStatus_t NAME(INT rows, INT cols, INT elemSize, const void* A, INT lda, void* B,             \
                                INT ldb TALLY_STREAM_PARAM_##ASYNC) {                                          \
    return copy({rows, cols, elemSize, lda, ldb}, A, B, KIND, TALLY_STREAM_ARG_##ASYNC, ASYNC);                \
  }
#define TALLY_STREAM_PARAM_true , cudaStream_t stream
#define TALLY_STREAM_PARAM_false
#define TALLY_STREAM_ARG_true stream
#define TALLY_STREAM_ARG_false nullptr

TALLY_VECTOR_COPY(cublasSetVector, int, cudaMemcpyHostToDevice, false)
TALLY_VECTOR_COPY(cublasGetVector, int, cudaMemcpyDeviceToHost, false)
TALLY_VECTOR_COPY(cublasSetVectorAsync, int, cudaMemcpyHostToDevice, true)
TALLY_VECTOR_COPY(cublasGetVectorAsync, int, cudaMemcpyDeviceToHost, true)
TALLY_VECTOR_COPY(cublasSetVector_64, int64_t, cudaMemcpyHostToDevice, false)
TALLY_VECTOR_COPY(cublasGetVector_64, int64_t, cudaMemcpyDeviceToHost, false)
TALLY_VECTOR_COPY(cublasSetVectorAsync_64, int64_t, cudaMemcpyHostToDevice, true)
TALLY_VECTOR_COPY(cublasGetVectorAsync_64, int64_t, cudaMemcpyDeviceToHost, true)
TALLY_MATRIX_COPY(cublasSetMatrix, int, cudaMemcpyHostToDevice, false)
TALLY_MATRIX_COPY(cublasGetMatrix, int, cudaMemcpyDeviceToHost, false)
TALLY_MATRIX_COPY(cublasSetMatrixAsync, int, cudaMemcpyHostToDevice, true)
TALLY_MATRIX_COPY(cublasGetMatrixAsync, int, cudaMemcpyDeviceToHost, true)
TALLY_MATRIX_COPY(cublasSetMatrix_64, int64_t, cudaMemcpyHostToDevice, false)
TALLY_MATRIX_COPY(cublasGetMatrix_64, int64_t, cudaMemcpyDeviceToHost, false)
TALLY_MATRIX_COPY(cublasSetMatrixAsync_64, int64_t, cudaMemcpyHostToDevice, true)
TALLY_MATRIX_COPY(cublasGetMatrixAsync_64, int64_t, cudaMemcpyDeviceToHost, true)
