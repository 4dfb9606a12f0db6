/*
 * config.h - a cache's settings: kpc_config, then the environment, then the defaults
 * (core/config.c).
 */
#ifndef KPC_CORE_CONFIG_H
#define KPC_CORE_CONFIG_H

#include "kpc/kpc.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kpc_settings {
    char cache_dir[4096];
    uint64_t disk_max_bytes;
    size_t mem_max_programs;
    size_t shm_entries;
    unsigned flags;        /* KPC_NO_DISK, KPC_NO_SHM, KPC_NO_SOURCES (KPC_KEEP_SOURCES=0) */
    size_t build_threads;  /* kpc_program_get_many's threads, where compiles run in parallel */
} kpc_settings;
/* Fill s from cfg (may be NULL), then the environment, then the defaults; KPC_E_INVALID
 * (logged) for a malformed value, of any KPC_* variable. */
kpc_status kpc_config_resolve(const kpc_config *cfg, kpc_settings *s);
/* Check every KPC_* variable (base/settings_table.h) and the cluster tier's URL
 * (cfg->remote, else KPC_REMOTE): KPC_E_INVALID, each malformed one logged with its name
 * and accepted form. kpc_config_resolve calls it first. */
kpc_status kpc_config_check_environment(const kpc_config *cfg);

#endif /* KPC_CORE_CONFIG_H */
