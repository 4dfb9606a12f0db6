/*
 * hiprtc.c - libkpc-hiprtc: the hipRTC program API with hipRTC's signatures and statuses,
 * answered by kpc (rtc.c) and otherwise forwarded to the real hipRTC: libhiprtc.so.7 or
 * .6 (ROCm 7 moved hipRTC out of the HIP runtime), else libamdhip64.so.6 or .5.
 *
 * The target is the value of --offload-arch= or --gpu-architecture=, else the current
 * HIP device's (as hipRTC does): its gcnArchName with features, read through a kpc
 * device context once per device. Everything hipRTC exports beyond the program calls kpc
 * answers (the link API, ROCm 5.3 and later) goes to the real library untouched.
 */
#define _GNU_SOURCE
#include "dropin/rtc.h"

#include "base/log.h"

#include <bsd/string.h>
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#define HIPRTC_API __attribute__((visibility("default")))

/* The current device's target, remembered per device (guarded by devices_lock). */
static pthread_mutex_t devices_lock = PTHREAD_MUTEX_INITIALIZER;
static char device_targets[64][128];

static kpc_status hip_default_target(kpc_cache *cache, char *out, size_t cap)
{
    static const char *const runtimes[] = {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5",
                                           "libamdhip64.so", NULL};
    void *h = NULL;
    for (const char *const *r = runtimes; h == NULL && *r; r++)
        h = dlopen(*r, RTLD_NOW | RTLD_LOCAL);
    int (*get_device)(int *) = h ? (int (*)(int *))dlsym(h, "hipGetDevice") : NULL;
    int dev = -1;
    if (get_device == NULL || get_device(&dev) != 0 || dev < 0 || dev >= 64)
        return KPC_E_NO_DEVICE;
    kpc_status s = KPC_OK;
    pthread_mutex_lock(&devices_lock);
    if (device_targets[dev][0] == '\0') {
        kpc_context *ctx = NULL;
        s = kpc_context_create(cache, dev, &ctx);
        if (s == KPC_OK)
            strlcpy(device_targets[dev], kpc_context_target(ctx), sizeof device_targets[dev]);
        kpc_context_destroy(ctx);
    }
    if (s == KPC_OK)
        strlcpy(out, device_targets[dev], cap);
    pthread_mutex_unlock(&devices_lock);
    return s;
}

static int hip_code_kind(const char *target)
{
    (void)target;
    return RTC_CODE_BINARY;
}

static const char *const hip_sonames[] = {"libhiprtc.so.7", "libhiprtc.so.6", "libamdhip64.so.6",
                                          "libamdhip64.so.5", "libhiprtc.so", "libamdhip64.so", NULL};
static const char *const hip_dirs[] = {"$ROCM_PATH/lib", "/opt/rocm/lib", NULL};

static const rtc_vendor hip = {
    .name = "kpc-hiprtc",
    .prefix = "hiprtc",
    .real_env = KPC_SET_REAL_HIPRTC,
    .sonames = hip_sonames,
    .dirs = hip_dirs,
    .code_fns = {{"hiprtcGetCodeSize", "hiprtcGetCode"}, {NULL, NULL},
                 {"hiprtcGetBitcodeSize", "hiprtcGetBitcode"}},
    .log_counts_nul = false, /* hipRTC's log is not NUL-terminated */
    .empty_code_after_failure = true,
    .default_target = hip_default_target,
    .code_kind = hip_code_kind,
};

/* ---- the program API kpc answers ------------------------------------------------------ */
HIPRTC_API hiprtcResult hiprtcCreateProgram(hiprtcProgram *prog, const char *src, const char *name,
                                            int numHeaders, const char **headers, const char **includeNames)
{
    return kpc_rtc_create(&hip, (void **)prog, src, name, numHeaders, headers, includeNames);
}

HIPRTC_API hiprtcResult hiprtcAddNameExpression(hiprtcProgram prog, const char *name_expression)
{
    return kpc_rtc_add_name(&hip, prog, name_expression);
}

HIPRTC_API hiprtcResult hiprtcCompileProgram(hiprtcProgram prog, int numOptions, const char **options)
{
    return kpc_rtc_compile(&hip, prog, numOptions, options);
}

HIPRTC_API hiprtcResult hiprtcGetCodeSize(hiprtcProgram prog, size_t *codeSizeRet)
{
    return kpc_rtc_code_size(&hip, prog, RTC_CODE_BINARY, codeSizeRet);
}

HIPRTC_API hiprtcResult hiprtcGetCode(hiprtcProgram prog, char *code)
{
    return kpc_rtc_code(&hip, prog, RTC_CODE_BINARY, code);
}

HIPRTC_API hiprtcResult hiprtcGetLoweredName(hiprtcProgram prog, const char *name_expression,
                                             const char **lowered_name)
{
    return kpc_rtc_lowered(&hip, prog, name_expression, lowered_name);
}

HIPRTC_API hiprtcResult hiprtcGetProgramLogSize(hiprtcProgram prog, size_t *logSizeRet)
{
    return kpc_rtc_log_size(&hip, prog, logSizeRet);
}

HIPRTC_API hiprtcResult hiprtcGetProgramLog(hiprtcProgram prog, char *log)
{
    return kpc_rtc_log(&hip, prog, log);
}

HIPRTC_API hiprtcResult hiprtcDestroyProgram(hiprtcProgram *prog)
{
    return kpc_rtc_destroy(&hip, (void **)prog);
}

/* ---- forwarded untouched ---------------------------------------------------------------- */
HIPRTC_API const char *hiprtcGetErrorString(hiprtcResult result)
{
    const char *(*f)(hiprtcResult) = (const char *(*)(hiprtcResult))kpc_real_sym(&hip, "hiprtcGetErrorString");
    return f ? f(result) : "HIPRTC_ERROR_INTERNAL_ERROR (kpc-hiprtc: no real hipRTC)";
}

HIPRTC_API RTC_FORWARD(&hip, hiprtcVersion, (int *major, int *minor), (major, minor))

/* bitcode: -fgpu-rdc is keyed, and from ROCm 5.3 its compile gives bitcode, which the
 * cache holds as such (5.2 has no bitcode calls: it links the compile into a code object) */
HIPRTC_API hiprtcResult hiprtcGetBitcodeSize(hiprtcProgram prog, size_t *bitcode_size)
{
    return kpc_rtc_code_size(&hip, prog, RTC_CODE_BITCODE, bitcode_size);
}

HIPRTC_API hiprtcResult hiprtcGetBitcode(hiprtcProgram prog, char *bitcode)
{
    return kpc_rtc_code(&hip, prog, RTC_CODE_BITCODE, bitcode);
}

/* the link API (ROCm 5.3 and later) */
HIPRTC_API RTC_FORWARD(&hip, hiprtcLinkCreate,
                       (unsigned int num_options, hiprtcJIT_option *option_ptr, void **option_vals_pptr,
                        hiprtcLinkState *hip_link_state_ptr),
                       (num_options, option_ptr, option_vals_pptr, hip_link_state_ptr))
HIPRTC_API RTC_FORWARD(&hip, hiprtcLinkAddFile,
                       (hiprtcLinkState hip_link_state, hiprtcJITInputType input_type, const char *file_path,
                        unsigned int num_options, hiprtcJIT_option *options_ptr, void **option_values),
                       (hip_link_state, input_type, file_path, num_options, options_ptr, option_values))
HIPRTC_API RTC_FORWARD(&hip, hiprtcLinkAddData,
                       (hiprtcLinkState hip_link_state, hiprtcJITInputType input_type, void *image,
                        size_t image_size, const char *name, unsigned int num_options,
                        hiprtcJIT_option *options_ptr, void **option_values),
                       (hip_link_state, input_type, image, image_size, name, num_options, options_ptr,
                        option_values))
HIPRTC_API RTC_FORWARD(&hip, hiprtcLinkComplete,
                       (hiprtcLinkState hip_link_state, void **bin_out, size_t *size_out),
                       (hip_link_state, bin_out, size_out))
HIPRTC_API RTC_FORWARD(&hip, hiprtcLinkDestroy, (hiprtcLinkState hip_link_state), (hip_link_state))
