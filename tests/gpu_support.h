/*
 * gpu_support.h - what the GPU tests (tests/test_gpu.c, test_gpu_platform.c) share: the
 * case's cache directory, the kernels (plain CUDA/HIP C++ that NVRTC and hipRTC both
 * take without includes), and the platform's own driver API, dlopen'ed here as libkpc
 * does (libcuda.so.1 or libamdhip64.so.5), so the tests build where only CUDA's stub
 * exists.
 */
#ifndef KPC_TEST_GPU_SUPPORT_H
#define KPC_TEST_GPU_SUPPORT_H

#include "support.h"

extern char *dir;
void setup(void);
void teardown(void);

/* ---- the kernels: plain CUDA/HIP C++ that NVRTC and hipRTC both take without includes */
extern const char saxpy_code[];

extern const char axpby_code[];
extern const char *const axpby_exprs[];

kpc_source saxpy_src(void);

kpc_source axpby_src(void);

/* ---- the driver API, loaded here the way libkpc loads it ---------------------------- */
typedef struct gpu_api {
    void *lib;
    int (*bind)(int device); /* make the device current on this thread */
    int (*alloc)(uint64_t *ptr, size_t bytes);
    int (*release)(uint64_t ptr);
    int (*htod)(uint64_t dst, const void *src, size_t bytes);
    int (*dtoh)(void *dst, uint64_t src, size_t bytes);
    int (*launch)(hipFunction_t f, unsigned grid, unsigned block, void **args);
    int (*sync)(void);
    int (*load)(void **module, const void *image);
    int (*unload)(void *module);
} gpu_api;

extern gpu_api gpu;

/* Load the driver API into gpu (false if it cannot be loaded; dlerror() says why). */
bool gpu_api_load(void);

/* The driver API loaded and GPU 0 current, or the test fails. */
void gpu_ready(void);

/* A target this device refuses: another major architecture. */
const char *foreign_target(const char *device_target);

kpc_stats stats_of(kpc_cache *c);

#endif
