/*
 * miss.c - what kpc_program_get does when the context's map has no entry for its
 * request: the map calls kpc_miss_resolve as its resolver (core/map.h, kpc_map_get) and
 * publishes what it returns. The miss is counted; the request key, which a hit never
 * needs, is computed (core/key.c); the outcome comes from core/resolve.c (the host index,
 * the tiers, the compiler); a program built for one working directory is told which.
 * So a miss enters each of those files once, after the map and before the map's
 * publication, which kpc_map_get makes without returning here.
 *
 * kpc_program_get_many (core/batch.c) takes the map's two steps apart (it resolves in
 * passes) and calls the first and last of these itself, through core/request.h.
 */
#include "core/miss.h"
#include "core/cache.h"
#include "core/key.h"
#include "core/program.h"
#include "core/resolve.h"

#include <string.h>

void kpc_miss_prepare(kpc_context *ctx, kpc_normalized_request *req)
{
    atomic_fetch_add_explicit(&ctx->cache->mem_misses, 1, memory_order_relaxed);
    kpc_key_compute_request(&ctx->key_prefix, req);
}

void kpc_miss_bind(const kpc_normalized_request *req, kpc_status s, kpc_program *prog)
{
    if (s == KPC_OK && req->cwd_bound) {
        prog->cwd_bound = true;
        memcpy(prog->cwd, req->cwd, sizeof prog->cwd);
    }
}

kpc_status kpc_miss_resolve(void *miss, kpc_program **prog, char **log)
{
    kpc_miss *m = miss;
    kpc_miss_prepare(m->ctx, m->req);
    kpc_status s = kpc_resolve_miss(m->ctx, m->req, prog, log);
    kpc_miss_bind(m->req, s, *prog);
    return s;
}
