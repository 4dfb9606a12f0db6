/*
 * cuda.h (stub) - only the types and values src/platform/nvidia.c and tests/test_gpu.c name, with the values
 * of CUDA 12's cuda.h, so that a machine without CUDA can check that the NVIDIA platform
 * still compiles against the seams (tests/house/check_nvidia_compiles.sh). Never linked:
 * the platform dlopens libcuda and takes every entry point by name.
 */
#ifndef KPC_STUB_CUDA_H
#define KPC_STUB_CUDA_H
typedef enum cudaError_enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_STUB_LIBRARY = 34,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
    CUDA_ERROR_INVALID_PTX = 218,
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_UNKNOWN = 999
} CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef unsigned long long CUdeviceptr;
typedef struct CUstream_st *CUstream;
typedef enum CUdevice_attribute_enum {
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
} CUdevice_attribute;
#endif
