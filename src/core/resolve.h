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

#endif /* KPC_CORE_RESOLVE_H */
