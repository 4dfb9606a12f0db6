/*
 * nvrtc_target.h - which targets NVRTC compiles for, decided in one place
 * (platform/nvrtc_target.c) for every kpc that compiles through NVRTC: the NVIDIA
 * platform (platform/nvidia.c, NVRTC found by soname) and the NVRTC drop-in's own
 * platform (dropin/nvrtc_platform.c, the real NVRTC it forwards to). Each hands over the
 * NVRTC calls it loaded; neither judges a target name itself.
 */
#ifndef KPC_PLATFORM_NVRTC_TARGET_H
#define KPC_PLATFORM_NVRTC_TARGET_H

#include "base/root.h"
#include "kpc/kpc.h"

#include <stddef.h>
#include <stdint.h>

/* The NVRTC calls the judgement makes, with NVRTC's signatures (nvrtcResult as int,
 * nvrtcProgram as void *): 0 is NVRTC_SUCCESS. */
typedef struct kpc_nvrtc_calls {
    int (*version)(int *major, int *minor);
    int (*num_archs)(int *n);
    int (*archs)(int *list);
    int (*create)(void **prog, const char *code, const char *name, int num_headers,
                  const char *const *headers, const char *const *include_names);
    int (*compile)(void *prog, int num_options, const char *const *options);
    int (*destroy)(void **prog);
} kpc_nvrtc_calls;

typedef struct kpc_nvrtc_targets {
    const char *platform; /* whose target files remember the targets accepted */
    /* NVRTC's calls, loaded on first need (a target not remembered yet); NULL when NVRTC
     * cannot be loaded (the loader logs why) */
    const kpc_nvrtc_calls *(*load)(void);
    /* how loud a refused target is: an error where kpc is the only compiler, a note where
     * the caller forwards the compile to NVRTC, which then answers for itself */
    int refusal_level;
} kpc_nvrtc_targets;

/* The platform's target_normalize for NVRTC (platform/platform.h): sm_XX or compute_XX
 * (2 or 3 digits), optionally suffixed a (sm_90a) or f (sm_100f), whose number NVRTC
 * lists and, for a suffixed one, for which NVRTC compiles an empty program. The target
 * is kept as written (out); an accepted one is remembered per compiler identity, so a
 * later context asks NVRTC nothing. KPC_E_INVALID for a refused target, KPC_E_UNAVAILABLE
 * when NVRTC cannot be asked. */
kpc_status kpc_nvrtc_target_normalize(const kpc_nvrtc_targets *t, const kpc_root *root, const uint8_t id[16],
                                      const char *target, char *out, size_t cap);

#endif /* KPC_PLATFORM_NVRTC_TARGET_H */
