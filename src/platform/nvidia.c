/*
 * nvidia.c - the NVIDIA platform: NVRTC compiles, the CUDA driver API loads
 * modules. These are exactly the calls HIP's NVIDIA platform maps hiprtc* and hipModule*
 * onto; kpc calls CUDA directly because HIP's NVIDIA headers (Debian's HIP 5.2) do not
 * compile against CUDA 13. hipFunction_t is CUfunction there, so kpc_kernel_get hands
 * back what a HIP-on-NVIDIA application launches.
 *
 * Nothing is linked: libnvrtc and libcuda.so.1 are dlopen'ed on first need (a miss, a
 * device context, a target never seen before), as platform/amd.c does for ROCm, so a
 * warm hit and the tools never load them and run where CUDA is absent.
 *
 * Code objects: for sm_XX (and sm_XXa / sm_XXf) targets a cubin (nvrtcGetCUBIN), for
 * compute_XX targets PTX (nvrtcGetPTX, stored with its terminating NUL so that the bytes
 * are a string cuModuleLoadData accepts as is). Cubins are what device contexts cache:
 * PTX makes the driver JIT-compile every module at load (8-100 ms), a cubin loads in
 * tens of microseconds.
 *
 * Identity: nvrtcVersion, the build ids of the loaded libnvrtc and libnvrtc-builtins,
 * and, where a driver is installed, cuDriverGetVersion and libcuda's build id (a driver
 * upgrade changes which PTX and cubins it accepts, so it renames every object).
 *
 * Targets are judged by platform/nvrtc_target.c (shared with the NVRTC drop-in) over
 * this platform's NVRTC.
 *
 * Over 500 lines for one responsibility: NVRTC and the CUDA driver are two libraries
 * with their own loading and identity, and the driver needs primary contexts managed
 * per device; all of it is this platform's own API calls.
 */
#define _GNU_SOURCE
#include "platform/compile.h"
#include "platform/include_scan.h"
#include "platform/identity.h"
#include "platform/nvrtc_target.h"
#include "base/log.h"
#include "base/hash.h"

#include <bsd/string.h>
#include <cuda.h>
#include <dlfcn.h>
#include <libgen.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */

/* ---- lazily loaded entry points ----------------------------------------------------- */
static struct {
    void *nvrtc, *builtins, *cuda;
    kpc_nvrtc_calls rtc; /* what platform/nvrtc_target.c asks; the compile uses it too */
    nvrtcResult (*add_name)(nvrtcProgram, const char *);
    nvrtcResult (*lowered)(nvrtcProgram, const char *, const char **);
    nvrtcResult (*log_size)(nvrtcProgram, size_t *);
    nvrtcResult (*log)(nvrtcProgram, char *);
    nvrtcResult (*cubin_size)(nvrtcProgram, size_t *);
    nvrtcResult (*cubin)(nvrtcProgram, char *);
    nvrtcResult (*ptx_size)(nvrtcProgram, size_t *);
    nvrtcResult (*ptx)(nvrtcProgram, char *);
    const char *(*rtc_error)(nvrtcResult);
    CUresult (*init)(unsigned);
    CUresult (*driver_version)(int *);
    CUresult (*device_count)(int *);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*attribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*primary_retain)(CUcontext *, CUdevice);
    CUresult (*ctx_get)(CUcontext *);
    CUresult (*ctx_set)(CUcontext);
    CUresult (*ctx_push)(CUcontext);
    CUresult (*ctx_pop)(CUcontext *);
    CUresult (*module_load)(CUmodule *, const void *);
    CUresult (*module_unload)(CUmodule);
    CUresult (*module_function)(CUfunction *, CUmodule, const char *);
    CUresult (*error_name)(CUresult, const char **);
    kpc_status nvrtc_status, cuda_status;
    CUresult init_result;
    int nvrtc_major, nvrtc_minor;
} nv;

static pthread_once_t nvrtc_once = PTHREAD_ONCE_INIT, cuda_once = PTHREAD_ONCE_INIT,
                      init_once = PTHREAD_ONCE_INIT;

/* Primary contexts retained so far, one per device, for the life of the process: every
 * module kpc loads lives in one, and HIP on NVIDIA uses the same (hipSetDevice). */
#define MAX_DEVICES 256
static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext primary[MAX_DEVICES]; /* guarded by primary_lock */

#define LOAD(lib, field, name)                                                                 \
    do {                                                                                       \
        *(void **)&nv.field = dlsym(nv.lib, name);                                             \
        if (nv.field == NULL) {                                                                \
            KPC_LOG(KPC_LOG_ERROR, "dlsym(%s): %s", name, dlerror());                          \
            return KPC_E_UNAVAILABLE;                                                          \
        }                                                                                      \
    } while (0)

/* Try each name with the loader's search path, then under $CUDA_HOME and /usr/local/cuda,
 * where CUDA installs without registering itself with ldconfig. */
static void *open_lib(const char *const *names)
{
    for (const char *const *n = names; *n; n++) {
        void *h = dlopen(*n, RTLD_NOW | RTLD_LOCAL);
        if (h)
            return h;
    }
    const char *home = getenv("CUDA_HOME");
    const char *roots[] = {home && home[0] ? home : NULL, "/usr/local/cuda"};
    for (size_t r = 0; r < 2; r++)
        for (const char *const *n = names; roots[r] && *n; n++)
            for (int sub = 0; sub < 2; sub++) {
                char path[1024];
                snprintf(path, sizeof path, "%s/%s/%s", roots[r], sub ? "lib" : "lib64", *n);
                void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
                if (h)
                    return h;
            }
    return NULL;
}

static kpc_status load_nvrtc_symbols(void)
{
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", NULL};
    nv.nvrtc = open_lib(names);
    if (nv.nvrtc == NULL) {
        KPC_LOG(KPC_LOG_ERROR, "cannot load NVRTC (libnvrtc.so.13 or .12, also looked in "
                "$CUDA_HOME and /usr/local/cuda): %s", dlerror());
        return KPC_E_UNAVAILABLE;
    }
    LOAD(nvrtc, rtc.version, "nvrtcVersion");
    LOAD(nvrtc, rtc.num_archs, "nvrtcGetNumSupportedArchs");
    LOAD(nvrtc, rtc.archs, "nvrtcGetSupportedArchs");
    LOAD(nvrtc, rtc.create, "nvrtcCreateProgram");
    LOAD(nvrtc, add_name, "nvrtcAddNameExpression");
    LOAD(nvrtc, rtc.compile, "nvrtcCompileProgram");
    LOAD(nvrtc, rtc.destroy, "nvrtcDestroyProgram");
    LOAD(nvrtc, lowered, "nvrtcGetLoweredName");
    LOAD(nvrtc, log_size, "nvrtcGetProgramLogSize");
    LOAD(nvrtc, log, "nvrtcGetProgramLog");
    LOAD(nvrtc, cubin_size, "nvrtcGetCUBINSize");
    LOAD(nvrtc, cubin, "nvrtcGetCUBIN");
    LOAD(nvrtc, ptx_size, "nvrtcGetPTXSize");
    LOAD(nvrtc, ptx, "nvrtcGetPTX");
    LOAD(nvrtc, rtc_error, "nvrtcGetErrorString");
    if (nv.rtc.version(&nv.nvrtc_major, &nv.nvrtc_minor) != NVRTC_SUCCESS) {
        KPC_LOG(KPC_LOG_ERROR, "nvrtcVersion failed");
        return KPC_E_UNAVAILABLE;
    }
    /* NVRTC dlopens libnvrtc-builtins.so.MAJOR.MINOR, from its own directory, during the
     * first compile; open it now so its build id is among the loaded objects for the
     * identity before any compile has run */
    char name[64], path[1200], self[1024];
    snprintf(name, sizeof name, "libnvrtc-builtins.so.%d.%d", nv.nvrtc_major, nv.nvrtc_minor);
    uint8_t id[64];
    if (kpc_identity_loaded_build_id("libnvrtc.so", id, sizeof id, self, sizeof self) > 0) {
        snprintf(path, sizeof path, "%s/%s", dirname(self), name);
        nv.builtins = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    if (nv.builtins == NULL) {
        const char *const builtins[] = {name, NULL};
        nv.builtins = open_lib(builtins);
    }
    if (nv.builtins == NULL)
        KPC_LOG(KPC_LOG_WARN, "cannot load %s: NVRTC will fail to compile", name);
    return KPC_OK;
}

/* The driver: only libcuda.so.1, the name the driver installs. The toolkit's stub
 * (stubs/libcuda.so) answers every call with CUDA_ERROR_STUB_LIBRARY and must never be
 * mistaken for a driver, so no other name is tried. */
static kpc_status load_cuda_symbols(void)
{
    nv.cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (nv.cuda == NULL) {
        KPC_LOG(KPC_LOG_DEBUG, "no NVIDIA driver: %s", dlerror());
        return KPC_E_NO_DEVICE;
    }
    LOAD(cuda, init, "cuInit");
    LOAD(cuda, driver_version, "cuDriverGetVersion");
    LOAD(cuda, device_count, "cuDeviceGetCount");
    LOAD(cuda, device_get, "cuDeviceGet");
    LOAD(cuda, attribute, "cuDeviceGetAttribute");
    LOAD(cuda, primary_retain, "cuDevicePrimaryCtxRetain");
    LOAD(cuda, ctx_get, "cuCtxGetCurrent");
    LOAD(cuda, ctx_set, "cuCtxSetCurrent");
    LOAD(cuda, ctx_push, "cuCtxPushCurrent_v2");
    LOAD(cuda, ctx_pop, "cuCtxPopCurrent_v2");
    LOAD(cuda, module_load, "cuModuleLoadData");
    LOAD(cuda, module_unload, "cuModuleUnload");
    LOAD(cuda, module_function, "cuModuleGetFunction");
    LOAD(cuda, error_name, "cuGetErrorName");
    return KPC_OK;
}

static void load_nvrtc(void) { nv.nvrtc_status = load_nvrtc_symbols(); }
static void load_cuda(void) { nv.cuda_status = load_cuda_symbols(); }
static void init_cuda(void) { nv.init_result = nv.init(0); }

static kpc_status need_nvrtc(void)
{
    pthread_once(&nvrtc_once, load_nvrtc);
    return nv.nvrtc_status;
}

/* The driver loaded (not initialized): KPC_E_NO_DEVICE when none is installed. */
static kpc_status need_driver(void)
{
    pthread_once(&cuda_once, load_cuda);
    return nv.cuda_status;
}

static const char *cu_name(CUresult r)
{
    const char *s = NULL;
    if (nv.error_name == NULL || nv.error_name(r, &s) != CUDA_SUCCESS || s == NULL)
        return "CUDA_ERROR_UNKNOWN";
    return s;
}

static kpc_status cu_fail(CUresult r, const char *call)
{
    KPC_LOG(KPC_LOG_ERROR, "%s: %s (%d)", call, cu_name(r), (int)r);
    return KPC_E_HIP;
}

/* The driver loaded and cuInit run once; KPC_E_NO_DEVICE (logged) where there is no GPU. */
static kpc_status need_cuda(void)
{
    kpc_status s = need_driver();
    if (s == KPC_E_NO_DEVICE) {
        KPC_LOG(KPC_LOG_ERROR, "no GPU: the NVIDIA driver (libcuda.so.1) is not installed (use a "
                "compile-only context with kpc_context_create_for_target)");
        return s;
    }
    if (s != KPC_OK)
        return s;
    pthread_once(&init_once, init_cuda);
    if (nv.init_result == CUDA_ERROR_NO_DEVICE || nv.init_result == CUDA_ERROR_STUB_LIBRARY) {
        KPC_LOG(KPC_LOG_ERROR, "no GPU: cuInit: %s (use a compile-only context with "
                "kpc_context_create_for_target)", cu_name(nv.init_result));
        return KPC_E_NO_DEVICE;
    }
    return nv.init_result == CUDA_SUCCESS ? KPC_OK : cu_fail(nv.init_result, "cuInit");
}

/* ---- identity ----------------------------------------------------------------------- */
static kpc_status nvidia_identity(const kpc_root *root, uint8_t id[16], char *desc, size_t desc_cap)
{
    desc[0] = '\0';
    if (kpc_identity_recall(root, "nvidia", id))
        return KPC_OK;
    kpc_status s = need_nvrtc();
    if (s != KPC_OK)
        return s;
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    kpc_identity_files files = {0};
    int ver[2] = {nv.nvrtc_major, nv.nvrtc_minor};
    XXH3_128bits_update(&st, "nvrtc", 6);
    XXH3_128bits_update(&st, ver, sizeof ver);
    snprintf(desc, desc_cap, "nvrtc %d.%d", ver[0], ver[1]);
    kpc_identity_add_build_id(&st, &files, "libnvrtc.so", desc, desc_cap);
    kpc_identity_add_build_id(&st, &files, "libnvrtc-builtins.so", desc, desc_cap);
    /* the driver, where one is installed: a login node without one names its objects
     * differently from a GPU node (docs/platforms.md) */
    int driver = 0;
    if (need_driver() == KPC_OK && nv.driver_version(&driver) == CUDA_SUCCESS) {
        XXH3_128bits_update(&st, "driver", 7);
        XXH3_128bits_update(&st, &driver, sizeof driver);
        size_t used = strlen(desc);
        snprintf(desc + used, desc_cap - used, " driver %d", driver);
        kpc_identity_add_build_id(&st, &files, "libcuda.so", desc, desc_cap);
    } else {
        XXH3_128bits_update(&st, "no driver", 10);
    }
    XXH128_canonicalFromHash((XXH128_canonical_t *)id, XXH3_128bits_digest(&st));
    kpc_identity_remember(root, "nvidia", &files, id);
    KPC_LOG(KPC_LOG_INFO, "compiler identity: %s", desc);
    return KPC_OK;
}

/* ---- targets: judged by platform/nvrtc_target.c over this platform's NVRTC ----------- */
static const kpc_nvrtc_calls *nvrtc_calls(void)
{
    return need_nvrtc() == KPC_OK ? &nv.rtc : NULL;
}

static const kpc_nvrtc_targets nvrtc_targets = {
    .platform = "nvidia", .load = nvrtc_calls, .refusal_level = KPC_LOG_ERROR};

static kpc_status nvidia_target_normalize(const kpc_root *root, const uint8_t id[16], const char *target,
                                          char *out, size_t cap)
{
    return kpc_nvrtc_target_normalize(&nvrtc_targets, root, id, target, out, cap);
}

/* ---- compile: NVRTC's calls for platform/compile.c ------------------------------------ */
static int rtc_create(void **prog, const char *code, const char *name, const kpc_source *src)
{
    return nv.rtc.create(prog, code, name, (int)src->num_headers, src->header_sources, src->header_names);
}

static int rtc_add_name(void *prog, const char *expr) { return nv.add_name(prog, expr); }
static int rtc_compile(void *prog, int n, const char **opts) { return nv.rtc.compile(prog, n, opts); }
/* the size counts a terminating NUL; compile.c terminates anyway rather than trust it */
static int rtc_log_size(void *prog, size_t *size) { return nv.log_size(prog, size); }
static int rtc_log(void *prog, char *out) { return nv.log(prog, out); }
static int rtc_lowered(void *prog, const char *expr, const char **out) { return nv.lowered(prog, expr, out); }
static void rtc_destroy(void **prog) { nv.rtc.destroy(prog); }
static const char *rtc_error(int r) { return nv.rtc_error((nvrtcResult)r); }

/* The code object: a cubin for sm_ targets, PTX (with its NUL) for compute_ targets. */
static bool is_ptx(const char *target) { return strncmp(target, "compute_", 8) == 0; }

static int rtc_code_size(void *prog, const char *target, size_t *size)
{
    nvrtcResult r = is_ptx(target) ? nv.ptx_size(prog, size) : nv.cubin_size(prog, size);
    /* NVRTC reports 0 rather than an error when it made no such object */
    return r == NVRTC_SUCCESS && *size == 0 ? NVRTC_ERROR_INVALID_PROGRAM : r;
}

static int rtc_code(void *prog, const char *target, void *out)
{
    return is_ptx(target) ? nv.ptx(prog, out) : nv.cubin(prog, out);
}

static enum kpc_compile_class rtc_classify(int r)
{
    return r == NVRTC_SUCCESS ? KPC_COMPILE_OK
           : r == NVRTC_ERROR_OUT_OF_MEMORY ? KPC_COMPILE_NOMEM : KPC_COMPILE_FAILED;
}

/* NVRTC compiles programs on several threads at once (unlike hipRTC 5.2): no lock. */
static const kpc_compiler nvrtc = {
    .name = "NVRTC",
    .arch_option = "-arch=",
    .default_name = "kpc_source.cu",
    .lock = NULL,
    .create = rtc_create,
    .add_name = rtc_add_name,
    .compile = rtc_compile,
    .log_size = rtc_log_size,
    .log = rtc_log,
    .code_size = rtc_code_size,
    .code = rtc_code,
    .lowered = rtc_lowered,
    .destroy = rtc_destroy,
    .classify = rtc_classify,
    .error_string = rtc_error,
    /* NVRTC (12.x, 13.x) documents no dependency output (no -MD/-MF among its options):
     * the files are found from the includes (platform/include_scan.c) */
    .deps_scan = kpc_include_scan,
};

static kpc_status nvidia_compile(const char *target, const kpc_source *src, kpc_build *b)
{
    memset(b, 0, sizeof *b);
    kpc_status s = need_nvrtc();
    return s != KPC_OK ? s : kpc_compile_run(&nvrtc, target, src, b);
}

/* ---- devices ------------------------------------------------------------------------ */
/* The device's primary context, retained once for the life of the process. */
static kpc_status primary_ctx(int device, CUcontext *out)
{
    if (device < 0 || device >= MAX_DEVICES) {
        KPC_LOG(KPC_LOG_ERROR, "CUDA device %d: kpc handles devices 0 to %d", device, MAX_DEVICES - 1);
        return KPC_E_NO_DEVICE;
    }
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&primary_lock);
    CUcontext ctx = primary[device];
    if (ctx == NULL) {
        CUdevice dev;
        if ((r = nv.device_get(&dev, device)) == CUDA_SUCCESS &&
            (r = nv.primary_retain(&ctx, dev)) == CUDA_SUCCESS)
            primary[device] = ctx;
    }
    pthread_mutex_unlock(&primary_lock);
    if (r != CUDA_SUCCESS)
        return cu_fail(r, "cuDevicePrimaryCtxRetain");
    *out = ctx;
    return KPC_OK;
}

static kpc_status retain_primary(int device)
{
    CUcontext ctx;
    return primary_ctx(device, &ctx);
}

static kpc_status nvidia_device_target(int device, char *out, size_t cap)
{
    kpc_status s = need_cuda();
    if (s != KPC_OK)
        return s;
    int count = 0;
    CUresult r = nv.device_count(&count);
    if (r != CUDA_SUCCESS)
        return cu_fail(r, "cuDeviceGetCount");
    if (count == 0) {
        KPC_LOG(KPC_LOG_ERROR, "no GPU: cuDeviceGetCount found none (use a compile-only context with "
                "kpc_context_create_for_target)");
        return KPC_E_NO_DEVICE;
    }
    if (device >= count) {
        KPC_LOG(KPC_LOG_ERROR, "no CUDA device %d: there are %d", device, count);
        return KPC_E_NO_DEVICE;
    }
    CUdevice dev;
    int major = 0, minor = 0;
    if ((r = nv.device_get(&dev, device)) != CUDA_SUCCESS)
        return cu_fail(r, "cuDeviceGet");
    if ((r = nv.attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)) != CUDA_SUCCESS ||
        (r = nv.attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)) != CUDA_SUCCESS)
        return cu_fail(r, "cuDeviceGetAttribute(compute capability)");
    /* the plain sm_XY cubin: it loads on this device, and on no other major version */
    snprintf(out, cap, "sm_%d%d", major, minor);
    /* create the device's primary context now (~100 ms on an H100): a device context is
     * then ready to load, and the first kpc_program_get does not pay for it */
    return retain_primary(device);
}

/*
 * Make the device's primary context current for one driver call, leaving the thread as
 * the caller had it afterwards unless it had no context at all: then the primary one
 * stays current, as the CUDA runtime (and HIP on NVIDIA) would make it, so a caller
 * can launch what kpc loaded without further set-up. *pushed tells enter_ctx's caller
 * to pop it again.
 */
static kpc_status enter_ctx(int device, bool *pushed)
{
    *pushed = false;
    kpc_status s = need_cuda();
    CUcontext ctx = NULL;
    if (s == KPC_OK)
        s = primary_ctx(device, &ctx);
    if (s != KPC_OK)
        return s;
    CUresult r;
    CUcontext cur = NULL;
    if (nv.ctx_get(&cur) != CUDA_SUCCESS)
        cur = NULL;
    if (cur == ctx)
        return KPC_OK;
    if (cur == NULL)
        r = nv.ctx_set(ctx);
    else if ((r = nv.ctx_push(ctx)) == CUDA_SUCCESS)
        *pushed = true;
    return r == CUDA_SUCCESS ? KPC_OK : cu_fail(r, "cuCtxSetCurrent");
}

static void leave_ctx(bool pushed)
{
    CUcontext popped;
    if (pushed)
        nv.ctx_pop(&popped);
}

static kpc_status nvidia_module_load(int device, const void *code, size_t size, void **module)
{
    (void)size; /* a cubin carries its size; PTX is NUL-terminated */
    bool pushed;
    kpc_status s = enter_ctx(device, &pushed);
    if (s != KPC_OK)
        return s;
    CUmodule m = NULL;
    CUresult r = nv.module_load(&m, code);
    leave_ctx(pushed);
    if (r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_INVALID_IMAGE || r == CUDA_ERROR_INVALID_PTX ||
        r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION) {
        /* a foreign or stale object: core/resolve.c removes it and builds it again */
        KPC_LOG(KPC_LOG_WARN, "cuModuleLoadData refused the image: %s", cu_name(r));
        return KPC_E_CORRUPT;
    }
    if (r != CUDA_SUCCESS)
        return cu_fail(r, "cuModuleLoadData");
    *module = m;
    return KPC_OK;
}

static void nvidia_module_unload(int device, void *module)
{
    bool pushed;
    if (enter_ctx(device, &pushed) != KPC_OK)
        return;
    CUresult r = nv.module_unload((CUmodule)module);
    leave_ctx(pushed);
    if (r != CUDA_SUCCESS)
        KPC_LOG(KPC_LOG_WARN, "cuModuleUnload: %s", cu_name(r));
}

static kpc_status nvidia_module_function(int device, void *module, const char *name, void **fn)
{
    bool pushed;
    kpc_status s = enter_ctx(device, &pushed);
    if (s != KPC_OK)
        return s;
    CUfunction f = NULL;
    CUresult r = nv.module_function(&f, (CUmodule)module, name);
    leave_ctx(pushed);
    if (r == CUDA_ERROR_NOT_FOUND)
        return KPC_E_NOT_FOUND;
    if (r != CUDA_SUCCESS)
        return cu_fail(r, "cuModuleGetFunction");
    *fn = f;
    return KPC_OK;
}

const kpc_platform kpc_platform_builtin = {
    .name = "nvidia",
    .identity = nvidia_identity,
    .target_normalize = nvidia_target_normalize,
    .compile = nvidia_compile,
    .device_target = nvidia_device_target,
    .module_load = nvidia_module_load,
    .module_unload = nvidia_module_unload,
    .module_function = nvidia_module_function,
    .parallel_compiles = true, /* NVRTC programs compile concurrently */
};
