/*
 * nvrtc_platform.c - the kpc platform of libkpc-nvrtc: kpc's miss compiles through the
 * real NVRTC the drop-in forwards to (real.c), not through a libnvrtc found by soname,
 * which under the LD_LIBRARY_PATH shim would be the drop-in itself. Compile-only: the
 * drop-in makes no device contexts.
 *
 * Identity: nvrtcVersion and the build ids of the real library and of the
 * libnvrtc-builtins beside it, computed in every process that misses (that process has
 * the real NVRTC loaded anyway), never remembered by file: the real library's path may
 * change with KPC_REAL_NVRTC. The platform is named "nvrtc" so that its identity and
 * target files never mix with those of kpc's own NVIDIA platform.
 *
 * A compile that NVRTC refuses for another reason than the source (an invalid option:
 * NVRTC_ERROR_INVALID_OPTION) is KPC_E_INVALID, not cached: the drop-in then forwards it
 * and the application gets NVRTC's own status.
 */
#define _GNU_SOURCE
#include "nvrtc_dropin.h"

#include "kpc_internal.h"

#include <bsd/string.h>
#include <ctype.h>
#include <dlfcn.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

static const rtc_real *need(void)
{
    return rtc_real_get(&kpc_nvrtc_vendor);
}

static kpc_status nv_identity(const char *cache_dir, uint8_t id[16], char *desc, size_t cap)
{
    (void)cache_dir;
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

/* sm_XX / compute_XX with a number NVRTC lists; suffixed targets (sm_90a) are left to the
 * real NVRTC (forwarded), which judges them itself. */
static kpc_status nv_target_normalize(const char *cache_dir, const uint8_t id[16], const char *target,
                                      char *out, size_t cap)
{
    (void)cache_dir, (void)id;
    const char *num = strncmp(target, "sm_", 3) == 0        ? target + 3
                      : strncmp(target, "compute_", 8) == 0 ? target + 8
                                                            : NULL;
    size_t n = num ? strlen(num) : 0;
    bool ok = num && (n == 2 || n == 3) && isdigit((unsigned char)num[0]) && isdigit((unsigned char)num[1]) &&
              (n == 2 || isdigit((unsigned char)num[2]));
    const rtc_real *r = ok ? need() : NULL;
    int (*count)(int *) = r ? (int (*)(int *))dlsym(r->handle, "nvrtcGetNumSupportedArchs") : NULL;
    int (*list)(int *) = r ? (int (*)(int *))dlsym(r->handle, "nvrtcGetSupportedArchs") : NULL;
    int archs[128], k = 0;
    if (ok && count && list && count(&k) == 0 && k > 0 && k <= 128 && list(archs) == 0) {
        int want = atoi(num);
        ok = false;
        for (int i = 0; i < k; i++)
            ok = ok || archs[i] == want;
    }
    if (!ok || strlcpy(out, target, cap) >= cap) {
        KPC_LOG(KPC_LOG_INFO, "kpc-nvrtc: target %s is left to NVRTC", target);
        return KPC_E_INVALID;
    }
    return KPC_OK;
}

static char *program_log(const rtc_real *r, void *prog)
{
    size_t size = 0;
    if (r->log_size(prog, &size) != RTC_SUCCESS)
        size = 0;
    char *log = malloc(size + 1);
    if (log && (size == 0 || r->log(prog, log) != RTC_SUCCESS))
        size = 0;
    if (log)
        log[size] = '\0'; /* NVRTC counts the NUL; one more does no harm */
    return log;
}

static kpc_status nv_compile(const char *target, const kpc_source *src, kpc_build *b)
{
    const rtc_real *r = need();
    if (r == NULL)
        return KPC_E_UNAVAILABLE;
    memset(b, 0, sizeof *b);
    size_t len = src->code_len ? src->code_len : strlen(src->code);
    char *code = malloc(len + 1);
    const char **opts = calloc(src->num_options + 1, sizeof *opts);
    const char **lowered = calloc(src->num_name_expressions + 1, sizeof *lowered);
    char arch[96];
    kpc_status s = code && opts && lowered ? KPC_OK : KPC_E_NOMEM;
    void *prog = NULL;
    int res = RTC_ERROR_OUT_OF_MEMORY;
    if (s == KPC_OK) {
        memcpy(code, src->code, len);
        code[len] = '\0';
        for (size_t i = 0; i < src->num_options; i++)
            opts[i] = src->options[i];
        snprintf(arch, sizeof arch, "--gpu-architecture=%s", target);
        opts[src->num_options] = arch;
        res = r->create(&prog, code, src->name ? src->name : "kpc_source.cu", (int)src->num_headers,
                        src->header_sources, src->header_names);
    }
    for (size_t i = 0; res == RTC_SUCCESS && i < src->num_name_expressions; i++)
        res = r->add_name(prog, src->name_expressions[i]);
    if (res == RTC_SUCCESS)
        res = r->compile(prog, (int)src->num_options + 1, opts);
    if (prog)
        b->log = program_log(r, prog);
    int kind = strncmp(target, "compute_", 8) == 0 ? RTC_CODE_TEXT : RTC_CODE_BINARY;
    size_t size = 0;
    if (res == RTC_SUCCESS && (r->code_size[kind] == NULL || r->code_size[kind](prog, &size) != RTC_SUCCESS ||
                               size == 0))
        s = KPC_E_INVALID; /* no such code from this NVRTC: the real program answers */
    if (res == RTC_SUCCESS && s == KPC_OK && (b->code = malloc(size)) == NULL)
        s = KPC_E_NOMEM;
    if (res == RTC_SUCCESS && s == KPC_OK && r->code[kind](prog, b->code) != RTC_SUCCESS)
        s = KPC_E_INVALID;
    b->code_size = s == KPC_OK ? size : 0;
    for (size_t i = 0; res == RTC_SUCCESS && s == KPC_OK && i < src->num_name_expressions; i++)
        if (r->lowered(prog, src->name_expressions[i], &lowered[i]) != RTC_SUCCESS)
            lowered[i] = "";
    if (res == RTC_SUCCESS && s == KPC_OK)
        s = kpc_prog_names_encode(src->name_expressions, lowered, src->num_name_expressions, &b->names,
                                  &b->names_size);
    if (prog)
        r->destroy(&prog);
    if (s == KPC_OK && res == RTC_ERROR_COMPILATION && b->log && b->log[0])
        s = KPC_E_COMPILE;
    else if (s == KPC_OK && res != RTC_SUCCESS)
        s = KPC_E_INVALID; /* not the source's fault: the real NVRTC answers it */
    free(code);
    free(opts);
    free(lowered);
    if (s != KPC_OK) { /* no code, no names; the log stays for the caller */
        char *log = b->log;
        b->log = NULL;
        kpc_build_free(b);
        b->log = log;
    }
    return s;
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

static const kpc_platform nvrtc_platform = {
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

void kpc_nvrtc_platform_install(void)
{
    kpc_platform_set(&nvrtc_platform);
}
