/*
 * gpu_support.c - the GPU tests' kernels, fixtures and driver API (gpu_support.h).
 */
#define _GNU_SOURCE
#include "support.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu_support.h"

#define SYM(field, name) (*(void **)&field = dlsym(gpu.lib, name)) != NULL

char *dir;
void setup(void) { dir = ts_tmpdir(); }
void teardown(void) { ts_cleanup(dir); }

/* ---- the kernels: plain CUDA/HIP C++ that NVRTC and hipRTC both take without includes */
const char saxpy_code[] =
    "extern \"C\" __global__ void saxpy(int n, float a, const float *x, float *y)\n"
    "{\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n)\n"
    "        y[i] = a * x[i] + y[i];\n"
    "}\n";

const char axpby_code[] =
    "template <typename T>\n"
    "__global__ void axpby(int n, T a, const T *x, T b, T *y)\n"
    "{\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n)\n"
    "        y[i] = a * x[i] + b * y[i];\n"
    "}\n";
const char *const axpby_exprs[] = {"axpby<float>", "axpby<double>", "axpby<int>"};

kpc_source saxpy_src(void)
{
    return ts_src(saxpy_code, "saxpy.hip");
}

kpc_source axpby_src(void)
{
    kpc_source s = ts_src(axpby_code, "axpby.hip");
    s.name_expressions = axpby_exprs;
    s.num_name_expressions = 3;
    return s;
}

gpu_api gpu;

#ifdef KPC_PLATFORM_NVIDIA
#include <cuda.h>
static struct {
    CUresult (*init)(unsigned);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*set)(CUcontext);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*release)(CUdeviceptr);
    CUresult (*htod)(CUdeviceptr, const void *, size_t);
    CUresult (*dtoh)(void *, CUdeviceptr, size_t);
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       CUstream, void **, void **);
    CUresult (*sync)(void);
    CUresult (*load)(CUmodule *, const void *);
    CUresult (*unload)(CUmodule);
} cu;

static int nv_bind(int device)
{
    CUdevice d;
    CUcontext c;
    CUresult r = cu.init(0);
    if (r == CUDA_SUCCESS)
        r = cu.device_get(&d, device);
    if (r == CUDA_SUCCESS)
        r = cu.retain(&c, d);
    if (r == CUDA_SUCCESS)
        r = cu.set(c);
    return (int)r;
}
static int nv_alloc(uint64_t *p, size_t n) { CUdeviceptr d = 0; int r = cu.alloc(&d, n); *p = d; return r; }
static int nv_release(uint64_t p) { return cu.release((CUdeviceptr)p); }
static int nv_htod(uint64_t d, const void *s, size_t n) { return cu.htod((CUdeviceptr)d, s, n); }
static int nv_dtoh(void *d, uint64_t s, size_t n) { return cu.dtoh(d, (CUdeviceptr)s, n); }
static int nv_launch(hipFunction_t f, unsigned grid, unsigned block, void **args)
{
    return cu.launch((CUfunction)f, grid, 1, 1, block, 1, 1, 0, NULL, args, NULL);
}
static int nv_sync(void) { return cu.sync(); }
static int nv_load(void **m, const void *image) { return cu.load((CUmodule *)m, image); }
static int nv_unload(void *m) { return cu.unload((CUmodule)m); }

bool gpu_api_load(void)
{
    gpu.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (gpu.lib == NULL || !(SYM(cu.init, "cuInit") && SYM(cu.device_get, "cuDeviceGet") &&
                             SYM(cu.retain, "cuDevicePrimaryCtxRetain") && SYM(cu.set, "cuCtxSetCurrent") &&
                             SYM(cu.alloc, "cuMemAlloc_v2") && SYM(cu.release, "cuMemFree_v2") &&
                             SYM(cu.htod, "cuMemcpyHtoD_v2") && SYM(cu.dtoh, "cuMemcpyDtoH_v2") &&
                             SYM(cu.launch, "cuLaunchKernel") && SYM(cu.sync, "cuCtxSynchronize") &&
                             SYM(cu.load, "cuModuleLoadData") && SYM(cu.unload, "cuModuleUnload")))
        return false;
    gpu.bind = nv_bind, gpu.alloc = nv_alloc, gpu.release = nv_release, gpu.htod = nv_htod;
    gpu.dtoh = nv_dtoh, gpu.launch = nv_launch, gpu.sync = nv_sync, gpu.load = nv_load;
    gpu.unload = nv_unload;
    return true;
}
#else
/* HIP's module API has the same shape; declared here so the test needs no HIP headers. */
static struct {
    int (*set)(int);
    int (*alloc)(void **, size_t);
    int (*release)(void *);
    int (*htod)(void *, void *, size_t);
    int (*dtoh)(void *, void *, size_t);
    int (*launch)(hipFunction_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                  void *, void **, void **);
    int (*sync)(void);
    int (*load)(void **, const void *);
    int (*unload)(void *);
} hip;

static int amd_bind(int device) { return hip.set(device); }
static int amd_alloc(uint64_t *p, size_t n) { void *d = NULL; int r = hip.alloc(&d, n); *p = (uintptr_t)d; return r; }
static int amd_release(uint64_t p) { return hip.release((void *)(uintptr_t)p); }
static int amd_htod(uint64_t d, const void *s, size_t n) { return hip.htod((void *)(uintptr_t)d, (void *)s, n); }
static int amd_dtoh(void *d, uint64_t s, size_t n) { return hip.dtoh(d, (void *)(uintptr_t)s, n); }
static int amd_launch(hipFunction_t f, unsigned grid, unsigned block, void **args)
{
    return hip.launch(f, grid, 1, 1, block, 1, 1, 0, NULL, args, NULL);
}
static int amd_sync(void) { return hip.sync(); }
static int amd_load(void **m, const void *image) { return hip.load(m, image); }
static int amd_unload(void *m) { return hip.unload(m); }

bool gpu_api_load(void)
{
    gpu.lib = dlopen("libamdhip64.so.5", RTLD_NOW | RTLD_LOCAL);
    if (gpu.lib == NULL || !(SYM(hip.set, "hipSetDevice") && SYM(hip.alloc, "hipMalloc") &&
                             SYM(hip.release, "hipFree") && SYM(hip.htod, "hipMemcpyHtoD") &&
                             SYM(hip.dtoh, "hipMemcpyDtoH") && SYM(hip.launch, "hipModuleLaunchKernel") &&
                             SYM(hip.sync, "hipDeviceSynchronize") && SYM(hip.load, "hipModuleLoadData") &&
                             SYM(hip.unload, "hipModuleUnload")))
        return false;
    gpu.bind = amd_bind, gpu.alloc = amd_alloc, gpu.release = amd_release, gpu.htod = amd_htod;
    gpu.dtoh = amd_dtoh, gpu.launch = amd_launch, gpu.sync = amd_sync, gpu.load = amd_load;
    gpu.unload = amd_unload;
    return true;
}
#endif

void gpu_ready(void)
{
    ck_assert_msg(gpu_api_load(), "cannot load the driver API: %s", dlerror());
    ck_assert_int_eq(gpu.bind(0), 0);
}

/* A target this device refuses: another major architecture. */
const char *foreign_target(const char *device_target)
{
#ifdef KPC_PLATFORM_NVIDIA
    return strncmp(device_target, "sm_8", 4) == 0 ? "sm_90" : "sm_80";
#else
    return strncmp(device_target, "gfx10", 5) == 0 ? "gfx90a" : "gfx1030";
#endif
}

kpc_stats stats_of(kpc_cache *c)
{
    kpc_stats st;
    ck_assert_int_eq(kpc_stats_get(c, &st), KPC_OK);
    return st;
}
