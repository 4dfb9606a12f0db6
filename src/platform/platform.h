/*
 * platform.h - the seam between the cache and a compiler + device runtime. One platform
 * is built in (platform/amd.c: hipRTC + HIP; platform/nvidia.c: NVRTC + the CUDA driver;
 * platform/comgr.c: comgr alone, no device runtime); tests install a fake one. What every platform shares lives once: the compile steps in
 * platform/compile.c, the identity memo in platform/identity.c, the lowered-name table
 * in platform/names.c, the target memo here (platform/platform.c), what each
 * option means in platform/options.c. A platform file keeps only its own API calls.
 */
#ifndef KPC_PLATFORM_PLATFORM_H
#define KPC_PLATFORM_PLATFORM_H

#include "base/root.h"
#include "kpc/kpc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a compile produced. */
typedef struct kpc_build {
    void *code;       /* malloc'd code object (or bitcode, below) */
    size_t code_size;
    /* the code is LLVM bitcode, never a code object: what a relocatable-device-code
     * compile gives where the compiler stops before the link (hipRTC -fgpu-rdc, ROCm 5.3
     * and later; 5.2 links it into a code object all the same) */
    bool bitcode;
    void *names;      /* malloc'd lowered-name table (platform/names.h) */
    size_t names_size;
    char *log;        /* malloc'd compiler log, NUL-terminated; may be NULL */
    /* KPC_E_COMPILE only: true when the failure is this process's and not the source's
     * (the compiler gave no diagnostics: an unusable TMPDIR, an internal error). Such a
     * failure is never shared with other processes: they compile for themselves. */
    bool local;
    /* The files the compile read from disk, beyond the source and the in-memory headers
     * (the key covers those) and the compiler's own (its identity covers them): paths as
     * the compiler named them, relative ones relative to the working directory; each
     * malloc'd, NULL and 0 when none (core/manifest.h records them). deps_unknown: they
     * could not be learned (a fatal error stopped the compiler before it wrote them, a
     * computed include): the outcome is then cached nowhere. */
    char **deps;
    size_t num_deps;
    bool deps_unknown;
    /* The lookups that missed: for each of deps found in a search directory, the same
     * name in the directories searched before it (compile.c); the same form as deps. */
    char **absent;
    size_t num_absent;
} kpc_build;
void kpc_platform_build_free(kpc_build *b);

typedef struct kpc_platform {
    const char *name; /* "amd", "nvidia", "comgr", "fake" */
    /* Identity of the compiler: 16 bytes that change whenever the compiler or its libraries
     * change. Records carry it (`kpc prune --stale` compares it). root (may be NULL)
     * remembers it between processes so that a warm hit needs no compiler load. */
    kpc_status (*identity)(const kpc_root *root, uint8_t id[16], char *desc, size_t desc_cap);
    /* NULL-terminated names of environment variables the compiler turns into hidden
     * options (hipRTC: GPU_ENABLE_WAVE32_MODE...); NULL for none. They enter the key, not
     * the identity: a tool run with another environment must not call objects stale. */
    const char *const *key_env;
    /* Validate and normalize a target; KPC_E_INVALID (logged with the supported list).
     * Targets once validated for compiler `id` are remembered under root (may be NULL),
     * so that a warm process need not load the compiler to check its target. */
    kpc_status (*target_normalize)(const kpc_root *root, const uint8_t id[16], const char *target,
                                   char *out, size_t cap);
    /* Compile. KPC_E_COMPILE with b->log on a compile error (b->local: not the source's
     * fault); KPC_E_INVALID when the compiler refused the request before compiling;
     * KPC_E_NOMEM; KPC_E_UNAVAILABLE. Only KPC_E_COMPILE without b->local is shared. */
    kpc_status (*compile)(const char *target, const kpc_source *src, kpc_build *b);
    /* Devices. */
    kpc_status (*device_target)(int device, char *out, size_t cap);
    /* Load a code object on a device; KPC_E_CORRUPT when the runtime refuses the image
     * (a stale or foreign object), KPC_E_HIP for other refusals. */
    kpc_status (*module_load)(int device, const void *code, size_t size, void **module);
    void (*module_unload)(int device, void *module);
    kpc_status (*module_function)(int device, void *module, const char *name, void **fn);
    /* true when compiles run in parallel in one process (NVRTC); hipRTC 5.2 serialises
     * them, so kpc_program_get_many uses one thread there whatever KPC_BUILD_THREADS says */
    bool parallel_compiles;
} kpc_platform;

/* The platform this library was built for, or the one a test installed. */
const kpc_platform *kpc_platform_get(void);
#ifdef KPC_TEST_HOOKS
/* Replace the platform (NULL restores the built-in one). */
void kpc_platform_set(const kpc_platform *p);
#endif
extern const kpc_platform kpc_platform_builtin; /* defined by the platform file built in */

/* Targets validated before for compiler id, remembered under root (may be NULL). */
bool kpc_platform_targets_known(const kpc_root *root, const char *platform, const uint8_t id[16],
                                const char *target);
void kpc_platform_targets_remember(const kpc_root *root, const char *platform, const uint8_t id[16],
                                   const char *target);

#endif /* KPC_PLATFORM_PLATFORM_H */
