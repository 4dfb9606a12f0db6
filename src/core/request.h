/*
 * request.h - what kpc_program_get does to a request before the map (core/request.c),
 * shared with kpc_program_get_many (core/batch.c).
 */
#ifndef KPC_CORE_REQUEST_H
#define KPC_CORE_REQUEST_H

#include "core/context.h"
#include "core/map.h"

/* Check a request as kpc_program_get does: KPC_OK or KPC_E_INVALID (logged). */
kpc_status kpc_request_check_source(const kpc_source *src);
/* The key of a checked request on ctx; no_cwd: its kpc_key_compute_no_cwd key where that
 * was computed already (else NULL). */
void kpc_request_key(const kpc_context *ctx, const kpc_source *src, const kpc_key *no_cwd, kpc_key *key);
/* The context's map for key, as every request path asks it: a hit on a program whose
 * files from disk changed is dropped and misses; counted (hit, wait or miss).
 * KPC_E_NOT_FOUND: *entry is held, to be resolved and given to kpc_request_publish. */
kpc_status kpc_request_acquire(kpc_context *ctx, const kpc_key *key, kpc_program **out,
                               kpc_map_entry **entry);
/* Publish a resolved miss to the map (which takes its own reference to prog); a
 * transient program (its outcome stored nowhere) goes to the waiters but is not kept. */
void kpc_request_publish(kpc_context *ctx, const kpc_key *key, kpc_map_entry *entry, kpc_status s,
                         kpc_program *prog, const char *log);

#endif /* KPC_CORE_REQUEST_H */
