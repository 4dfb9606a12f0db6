/*
 * resolve.h - a miss in the context's map, resolved through the host index, the
 * storage tiers and the compiler (core/resolve.c).
 */
#ifndef KPC_CORE_RESOLVE_H
#define KPC_CORE_RESOLVE_H

#include "base/util.h"

/* KPC_OK with *out (one reference, the module loaded on a device context), or the
 * failure with *log (malloc'd, may be NULL) for a compile error. */
kpc_status kpc_resolve_miss(kpc_context *ctx, const kpc_key *key, const kpc_source *src,
                            kpc_program **out, char **log);
/* The same, except that where another live process is building the key it returns
 * KPC_E_NOT_FOUND at once with *busy set (holding nothing) instead of sleeping:
 * kpc_program_get_many's first pass (core/batch.c). */
kpc_status kpc_resolve_miss_nowait(kpc_context *ctx, const kpc_key *key, const kpc_source *src,
                                   kpc_program **out, char **log, bool *busy);

#endif /* KPC_CORE_RESOLVE_H */
