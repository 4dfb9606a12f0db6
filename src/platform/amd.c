/*
 * amd.c - the AMD platform: hipRTC compiles, comgr validates targets, the HIP
 * runtime loads modules. Nothing here is linked: libamdhip64 and libamd_comgr are
 * dlopen'ed on first need (a miss, a device context, a target never seen before), so a
 * warm hit and the tools never pay their ~19 ms load, and run where ROCm is absent.
 *
 * Traps of hipRTC 5.2 handled here: a target comgr does not know crashes inside comgr,
 * so every target is validated against comgr's ISA list first (platform/amd_comgr.c,
 * shared with the comgr platform); the program log is not NUL-terminated;
 * hiprtcVersion is a constant 9.0, so the identity is built from the build ids of the
 * libraries that compile; the compile holds a global lock anyway, so compiles are
 * serialized here too (one place to reason about). The compile's steps and
 * their failures are platform/compile.c's; this file gives it hipRTC's calls.
 */
#define _GNU_SOURCE
#define __HIP_PLATFORM_AMD__ 1
#include "platform/amd_comgr.h"
#include "platform/amd_deps.h"
#include "platform/compile.h"
#include "platform/identity.h"
#include "base/log.h"
#include "base/hash.h"

#include <dlfcn.h>
#include <errno.h>
#include <hip/hip_runtime_api.h>
#include <hip/hiprtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */

/* ---- lazily loaded entry points ----------------------------------------------------- */
static struct {
    void *hip, *rtc, *builtins; /* rtc: libhiprtc, or the same handle as hip */
    hiprtcResult (*create)(hiprtcProgram *, const char *, const char *, int, const char **, const char **);
    hiprtcResult (*add_name)(hiprtcProgram, const char *);
    hiprtcResult (*compile)(hiprtcProgram, int, const char **);
    hiprtcResult (*destroy)(hiprtcProgram *);
    hiprtcResult (*lowered)(hiprtcProgram, const char *, const char **);
    hiprtcResult (*log_size)(hiprtcProgram, size_t *);
    hiprtcResult (*log)(hiprtcProgram, char *);
    hiprtcResult (*code_size)(hiprtcProgram, size_t *);
    hiprtcResult (*code)(hiprtcProgram, char *);
    hiprtcResult (*bitcode_size)(hiprtcProgram, size_t *); /* ROCm 5.3 and later; else NULL */
    hiprtcResult (*bitcode)(hiprtcProgram, char *);
    const char *(*rtc_error)(hiprtcResult);
    hipError_t (*device_count)(int *);
    hipError_t (*device_props)(hipDeviceProp_t *, int);
    hipError_t (*set_device)(int);
    hipError_t (*get_device)(int *);
    hipError_t (*module_load)(hipModule_t *, const void *);
    hipError_t (*module_unload)(hipModule_t);
    hipError_t (*module_function)(hipFunction_t *, hipModule_t, const char *);
    const char *(*hip_error)(hipError_t);
    kpc_status hip_status;
} amd;

/* The name a HIP call has after the headers' macros (hipGetDeviceProperties is
 * hipGetDevicePropertiesR0600 in ROCm 6's). */
#define KPC_SYMBOL_NAME(call) KPC_SYMBOL_NAME_OF(call)
#define KPC_SYMBOL_NAME_OF(name) #name

static pthread_once_t hip_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t compile_lock = PTHREAD_MUTEX_INITIALIZER;

#define LOAD(lib, field, name)                                                                 \
    do {                                                                                       \
        *(void **)&amd.field = dlsym(amd.lib, name);                                           \
        if (amd.field == NULL) {                                                               \
            KPC_LOG(KPC_LOG_ERROR, "dlsym(%s): %s", name, dlerror());                          \
            return KPC_E_UNAVAILABLE;                                                          \
        }                                                                                      \
    } while (0)

/* The sonames of each ROCm generation, newest first; the unversioned development links
 * last. hipRTC lived inside libamdhip64 up to ROCm 6 (6 also ships libhiprtc.so.6) and is
 * only in libhiprtc.so.7 since ROCm 7.0 (comgr's sonames: platform/amd_comgr.c). The
 * first HIP runtime that opens picks the generation; hipRTC comes from that
 * generation's libhiprtc if it has one, else from the runtime. */
static const struct rocm_sonames {
    const char *hip, *hiprtc, *builtins;
} rocm_sonames[] = {
    {"libamdhip64.so.7", "libhiprtc.so.7", "libhiprtc-builtins.so.7"},
    {"libamdhip64.so.6", "libhiprtc.so.6", "libhiprtc-builtins.so.6"},
    {"libamdhip64.so.5", NULL, "libhiprtc-builtins.so.5"},
    {"libamdhip64.so", "libhiprtc.so", "libhiprtc-builtins.so"},
};

static void *open_one(const char *name)
{
    return name ? dlopen(name, RTLD_NOW | RTLD_LOCAL) : NULL;
}

static kpc_status load_hip_symbols(void)
{
    const struct rocm_sonames *gen = NULL;
    for (size_t i = 0; i < sizeof rocm_sonames / sizeof rocm_sonames[0] && amd.hip == NULL; i++)
        if ((amd.hip = open_one(rocm_sonames[i].hip)) != NULL)
            gen = &rocm_sonames[i];
    if (amd.hip == NULL) {
        KPC_LOG(KPC_LOG_ERROR, "cannot load the HIP runtime (libamdhip64.so.7, .6 or .5): %s", dlerror());
        return KPC_E_UNAVAILABLE;
    }
    amd.rtc = open_one(gen->hiprtc);
    if (amd.rtc == NULL || dlsym(amd.rtc, "hiprtcCreateProgram") == NULL)
        amd.rtc = amd.hip;
    LOAD(rtc, create, "hiprtcCreateProgram");
    LOAD(rtc, add_name, "hiprtcAddNameExpression");
    LOAD(rtc, compile, "hiprtcCompileProgram");
    LOAD(rtc, destroy, "hiprtcDestroyProgram");
    LOAD(rtc, lowered, "hiprtcGetLoweredName");
    LOAD(rtc, log_size, "hiprtcGetProgramLogSize");
    LOAD(rtc, log, "hiprtcGetProgramLog");
    LOAD(rtc, code_size, "hiprtcGetCodeSize");
    LOAD(rtc, code, "hiprtcGetCode");
    LOAD(rtc, rtc_error, "hiprtcGetErrorString");
    /* -fgpu-rdc's bitcode: hipRTC 5.2 has no such call (it links an rdc compile into a
     * code object like any other) */
    *(void **)&amd.bitcode_size = dlsym(amd.rtc, "hiprtcGetBitcodeSize");
    *(void **)&amd.bitcode = dlsym(amd.rtc, "hiprtcGetBitcode");
    if (amd.bitcode_size == NULL || amd.bitcode == NULL)
        amd.bitcode_size = NULL, amd.bitcode = NULL;
    LOAD(hip, device_count, "hipGetDeviceCount");
    /* the entry point of the hipDeviceProp_t these headers declare: ROCm 6's headers
     * rename both to ...R0600 (a new layout), while the old name stays in the library
     * for binaries built against ROCm 5, with the old layout */
    LOAD(hip, device_props, KPC_SYMBOL_NAME(hipGetDeviceProperties));
    LOAD(hip, set_device, "hipSetDevice");
    LOAD(hip, get_device, "hipGetDevice");
    LOAD(hip, module_load, "hipModuleLoadData");
    LOAD(hip, module_unload, "hipModuleUnload");
    LOAD(hip, module_function, "hipModuleGetFunction");
    LOAD(hip, hip_error, "hipGetErrorString");
    /* hipRTC dlopens its builtins library during a compile; hold it so its build id
     * can be read from the loaded objects */
    amd.builtins = open_one(gen->builtins);
    return KPC_OK;
}

static void load_hip(void) { amd.hip_status = load_hip_symbols(); }

static kpc_status need_hip(void)
{
    pthread_once(&hip_once, load_hip);
    return amd.hip_status;
}

/* ---- identity ----------------------------------------------------------------------- */
/* hipRTC turns these into hidden compile options */
static const char *const amd_key_env[] = {"GPU_ENABLE_WAVE32_MODE", "GPU_ENABLE_WGP_MODE", NULL};

static kpc_status amd_identity(const kpc_root *root, uint8_t id[16], char *desc, size_t desc_cap)
{
    desc[0] = '\0';
    if (!kpc_identity_recall(root, "amd", id)) {
        void *comgr;
        kpc_status s = need_hip();
        if (s == KPC_OK)
            s = kpc_comgr_open(&comgr);
        if (s != KPC_OK)
            return s;
        XXH3_state_t st;
        XXH3_128bits_reset(&st);
        kpc_identity_files files = {0};
        kpc_identity_add_build_id(&st, &files, "libamdhip64", desc, desc_cap);
        if (amd.rtc != amd.hip) /* ROCm 6 and 7: hipRTC in its own library */
            kpc_identity_add_build_id(&st, &files, "libhiprtc.so", desc, desc_cap);
        kpc_identity_add_build_id(&st, &files, "libamd_comgr", desc, desc_cap);
        kpc_identity_add_build_id(&st, &files, "libLLVM", desc, desc_cap);
        kpc_identity_add_build_id(&st, &files, "libhiprtc-builtins", desc, desc_cap);
        kpc_comgr_identity_add_device_libs(&st, &files);
        XXH128_canonicalFromHash((XXH128_canonical_t *)id, XXH3_128bits_digest(&st));
        kpc_identity_remember(root, "amd", &files, id);
        KPC_LOG(KPC_LOG_INFO, "compiler identity: %s", desc);
    }
    return KPC_OK;
}

/* ---- targets ------------------------------------------------------------------------ */
static kpc_status amd_target_normalize(const kpc_root *root, const uint8_t id[16], const char *target,
                                       char *out, size_t cap)
{
    return kpc_comgr_target_normalize(root, "amd", id, target, out, cap);
}

/* ---- compile: hipRTC's calls for platform/compile.c ------------------------------------ */
static int rtc_create(void **prog, const char *code, const char *name, const kpc_source *src)
{
    return amd.create((hiprtcProgram *)prog, code, name, (int)src->num_headers,
                      (const char **)src->header_sources, (const char **)src->header_names);
}

static int rtc_add_name(void *prog, const char *expr) { return amd.add_name(prog, expr); }
static int rtc_compile(void *prog, int n, const char **opts) { return amd.compile(prog, n, opts); }
static int rtc_log_size(void *prog, size_t *size) { return amd.log_size(prog, size); }
static int rtc_log(void *prog, char *out) { return amd.log(prog, out); }
static int rtc_lowered(void *prog, const char *expr, const char **out) { return amd.lowered(prog, expr, out); }
static void rtc_destroy(void **prog) { amd.destroy((hiprtcProgram *)prog); }
static const char *rtc_error(int r) { return amd.rtc_error((hiprtcResult)r); }

static int rtc_code_size(void *prog, const char *target, size_t *size)
{
    (void)target;
    hiprtcResult r = amd.code_size(prog, size);
    return r == HIPRTC_SUCCESS && *size == 0 ? HIPRTC_ERROR_COMPILATION : r;
}

static int rtc_code(void *prog, const char *target, void *out)
{
    (void)target;
    return amd.code(prog, out);
}

static bool rtc_has_bitcode(void) { return amd.bitcode_size != NULL; }

static int rtc_bitcode_size(void *prog, size_t *size)
{
    hiprtcResult r = amd.bitcode_size(prog, size);
    return r == HIPRTC_SUCCESS && *size == 0 ? HIPRTC_ERROR_COMPILATION : r;
}

static int rtc_bitcode(void *prog, void *out) { return amd.bitcode(prog, out); }

static enum kpc_compile_class rtc_classify(int r)
{
    return r == HIPRTC_SUCCESS ? KPC_COMPILE_OK
           : r == HIPRTC_ERROR_OUT_OF_MEMORY ? KPC_COMPILE_NOMEM : KPC_COMPILE_FAILED;
}

static const kpc_compiler hiprtc = {
    .name = "hipRTC",
    .arch_option = "--gpu-architecture=",
    .default_name = "kpc_source.hip",
    .lock = &compile_lock,
    .create = rtc_create,
    .add_name = rtc_add_name,
    .compile = rtc_compile,
    .log_size = rtc_log_size,
    .log = rtc_log,
    .code_size = rtc_code_size,
    .code = rtc_code,
    .rdc_option = "-fgpu-rdc",
    .has_bitcode = rtc_has_bitcode,
    .bitcode_size = rtc_bitcode_size,
    .bitcode = rtc_bitcode,
    .lowered = rtc_lowered,
    .destroy = rtc_destroy,
    .classify = rtc_classify,
    .error_string = rtc_error,
    /* hipRTC's clang writes the files it read to a dependency file (platform/amd_deps.c) */
    .deps_options = kpc_amd_deps_options,
    .deps_from_file = kpc_amd_deps_collect,
};

_Static_assert(KPC_AMD_DEPS_OPTIONS <= KPC_COMPILE_DEPS_OPTIONS, "room for the dependency options");

static kpc_status amd_compile(const char *target, const kpc_source *src, kpc_build *b)
{
    memset(b, 0, sizeof *b);
    kpc_status s = need_hip();
    return s != KPC_OK ? s : kpc_compile_run(&hiprtc, target, src, b);
}

/* ---- devices ------------------------------------------------------------------------ */
static kpc_status hip_fail(hipError_t e, const char *call)
{
    KPC_LOG(KPC_LOG_ERROR, "%s: %s", call, amd.hip_error(e));
    return KPC_E_HIP;
}

static kpc_status amd_device_target(int device, char *out, size_t cap)
{
    kpc_status s = need_hip();
    if (s != KPC_OK)
        return s;
    int count = 0;
    hipError_t e = amd.device_count(&count);
    if (e == hipErrorNoDevice || (e == hipSuccess && count == 0)) {
        KPC_LOG(KPC_LOG_ERROR, "no GPU: hipGetDeviceCount found none (use a compile-only context "
                "with kpc_context_create_for_target)");
        return KPC_E_NO_DEVICE;
    }
    if (e != hipSuccess)
        return hip_fail(e, "hipGetDeviceCount");
    if (device >= count) {
        KPC_LOG(KPC_LOG_ERROR, "no HIP device %d: there are %d", device, count);
        return KPC_E_NO_DEVICE;
    }
    hipDeviceProp_t props;
    if ((e = amd.device_props(&props, device)) != hipSuccess)
        return hip_fail(e, "hipGetDeviceProperties");
    snprintf(out, cap, "%s", props.gcnArchName);
    return KPC_OK;
}

/* Make device current for a module call and hand back the caller's device: the HIP
 * runtime loads and unloads modules on the current device, and a library must not
 * switch its caller's (a multi-GPU application sets its own per thread). */
static hipError_t enter_device(int device, int *prev)
{
    hipError_t e = amd.get_device(prev);
    if (e != hipSuccess)
        return e;
    return *prev == device ? hipSuccess : amd.set_device(device);
}

static void leave_device(int device, int prev)
{
    if (prev != device)
        amd.set_device(prev);
}

static kpc_status amd_module_load(int device, const void *code, size_t size, void **module)
{
    (void)size;
    kpc_status s = need_hip();
    if (s != KPC_OK)
        return s;
    int prev;
    hipError_t e = enter_device(device, &prev);
    if (e != hipSuccess)
        return hip_fail(e, "hipSetDevice");
    hipModule_t m = NULL;
    e = amd.module_load(&m, code);
    leave_device(device, prev);
    if (e == hipErrorInvalidImage || e == hipErrorNoBinaryForGpu || e == hipErrorInvalidKernelFile ||
        e == hipErrorSharedObjectInitFailed) {
        KPC_LOG(KPC_LOG_WARN, "hipModuleLoadData refused the image: %s", amd.hip_error(e));
        return KPC_E_CORRUPT;
    }
    if (e != hipSuccess)
        return hip_fail(e, "hipModuleLoadData");
    *module = m;
    return KPC_OK;
}

static void amd_module_unload(int device, void *module)
{
    int prev;
    if (need_hip() == KPC_OK && enter_device(device, &prev) == hipSuccess) {
        amd.module_unload((hipModule_t)module);
        leave_device(device, prev);
    }
}

static kpc_status amd_module_function(int device, void *module, const char *name, void **fn)
{
    (void)device;
    hipFunction_t f = NULL;
    hipError_t e = amd.module_function(&f, (hipModule_t)module, name);
    if (e == hipErrorNotFound || e == hipErrorInvalidSymbol || e == hipErrorInvalidDeviceFunction)
        return KPC_E_NOT_FOUND;
    if (e != hipSuccess)
        return hip_fail(e, "hipModuleGetFunction");
    *fn = f;
    return KPC_OK;
}

const kpc_platform kpc_platform_builtin = {
    .name = "amd",
    .identity = amd_identity,
    .key_env = amd_key_env,
    .target_normalize = amd_target_normalize,
    .compile = amd_compile,
    .device_target = amd_device_target,
    .module_load = amd_module_load,
    .module_unload = amd_module_unload,
    .module_function = amd_module_function,
};
