/*
 * config.c - resolve a kpc_config against the environment and the defaults.
 *
 * A field the caller set wins; else the environment variable of the contract; else the
 * default. A malformed environment value is an error with the variable's name in the
 * log, never a silent default: a site admin who typed KPC_CACHE_MAX_SIZE=2 gigs must hear.
 */
#define _GNU_SOURCE
#include "core/config.h"
#include "base/log.h"

#include <bsd/libutil.h>
#include <bsd/string.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_DISK_MAX (2ull << 30)
#define DEFAULT_MEM_MAX 256
#define MAX_BUILD_THREADS 256
#define DEFAULT_SHM_ENTRIES 65536
#define MAX_SHM_ENTRIES (1u << 24)

kpc_status kpc_config_parse_size(const char *text, uint64_t *out)
{
    uint64_t v;
    /* expand_number wraps a negative value around to a huge one */
    if (text == NULL || *text == '\0' || strchr(text, '-') || expand_number(text, &v) != 0 || v == 0)
        return KPC_E_INVALID;
    *out = v;
    return KPC_OK;
}

static kpc_status parse_count(const char *var, const char *text, uint64_t max, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v == 0 || v > max || text[0] == '-') {
        KPC_LOG(KPC_LOG_ERROR, "%s=\"%s\" is not a whole number from 1 to %llu", var, text,
                (unsigned long long)max);
        return KPC_E_INVALID;
    }
    *out = (size_t)v;
    return KPC_OK;
}

/* A config field is set only if the caller's struct_size covers it. */
#define CFG_HAS(cfg, field)                                                                    \
    ((cfg) != NULL && (cfg)->struct_size >= offsetof(kpc_config, field) + sizeof((cfg)->field))

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

kpc_status kpc_config_resolve(const kpc_config *cfg, kpc_settings *s)
{
    memset(s, 0, sizeof *s);
    if (cfg != NULL && cfg->struct_size < sizeof(size_t)) {
        KPC_LOG(KPC_LOG_ERROR, "kpc_config.struct_size %zu is too small", cfg->struct_size);
        return KPC_E_INVALID;
    }
    const char *v;

    if ((v = getenv("KPC_LOG")) != NULL && kpc__log_parse(v) < 0) {
        KPC_LOG(KPC_LOG_ERROR, "KPC_LOG=\"%s\" names no level (error, warn, info, debug, trace)", v);
        return KPC_E_INVALID;
    }

    if (CFG_HAS(cfg, flags))
        s->flags = cfg->flags;
    if ((v = getenv("KPC_DISABLE")) != NULL && *v != '\0') {
        if (strcmp(v, "1") == 0)
            s->flags |= KPC_NO_DISK | KPC_NO_SHM;
        else if (strcmp(v, "0") != 0) {
            KPC_LOG(KPC_LOG_ERROR, "KPC_DISABLE=\"%s\" must be 1 or 0", v);
            return KPC_E_INVALID;
        }
    }

    if (CFG_HAS(cfg, cache_dir) && cfg->cache_dir != NULL) {
        if (cfg->cache_dir[0] == '\0' || strlcpy(s->cache_dir, cfg->cache_dir, sizeof s->cache_dir) >= sizeof s->cache_dir) {
            KPC_LOG(KPC_LOG_ERROR, "kpc_config.cache_dir is empty or too long");
            return KPC_E_INVALID;
        }
    } else if ((v = getenv("KPC_CACHE_DIR")) != NULL) {
        if (v[0] == '\0' || strlcpy(s->cache_dir, v, sizeof s->cache_dir) >= sizeof s->cache_dir) {
            KPC_LOG(KPC_LOG_ERROR, "KPC_CACHE_DIR is empty or too long");
            return KPC_E_INVALID;
        }
    } else if (default_cache_dir(s->cache_dir, sizeof s->cache_dir) != KPC_OK) {
        KPC_LOG(KPC_LOG_ERROR, "the default cache directory path is too long");
        return KPC_E_INVALID;
    }

    if (CFG_HAS(cfg, disk_max_bytes) && cfg->disk_max_bytes != 0)
        s->disk_max_bytes = cfg->disk_max_bytes;
    else if ((v = getenv("KPC_CACHE_MAX_SIZE")) != NULL) {
        if (kpc_config_parse_size(v, &s->disk_max_bytes) != KPC_OK) {
            KPC_LOG(KPC_LOG_ERROR, "KPC_CACHE_MAX_SIZE=\"%s\" is not a size such as 512M or 2G", v);
            return KPC_E_INVALID;
        }
    } else
        s->disk_max_bytes = DEFAULT_DISK_MAX;

    if (CFG_HAS(cfg, mem_max_programs) && cfg->mem_max_programs != 0)
        s->mem_max_programs = cfg->mem_max_programs;
    else if ((v = getenv("KPC_MEM_MAX_PROGRAMS")) != NULL) {
        if (parse_count("KPC_MEM_MAX_PROGRAMS", v, SIZE_MAX / 2, &s->mem_max_programs) != KPC_OK)
            return KPC_E_INVALID;
    } else
        s->mem_max_programs = DEFAULT_MEM_MAX;

    if (CFG_HAS(cfg, shm_entries) && cfg->shm_entries != 0) {
        if (cfg->shm_entries > MAX_SHM_ENTRIES) {
            KPC_LOG(KPC_LOG_ERROR, "kpc_config.shm_entries %zu is over %u", cfg->shm_entries,
                    MAX_SHM_ENTRIES);
            return KPC_E_INVALID;
        }
        s->shm_entries = cfg->shm_entries;
    } else if ((v = getenv("KPC_SHM_ENTRIES")) != NULL) {
        if (parse_count("KPC_SHM_ENTRIES", v, MAX_SHM_ENTRIES, &s->shm_entries) != KPC_OK)
            return KPC_E_INVALID;
    } else
        s->shm_entries = DEFAULT_SHM_ENTRIES;

    if ((v = getenv("KPC_KEEP_SOURCES")) != NULL && *v != '\0') {
        if (strcmp(v, "0") == 0)
            s->flags |= KPC_NO_SOURCES;
        else if (strcmp(v, "1") != 0) {
            KPC_LOG(KPC_LOG_ERROR, "KPC_KEEP_SOURCES=\"%s\" must be 1 or 0", v);
            return KPC_E_INVALID;
        }
    }

    if (CFG_HAS(cfg, build_threads) && cfg->build_threads != 0)
        s->build_threads = cfg->build_threads;
    else if ((v = getenv("KPC_BUILD_THREADS")) != NULL) {
        if (parse_count("KPC_BUILD_THREADS", v, MAX_BUILD_THREADS, &s->build_threads) != KPC_OK)
            return KPC_E_INVALID;
    } else
        s->build_threads = 1;

    if (s->cache_dir[0] == '\0')
        s->flags |= KPC_NO_DISK;
    if (s->flags & KPC_NO_DISK)
        s->flags |= KPC_NO_SHM; /* the index shares objects through the disk tree */
    return KPC_OK;
}
