/*
 * request.h - what kpc_program_get does to a request before the map (core/request.c),
 * shared with kpc_program_get_many (core/batch.c).
 */
#ifndef KPC_CORE_REQUEST_H
#define KPC_CORE_REQUEST_H

#include "core/context.h"

/* Check a request as kpc_program_get does: KPC_OK or KPC_E_INVALID (logged). */
kpc_status kpc_request_check_source(const kpc_source *src);
/* The key of a checked request on ctx. */
void kpc_request_key(const kpc_context *ctx, const kpc_source *src, kpc_key *key);

#endif /* KPC_CORE_REQUEST_H */
