/*
 * include_scan.h - the files a compile may read, found by reading its includes: for a
 * compiler without dependency output (NVRTC). include_scan.c says how and where it errs.
 */
#ifndef KPC_PLATFORM_INCLUDE_SCAN_H
#define KPC_PLATFORM_INCLUDE_SCAN_H

#include "kpc/kpc.h"
#include "platform/options.h"

#include <stdbool.h>
#include <stddef.h>

/* The files src may read from disk under NVRTC's search rules (paths relative to the
 * working directory where the options or the source name are). *paths: malloc'd
 * (kpc_depfile_paths_free), NULL and 0 when none. *unresolved: an include was found
 * nowhere on disk (NVRTC's built-in header, or a missing one: a compile error then may
 * be its absence, which no manifest can record). KPC_E_NOT_FOUND: a computed include or
 * too many files (dependencies unknown: do not cache); KPC_E_INVALID: a file found is
 * not a regular file (kpc_include_check); KPC_E_NOMEM. */
kpc_status kpc_include_scan(const kpc_source *src, char ***paths, size_t *n, bool *unresolved);

/* The check before any compile: the same walk under the compiler's option table (its
 * search directories; what it cannot resolve is not an error here). KPC_E_INVALID
 * (logged with the path) when a file an include would open is not a regular file: a
 * FIFO would block the compiler, and every process waiting for its build, forever.
 * KPC_E_NOMEM; else KPC_OK. */
kpc_status kpc_include_check(const kpc_option_table *options, const kpc_source *src);

#endif /* KPC_PLATFORM_INCLUDE_SCAN_H */
