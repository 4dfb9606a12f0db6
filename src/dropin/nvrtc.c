/*
 * nvrtc.c - libkpc-nvrtc (and the libnvrtc.so.N shims built from the same sources): the
 * NVRTC program API with NVRTC's signatures and statuses, answered by kpc (rtc.c) and
 * otherwise forwarded to the real NVRTC, which real.c finds by KPC_REAL_NVRTC, by soname,
 * or in the usual CUDA directories by absolute path (never kpc's own shim).
 *
 * The target is the value of -arch= or --gpu-architecture=; without one NVRTC compiles
 * for its own default architecture, so such a compile is forwarded. An sm_XX build is
 * cached as its cubin (nvrtcGetCUBIN), a compute_XX build as its PTX (nvrtcGetPTX, size
 * with the NUL); the other form, LTO IR and the like come from the real program.
 */
#define _GNU_SOURCE
#include "dropin/nvrtc_dropin.h"

#include "base/log.h"

#include <string.h>

#define NVRTC_API __attribute__((visibility("default")))

static kpc_status nv_default_target(kpc_cache *cache, char *out, size_t cap)
{
    (void)cache, (void)out, (void)cap;
    return KPC_E_INVALID; /* NVRTC's default is its own, not the device's: forward */
}

static int nv_code_kind(const char *target)
{
    return strncmp(target, "compute_", 8) == 0 ? RTC_CODE_TEXT : RTC_CODE_BINARY;
}

static const char *const nv_sonames[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2",
                                         "libnvrtc.so", NULL};
static const char *const nv_dirs[] = {"$CUDA_HOME/lib64", "$CUDA_PATH/lib64", "/usr/local/cuda/lib64",
                                      "/usr/local/cuda/targets/x86_64-linux/lib",
                                      "/usr/lib/x86_64-linux-gnu", NULL};

const rtc_vendor kpc_nvrtc_vendor = {
    .name = "kpc-nvrtc",
    .prefix = "nvrtc",
    .real_env = KPC_SET_REAL_NVRTC,
    .sonames = nv_sonames,
    .dirs = nv_dirs,
    .code_fns = {{"nvrtcGetCUBINSize", "nvrtcGetCUBIN"}, {"nvrtcGetPTXSize", "nvrtcGetPTX"}},
    .log_counts_nul = true,
    .default_name = "default_program", /* NVRTC's name for a NULL one */
    .default_target = nv_default_target,
    .code_kind = nv_code_kind,
};
#define NV (&kpc_nvrtc_vendor)

/* ---- the program API kpc answers ------------------------------------------------------ */
NVRTC_API nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name,
                                         int numHeaders, const char *const *headers,
                                         const char *const *includeNames)
{
    return kpc_rtc_create(NV, (void **)prog, src, name, numHeaders, headers, includeNames);
}

NVRTC_API nvrtcResult nvrtcAddNameExpression(nvrtcProgram prog, const char *const name_expression)
{
    return kpc_rtc_add_name(NV, prog, name_expression);
}

NVRTC_API nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char *const *options)
{
    return kpc_rtc_compile(NV, prog, numOptions, options);
}

NVRTC_API nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *cubinSizeRet)
{
    return kpc_rtc_code_size(NV, prog, RTC_CODE_BINARY, cubinSizeRet);
}

NVRTC_API nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin)
{
    return kpc_rtc_code(NV, prog, RTC_CODE_BINARY, cubin);
}

NVRTC_API nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *ptxSizeRet)
{
    return kpc_rtc_code_size(NV, prog, RTC_CODE_TEXT, ptxSizeRet);
}

NVRTC_API nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx)
{
    return kpc_rtc_code(NV, prog, RTC_CODE_TEXT, ptx);
}

NVRTC_API nvrtcResult nvrtcGetLoweredName(nvrtcProgram prog, const char *const name_expression,
                                          const char **lowered_name)
{
    return kpc_rtc_lowered(NV, prog, name_expression, lowered_name);
}

NVRTC_API nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet)
{
    return kpc_rtc_log_size(NV, prog, logSizeRet);
}

NVRTC_API nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log)
{
    return kpc_rtc_log(NV, prog, log);
}

NVRTC_API nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog)
{
    return kpc_rtc_destroy(NV, (void **)prog);
}

/* ---- forwarded untouched ---------------------------------------------------------------- */
NVRTC_API const char *nvrtcGetErrorString(nvrtcResult result)
{
    const char *(*f)(nvrtcResult) = (const char *(*)(nvrtcResult))kpc_real_sym(NV, "nvrtcGetErrorString");
    return f ? f(result) : "NVRTC_ERROR_INTERNAL_ERROR (kpc-nvrtc: no real NVRTC)";
}

NVRTC_API RTC_FORWARD(NV, nvrtcVersion, (int *major, int *minor), (major, minor))
NVRTC_API RTC_FORWARD(NV, nvrtcGetNumSupportedArchs, (int *numArchs), (numArchs))
NVRTC_API RTC_FORWARD(NV, nvrtcGetSupportedArchs, (int *supportedArchs), (supportedArchs))
NVRTC_API RTC_FORWARD(NV, nvrtcGetPCHHeapSize, (size_t *ret), (ret))
NVRTC_API RTC_FORWARD(NV, nvrtcSetPCHHeapSize, (size_t size), (size))

/* calls on a program kpc does not answer: the real program's (made on first need) */
#define FORWARD_PROG(fn, params, args)                                                          \
    NVRTC_API nvrtcResult fn params                                                             \
    {                                                                                           \
        nvrtcResult(*real_fn) params = (nvrtcResult(*) params)kpc_real_sym(NV, #fn);            \
        prog = kpc_rtc_real_program(NV, prog);                                                      \
        return real_fn ? real_fn args : RTC_ERROR_INTERNAL_ERROR;                               \
    }
FORWARD_PROG(nvrtcGetLTOIRSize, (nvrtcProgram prog, size_t *size), (prog, size))
FORWARD_PROG(nvrtcGetLTOIR, (nvrtcProgram prog, char *out), (prog, out))
FORWARD_PROG(nvrtcGetOptiXIRSize, (nvrtcProgram prog, size_t *size), (prog, size))
FORWARD_PROG(nvrtcGetOptiXIR, (nvrtcProgram prog, char *out), (prog, out))
FORWARD_PROG(nvrtcGetPCHCreateStatus, (nvrtcProgram prog), (prog))
FORWARD_PROG(nvrtcGetPCHHeapSizeRequired, (nvrtcProgram prog, size_t *size), (prog, size))
FORWARD_PROG(nvrtcSetFlowCallback, (nvrtcProgram prog, int (*callback)(void *, void *), void *payload),
             (prog, callback, payload))
