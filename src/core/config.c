/*
 * config.c - resolve a kpc_config against the environment and the defaults.
 *
 * A field the caller set wins; else the environment variable (read and checked by the
 * one table of base/settings.c); else the default. Every KPC_* variable is checked here
 * before anything is opened, whether this cache reads it or not, and a malformed one is
 * KPC_E_INVALID with the variable's name and accepted form in the log (kpc.h promises it
 * of kpc_cache_open): a site admin who typed KPC_CACHE_MAX_SIZE=2 gigs or a KPC_REMOTE
 * with a bad port must hear, never get a default silently. The tools resolve the same way
 * and exit 2; the drop-ins then forward to the real library.
 */
#define _GNU_SOURCE
#include "core/config.h"
#include "base/log.h"
#include "base/settings.h"
#include "storage/remote.h"

#include <bsd/string.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A config field is set only if the caller's struct_size covers it. */
#define CFG_HAS(cfg, field)                                                                    \
    ((cfg) != NULL && (cfg)->struct_size >= offsetof(kpc_config, field) + sizeof((cfg)->field))

#define KNOWN_FLAGS (KPC_NO_DISK | KPC_NO_SHM | KPC_NO_SOURCES)

static kpc_status default_cache_dir(char *out, size_t cap)
{
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    size_t n;
    if (xdg != NULL && xdg[0] == '/')
        n = (size_t)snprintf(out, cap, "%s/kpc", xdg);
    else if (home != NULL && home[0] != '\0')
        n = (size_t)snprintf(out, cap, "%s/.cache/kpc", home);
    else {
        KPC_LOG(KPC_LOG_WARN, "neither KPC_CACHE_DIR, XDG_CACHE_HOME nor HOME is set: no disk cache");
        out[0] = '\0';
        return KPC_OK;
    }
    return n < cap ? KPC_OK : KPC_E_INVALID;
}

kpc_status kpc_config_check_environment(const kpc_config *cfg)
{
    kpc_status s = KPC_OK;
    for (int id = 0; id < KPC_SET_COUNT; id++) {
        char why[512];
        if (kpc__setting_check((kpc_setting_id)id, why, sizeof why) != KPC_OK) {
            KPC_LOG(KPC_LOG_ERROR, "%s", why);
            s = KPC_E_INVALID;
        }
    }
    /* the URL's grammar is the cluster tier's own; it logs what is wrong, never the
     * password (kpc_config.remote wins over KPC_REMOTE, so it is checked the same way) */
    const char *url = kpc_remote_url_configured(cfg);
    kpc_remote_url parsed;
    if (url != NULL && kpc_remote_url_parse_from(kpc_remote_url_source(cfg), url, &parsed) != KPC_OK)
        s = KPC_E_INVALID;
    memset(&parsed, 0, sizeof parsed);
    return s;
}

/* A count from the config when set there, else its setting (checked already). A field
 * outside its setting's range (build_threads 257 or SIZE_MAX where KPC_BUILD_THREADS is 1
 * to 256) is refused, named in the log, as the variable would be. */
static kpc_status count_of(const char *field, size_t value, kpc_setting_id id, size_t *out)
{
    const kpc_setting *row = kpc__setting(id);
    if (value == 0) {
        *out = (size_t)kpc__setting_number(id);
        return KPC_OK;
    }
    if (value < row->min || value > row->max) {
        char form[160];
        kpc__number_form(row->type, row->min, row->max, form, sizeof form);
        KPC_LOG(KPC_LOG_ERROR, "kpc_config.%s %zu is not %s (0: %s)", field, value, form, row->name);
        return KPC_E_INVALID;
    }
    *out = value;
    return KPC_OK;
}

kpc_status kpc_config_resolve(const kpc_config *cfg, kpc_settings *s)
{
    memset(s, 0, sizeof *s);
    if (cfg != NULL && cfg->struct_size < sizeof(size_t)) {
        KPC_LOG(KPC_LOG_ERROR, "kpc_config.struct_size %zu is too small", cfg->struct_size);
        return KPC_E_INVALID;
    }
    if (kpc_config_check_environment(cfg) != KPC_OK)
        return KPC_E_INVALID;

    if (CFG_HAS(cfg, flags))
        s->flags = cfg->flags;
    if (s->flags & ~KNOWN_FLAGS) {
        /* a flag of a later kpc (or a stray value) asks for something this one cannot do */
        KPC_LOG(KPC_LOG_ERROR, "kpc_config.flags 0x%x has bits this kpc does not know (0x%x): it knows "
                "KPC_NO_DISK, KPC_NO_SHM and KPC_NO_SOURCES", s->flags, s->flags & ~KNOWN_FLAGS);
        return KPC_E_INVALID;
    }
    if (kpc__setting_number(KPC_SET_DISABLE))
        s->flags |= KPC_NO_DISK | KPC_NO_SHM;
    if (!kpc__setting_number(KPC_SET_KEEP_SOURCES))
        s->flags |= KPC_NO_SOURCES;

    const char *v;
    if (CFG_HAS(cfg, cache_dir) && cfg->cache_dir != NULL) {
        /* the one rule of a path, as for KPC_CACHE_DIR (--cache-dir comes here) */
        if (kpc__path_check(cfg->cache_dir) != KPC_OK ||
            strlcpy(s->cache_dir, cfg->cache_dir, sizeof s->cache_dir) >= sizeof s->cache_dir) {
            KPC_LOG(KPC_LOG_ERROR, "kpc_config.cache_dir is empty, too long or holds a control character");
            return KPC_E_INVALID;
        }
    } else if ((v = kpc__setting_text(KPC_SET_CACHE_DIR)) != NULL) {
        if (strlcpy(s->cache_dir, v, sizeof s->cache_dir) >= sizeof s->cache_dir) {
            KPC_LOG(KPC_LOG_ERROR, "KPC_CACHE_DIR is too long");
            return KPC_E_INVALID;
        }
    } else if (default_cache_dir(s->cache_dir, sizeof s->cache_dir) != KPC_OK) {
        KPC_LOG(KPC_LOG_ERROR, "the default cache directory path is too long");
        return KPC_E_INVALID;
    }

    s->disk_max_bytes = CFG_HAS(cfg, disk_max_bytes) && cfg->disk_max_bytes != 0
                            ? cfg->disk_max_bytes
                            : kpc__setting_number(KPC_SET_CACHE_MAX_SIZE);
    if (count_of("mem_max_programs", CFG_HAS(cfg, mem_max_programs) ? cfg->mem_max_programs : 0,
                 KPC_SET_MEM_MAX_PROGRAMS, &s->mem_max_programs) != KPC_OK ||
        count_of("shm_entries", CFG_HAS(cfg, shm_entries) ? cfg->shm_entries : 0, KPC_SET_SHM_ENTRIES,
                 &s->shm_entries) != KPC_OK ||
        count_of("build_threads", CFG_HAS(cfg, build_threads) ? cfg->build_threads : 0, KPC_SET_BUILD_THREADS,
                 &s->build_threads) != KPC_OK)
        return KPC_E_INVALID;

    if (s->cache_dir[0] == '\0')
        s->flags |= KPC_NO_DISK;
    if (s->flags & KPC_NO_DISK)
        s->flags |= KPC_NO_SHM; /* the index shares objects through the disk tree */
    return KPC_OK;
}
