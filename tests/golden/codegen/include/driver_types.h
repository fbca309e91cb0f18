/* Synthetic miniature of driver_types.h (see cuda.h here). */
enum __device_builtin__ cudaError
{
    cudaSuccess                           =      0,
    cudaErrorInvalidValue                 =     1,
    cudaErrorNotSupported                 =    801,
    cudaErrorUnknown                      =    999
    , cudaErrorApiFailureBase               =  10000
};
typedef enum cudaError cudaError_t;
typedef struct CUstream_st *cudaStream_t;
