/*
 * amd_deps.h - the files a hipRTC compile read (amd_deps.c says how).
 */
#ifndef KPC_PLATFORM_AMD_DEPS_H
#define KPC_PLATFORM_AMD_DEPS_H

#include "kpc/kpc.h"

#include <stddef.h>

/* Read, parse and remove the dependency file; *paths (kpc_depfile_paths_free) gets
 * the files outside comgr's temporary directory, in the compiler's order (NULL, 0 when
 * none). KPC_E_NOT_FOUND when the compile wrote no usable file (dependencies unknown). */
kpc_status kpc_amd_deps_collect(const char *depfile, char ***paths, size_t *n);

#endif /* KPC_PLATFORM_AMD_DEPS_H */
