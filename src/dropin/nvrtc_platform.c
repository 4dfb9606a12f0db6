/*
 * nvrtc_platform.c - the platform built into libkpc-nvrtc's own copy of kpc (in place of
 * platform/amd.c or platform/nvidia.c): kpc's miss compiles through the real NVRTC the
 * drop-in forwards to (dropin/real.c), not through a libnvrtc found by soname, which under
 * the LD_LIBRARY_PATH shim would be the drop-in itself. The compile steps are kpc's own
 * (platform/compile.c) over the real library's calls. Compile-only: the drop-in makes no
 * device contexts.
 *
 * Identity: nvrtcVersion and the build ids of the real library and of the
 * libnvrtc-builtins beside it, computed in every process that misses (that process has
 * the real NVRTC loaded anyway), never remembered by file: the real library's path may
 * change with KPC_REAL_NVRTC. The platform is named "nvrtc" so that its identity and
 * target files never mix with those of kpc's own NVIDIA platform.
 */
#define _GNU_SOURCE
#include "dropin/nvrtc_dropin.h"

#include "base/log.h"
#include "base/hash.h"
#include "platform/compile.h"
#include "platform/identity.h"
#include "platform/include_scan.h"
#include "platform/nvrtc_target.h"
#include "platform/platform.h"

#include <bsd/string.h>
#include <dlfcn.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const rtc_real *need(void)
{
    return kpc_real_get(&kpc_nvrtc_vendor);
}

static kpc_status nv_identity(const kpc_root *root, uint8_t id[16], char *desc, size_t cap)
{
    (void)root;
    const rtc_real *r = need();
    if (r == NULL)
        return KPC_E_UNAVAILABLE;
    int (*version)(int *, int *) = (int (*)(int *, int *))dlsym(r->handle, "nvrtcVersion");
    int major = 0, minor = 0;
    if (version == NULL || version(&major, &minor) != 0)
        return KPC_E_UNAVAILABLE;
    /* the builtins library NVRTC loads at its first compile, opened now so its id is known */
    char dir[4096], builtins[4200];
    strlcpy(dir, r->path, sizeof dir);
    snprintf(builtins, sizeof builtins, "%s/libnvrtc-builtins.so.%d.%d", dirname(dir), major, minor);
    void *b = dlopen(builtins, RTLD_NOW | RTLD_LOCAL);
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    XXH3_128bits_update(&st, "nvrtc", 6);
    XXH3_128bits_update(&st, &major, sizeof major);
    XXH3_128bits_update(&st, &minor, sizeof minor);
    const char *paths[2] = {r->path, b ? builtins : NULL};
    for (int i = 0; i < 2 && paths[i]; i++) {
        uint8_t bid[64];
        char found[512];
        size_t n = kpc_identity_loaded_build_id(paths[i], bid, sizeof bid, found, sizeof found);
        if (n == 0) /* no build id: the path stands in (weaker, logged) */
            KPC_LOG(KPC_LOG_WARN, "kpc-nvrtc: %s has no build id", paths[i]);
        XXH3_128bits_update(&st, n ? bid : (const uint8_t *)paths[i], n ? n : strlen(paths[i]));
    }
    XXH128_hash_t h = XXH3_128bits_digest(&st);
    XXH128_canonicalFromHash((XXH128_canonical_t *)id, h);
    snprintf(desc, cap, "nvrtc %d.%d %s", major, minor, r->path);
    return KPC_OK;
}

/* Targets are judged by platform/nvrtc_target.c over the real NVRTC; one it refuses is
 * forwarded (KPC_E_INVALID), and the real NVRTC answers for it. */
static kpc_nvrtc_calls real_calls; /* set once by load_real_calls */

static void load_real_calls(void)
{
    const rtc_real *r = need();
    if (r == NULL)
        return;
    *(void **)&real_calls.version = kpc_real_sym(&kpc_nvrtc_vendor, "nvrtcVersion");
    *(void **)&real_calls.num_archs = kpc_real_sym(&kpc_nvrtc_vendor, "nvrtcGetNumSupportedArchs");
    *(void **)&real_calls.archs = kpc_real_sym(&kpc_nvrtc_vendor, "nvrtcGetSupportedArchs");
    real_calls.create = r->create;
    real_calls.compile = r->compile;
    real_calls.destroy = r->destroy;
}

static const kpc_nvrtc_calls *real_nvrtc(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load_real_calls);
    return real_calls.version && real_calls.num_archs && real_calls.archs ? &real_calls : NULL;
}

static const kpc_nvrtc_targets real_targets = {
    .platform = "nvrtc", .load = real_nvrtc, .refusal_level = KPC_LOG_INFO};

static kpc_status nv_target_normalize(const kpc_root *root, const uint8_t id[16], const char *target,
                                      char *out, size_t cap)
{
    return kpc_nvrtc_target_normalize(&real_targets, root, id, target, out, cap);
}

/* ---- the compile: kpc's steps over the real NVRTC's calls ------------------------------- */
static int kind_of(const char *target)
{
    return strncmp(target, "compute_", 8) == 0 ? RTC_CODE_TEXT : RTC_CODE_BINARY;
}

static int c_create(void **prog, const char *code, const char *name, const kpc_source *src)
{
    return need()->create(prog, code, name, (int)src->num_headers, src->header_sources, src->header_names);
}
static int c_add_name(void *prog, const char *expr) { return need()->add_name(prog, expr); }
static int c_compile(void *prog, int n, const char **opts) { return need()->compile(prog, n, opts); }
static int c_log_size(void *prog, size_t *size) { return need()->log_size(prog, size); }
static int c_log(void *prog, char *out) { return need()->log(prog, out); }
static int c_code_size(void *prog, const char *target, size_t *size)
{
    int (*f)(void *, size_t *) = need()->code_size[kind_of(target)];
    return f ? f(prog, size) : RTC_ERROR_INVALID_INPUT;
}
static int c_code(void *prog, const char *target, void *out)
{
    int (*f)(void *, char *) = need()->code[kind_of(target)];
    return f ? f(prog, out) : RTC_ERROR_INVALID_INPUT;
}
static int c_lowered(void *prog, const char *expr, const char **out) { return need()->lowered(prog, expr, out); }
static void c_destroy(void **prog) { need()->destroy(prog); }
static enum kpc_compile_class c_classify(int r)
{
    return r == RTC_SUCCESS ? KPC_COMPILE_OK : r == RTC_ERROR_OUT_OF_MEMORY ? KPC_COMPILE_NOMEM : KPC_COMPILE_FAILED;
}
static const char *c_error_string(int r)
{
    const char *(*f)(int) = (const char *(*)(int))kpc_real_sym(&kpc_nvrtc_vendor, "nvrtcGetErrorString");
    return f ? f(r) : "NVRTC_ERROR";
}

static const kpc_compiler nvrtc_compiler = {
    .name = "NVRTC",
    .arch_option = "--gpu-architecture=",
    .default_name = "default_program",
    .lock = NULL, /* NVRTC compiles on several threads at once */
    .create = c_create,
    .add_name = c_add_name,
    .compile = c_compile,
    .log_size = c_log_size,
    .log = c_log,
    .code_size = c_code_size,
    .code = c_code,
    .lowered = c_lowered,
    .destroy = c_destroy,
    .classify = c_classify,
    .error_string = c_error_string,
    /* the files a compile may read (NVRTC has no dependency output): core/manifest.h */
    .deps_scan = kpc_include_scan,
};

static kpc_status nv_compile(const char *target, const kpc_source *src, kpc_build *b)
{
    if (need() == NULL)
        return KPC_E_UNAVAILABLE;
    return kpc_compile_run(&nvrtc_compiler, target, src, b);
}

static kpc_status nv_device_target(int device, char *out, size_t cap)
{
    (void)device, (void)out, (void)cap;
    return KPC_E_NO_DEVICE; /* the drop-in makes compile-only contexts only */
}

static kpc_status nv_module_load(int device, const void *code, size_t size, void **module)
{
    (void)device, (void)code, (void)size, (void)module;
    return KPC_E_UNAVAILABLE;
}

static void nv_module_unload(int device, void *module)
{
    (void)device, (void)module;
}

static kpc_status nv_module_function(int device, void *module, const char *name, void **fn)
{
    (void)device, (void)module, (void)name, (void)fn;
    return KPC_E_UNAVAILABLE;
}

const kpc_platform kpc_platform_builtin = {
    .name = "nvrtc",
    .identity = nv_identity,
    .key_env = NULL,
    .target_normalize = nv_target_normalize,
    .compile = nv_compile,
    .device_target = nv_device_target,
    .module_load = nv_module_load,
    .module_unload = nv_module_unload,
    .module_function = nv_module_function,
};
