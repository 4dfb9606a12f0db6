/*
 * cuda_app.c - an application of NVRTC and the CUDA driver API, knowing nothing of kpc:
 * it compiles a templated axpy for the GPU's sm_XX, loads the cubin, launches it on
 * 1,000,003 elements and checks every element against the host. The GPU run
 * (scripts/gpu-dropin.sh) runs it without kpc, then under LD_PRELOAD=libkpc-nvrtc.so
 * cold and warm, and linked with -lkpc-nvrtc.
 *
 * usage: cuda_app OUT.cubin   (prints the compile time; exits 1 on a wrong element)
 * Build: cc -I$CUDA/include cuda_app.c -L$CUDA/lib64 -lnvrtc -L$CUDA/lib64/stubs -lcuda
 */
#include <cuda.h>
#include <nvrtc.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define N 1000003
#define CHECK_CU(call)                                                                             \
    do {                                                                                           \
        CUresult e_ = (call);                                                                      \
        if (e_ != CUDA_SUCCESS) {                                                                  \
            const char *s_ = NULL;                                                                 \
            cuGetErrorString(e_, &s_);                                                             \
            fprintf(stderr, "%s: %s\n", #call, s_ ? s_ : "?");                                     \
            return 2;                                                                              \
        }                                                                                          \
    } while (0)
#define CHECK_RTC(call)                                                                            \
    do {                                                                                           \
        nvrtcResult r_ = (call);                                                                   \
        if (r_ != NVRTC_SUCCESS) {                                                                 \
            fprintf(stderr, "%s: %s\n", #call, nvrtcGetErrorString(r_));                           \
            return 2;                                                                              \
        }                                                                                          \
    } while (0)

static const char *source =
    "template <typename T> __global__ void axpy(T a, const T *x, T *y, int n)\n"
    "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }\n";

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    CUdevice dev;
    CUcontext ctx;
    int major = 0, minor = 0;
    CHECK_CU(cuInit(0));
    CHECK_CU(cuDeviceGet(&dev, 0));
    CHECK_CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CHECK_CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK_CU(cuCtxSetCurrent(ctx));

    char arch[64];
    snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d%d", major, minor);
    const char *opts[] = {arch, "--std=c++17"};
    double t0 = now_ms();
    nvrtcProgram prog;
    CHECK_RTC(nvrtcCreateProgram(&prog, source, "axpy.cu", 0, NULL, NULL));
    CHECK_RTC(nvrtcAddNameExpression(prog, "axpy<float>"));
    nvrtcResult r = nvrtcCompileProgram(prog, 2, opts);
    if (r != NVRTC_SUCCESS) {
        size_t n = 0;
        nvrtcGetProgramLogSize(prog, &n);
        char *log = malloc(n + 1);
        nvrtcGetProgramLog(prog, log);
        fprintf(stderr, "compile: %s\n%s\n", nvrtcGetErrorString(r), log);
        return 2;
    }
    size_t size = 0;
    CHECK_RTC(nvrtcGetCUBINSize(prog, &size));
    char *cubin = malloc(size);
    CHECK_RTC(nvrtcGetCUBIN(prog, cubin));
    const char *lowered = NULL;
    CHECK_RTC(nvrtcGetLoweredName(prog, "axpy<float>", &lowered));
    double t1 = now_ms();
    printf("compile (create .. GetCUBIN): %.3f ms, cubin %zu bytes, %s for sm_%d%d\n", t1 - t0, size, lowered,
           major, minor);
    if (argc > 1) {
        FILE *f = fopen(argv[1], "wb");
        if (f == NULL || fwrite(cubin, 1, size, f) != size)
            return 2;
        fclose(f);
    }

    CUmodule mod;
    CUfunction fn;
    CHECK_CU(cuModuleLoadData(&mod, cubin));
    CHECK_CU(cuModuleGetFunction(&fn, mod, lowered));
    CHECK_RTC(nvrtcDestroyProgram(&prog)); /* the lowered name dies with the program */
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), a = 2.0f;
    for (int i = 0; i < N; i++) {
        x[i] = (float)(i % 1024); /* exact in float: products and sums too */
        y[i] = (float)(i % 7);
    }
    CUdeviceptr dx, dy;
    CHECK_CU(cuMemAlloc(&dx, N * sizeof *x));
    CHECK_CU(cuMemAlloc(&dy, N * sizeof *y));
    CHECK_CU(cuMemcpyHtoD(dx, x, N * sizeof *x));
    CHECK_CU(cuMemcpyHtoD(dy, y, N * sizeof *y));
    int n = N;
    void *args[] = {&a, &dx, &dy, &n};
    CHECK_CU(cuLaunchKernel(fn, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CHECK_CU(cuCtxSynchronize());
    CHECK_CU(cuMemcpyDtoH(y, dy, N * sizeof *y));
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += y[i] != a * (float)(i % 1024) + (float)(i % 7);
    printf("kernel: %d of %d elements wrong\n", bad, N);
    cuMemFree(dx);
    cuMemFree(dy);
    cuModuleUnload(mod);
    free(x);
    free(y);
    free(cubin);
    return bad ? 1 : 0;
}
