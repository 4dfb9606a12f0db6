/*
 * nvrtc_target.c - the one judge of an NVRTC target name (platform/nvrtc_target.h).
 *
 * NVRTC lists the architecture numbers it compiles for (nvrtcGetSupportedArchs), never
 * the suffixed variants: whether sm_90a or sm_100f exists is asked of NVRTC itself by
 * compiling an empty program for it (well under a millisecond when it refuses). Asking
 * costs loading NVRTC, so an accepted target is remembered in the target files of the
 * compiler identity (platform/platform.c) and a later process does not ask again.
 */
#include "platform/nvrtc_target.h"

#include "base/log.h"
#include "platform/platform.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARCHS 256

/* sm_XX or compute_XX (2 or 3 digits, no leading 0), optionally with the arch-specific
 * suffix a or the family suffix f. *arch receives XX; *suffix the suffix or 0. */
static bool parse_target(const char *t, int *arch, char *suffix)
{
    const char *p = strncmp(t, "sm_", 3) == 0 ? t + 3 : strncmp(t, "compute_", 8) == 0 ? t + 8 : NULL;
    if (p == NULL)
        return false;
    size_t digits = strspn(p, "0123456789");
    if (digits < 2 || digits > 3 || p[0] == '0')
        return false;
    *suffix = p[digits];
    if (*suffix != '\0' && ((*suffix != 'a' && *suffix != 'f') || p[digits + 1] != '\0'))
        return false;
    *arch = atoi(p);
    return true;
}

static bool compiles_for(const kpc_nvrtc_calls *nv, const char *target)
{
    char arch[80];
    snprintf(arch, sizeof arch, "-arch=%s", target);
    const char *opts[] = {arch};
    void *p = NULL;
    if (nv->create(&p, "", "kpc_probe.cu", 0, NULL, NULL) != 0)
        return false;
    bool ok = nv->compile(p, 1, opts) == 0;
    nv->destroy(&p);
    return ok;
}

static void log_refused(int level, const kpc_nvrtc_calls *nv, const char *target, const int *archs, int n)
{
    char list[1024] = "";
    for (int i = 0; i < n; i++) {
        size_t used = strlen(list);
        snprintf(list + used, sizeof list - used, "%s%d", used ? " " : "", archs[i]);
    }
    int major = 0, minor = 0;
    nv->version(&major, &minor);
    KPC_LOG(level, "target \"%s\" is not supported by NVRTC %d.%d; supported: sm_XX (cubin) "
            "or compute_XX (PTX) for XX in: %s (with suffix a or f where the architecture has one)",
            target, major, minor, list);
}

kpc_status kpc_nvrtc_target_normalize(const kpc_nvrtc_targets *t, const kpc_root *root, const uint8_t id[16],
                                      const char *target, char *out, size_t cap)
{
    int arch;
    char suffix;
    if (!parse_target(target, &arch, &suffix) || strlen(target) >= cap) {
        KPC_LOG(t->refusal_level, "target \"%s\" is malformed (e.g. sm_90 for a cubin, compute_90 for PTX)",
                target);
        return KPC_E_INVALID;
    }
    snprintf(out, cap, "%s", target);
    if (kpc_platform_targets_known(root, t->platform, id, out))
        return KPC_OK;
    const kpc_nvrtc_calls *nv = t->load();
    if (nv == NULL)
        return KPC_E_UNAVAILABLE;
    int n = 0, archs[MAX_ARCHS];
    if (nv->num_archs(&n) != 0 || n <= 0 || n > MAX_ARCHS || nv->archs(archs) != 0) {
        KPC_LOG(KPC_LOG_ERROR, "nvrtcGetSupportedArchs failed");
        return KPC_E_UNAVAILABLE;
    }
    bool listed = false;
    for (int i = 0; i < n && !listed; i++)
        listed = archs[i] == arch;
    if (!listed || (suffix != '\0' && !compiles_for(nv, out))) {
        log_refused(t->refusal_level, nv, target, archs, n);
        return KPC_E_INVALID;
    }
    kpc_platform_targets_remember(root, t->platform, id, out);
    return KPC_OK;
}
