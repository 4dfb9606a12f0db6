/*
 * nvrtc.h (stub) - only the types and values src/platform/nvidia.c names (values of
 * CUDA 12's nvrtc.h), for the compile-only check of the NVIDIA platform without CUDA.
 */
#ifndef KPC_STUB_NVRTC_H
#define KPC_STUB_NVRTC_H
typedef enum {
    NVRTC_SUCCESS = 0,
    NVRTC_ERROR_OUT_OF_MEMORY = 1,
    NVRTC_ERROR_PROGRAM_CREATION_FAILURE = 2,
    NVRTC_ERROR_INVALID_INPUT = 3,
    NVRTC_ERROR_INVALID_PROGRAM = 4,
    NVRTC_ERROR_INVALID_OPTION = 5,
    NVRTC_ERROR_COMPILATION = 6
} nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;
#endif
