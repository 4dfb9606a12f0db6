/*
 * resolve.h - a miss in the context's map, resolved through the host index, the
 * storage tiers and the compiler (core/resolve.c), for a request read once
 * (core/request.h): its key and what its options said come from that value.
 */
#ifndef KPC_CORE_RESOLVE_H
#define KPC_CORE_RESOLVE_H

#include "base/util.h"
#include "core/request.h"
#include "storage/claim.h"

/* KPC_OK with *out (one reference, the module loaded on a device context), or the
 * failure with *log (malloc'd, may be NULL) for a compile error. */
kpc_status kpc_resolve_miss(kpc_context *ctx, const kpc_normalized_request *req, kpc_program **out,
                            char **log);
/* The same, except that it never sleeps on another live builder: where another process
 * of this host builds the key it returns KPC_E_NOT_FOUND at once with *busy set, holding
 * nothing; where this process won the host's claim but another host's live builder holds
 * the key's cluster lease, the same with the host claim kept in *held
 * (kpc_claim_held(held)): the host's other processes go on waiting for this one, which
 * must then call kpc_resolve_held. kpc_program_get_many's first pass (core/batch.c). */
kpc_status kpc_resolve_miss_nowait(kpc_context *ctx, const kpc_normalized_request *req, kpc_program **out,
                                   char **log, bool *busy, kpc_claim *held);
/* Resolve a key whose host claim kpc_resolve_miss_nowait handed out in *held: wait for the
 * other host's build (or take it over), as kpc_resolve_miss; the claim is finished. */
kpc_status kpc_resolve_held(kpc_context *ctx, const kpc_normalized_request *req, kpc_claim *held,
                            kpc_program **out, char **log);

#endif /* KPC_CORE_RESOLVE_H */
