/*
 * amd_deps.h - the files a hipRTC compile read (amd_deps.c says how).
 */
#ifndef KPC_PLATFORM_AMD_DEPS_H
#define KPC_PLATFORM_AMD_DEPS_H

#include "kpc/kpc.h"

#include <stddef.h>

/* The most options kpc_amd_deps_options writes. */
#define KPC_AMD_DEPS_OPTIONS 10

/* The options that make hipRTC's clang write the make-format dependency file depfile
 * (into opts, up to KPC_AMD_DEPS_OPTIONS); returns how many. */
size_t kpc_amd_deps_options(const char *depfile, const char **opts);

/* Read, parse and remove the dependency file; *paths (kpc_depfile_paths_free) gets
 * the files outside comgr's temporary directory, in the compiler's order (NULL, 0 when
 * none). KPC_E_NOT_FOUND when the compile wrote no usable file (dependencies unknown). */
kpc_status kpc_amd_deps_collect(const char *depfile, char ***paths, size_t *n);

/* The directory of the HIP headers the compiler's identity covers ("<dir>/hip/"), or
 * NULL: beside the loaded libamdhip64, else (no HIP runtime loaded) the system's
 * <hip/hip_runtime.h>. Their files are never dependencies. */
const char *kpc_amd_deps_hip_headers(void);

#endif /* KPC_PLATFORM_AMD_DEPS_H */
