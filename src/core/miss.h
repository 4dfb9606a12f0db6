/*
 * miss.h - a request the context's map did not answer (core/miss.c).
 */
#ifndef KPC_CORE_MISS_H
#define KPC_CORE_MISS_H
#include "core/request.h"

/* A miss of kpc_program_get, as the map's resolver takes it (its arg). */
typedef struct kpc_miss {
    kpc_context *ctx;
    kpc_normalized_request *req;
} kpc_miss;

/* The miss counted and req->key computed (core/key.h, kpc_key_compute_request, which
 * settles the working directory's part where reading the request left it pending). */
void kpc_miss_prepare(kpc_context *ctx, kpc_normalized_request *req);
/* A program resolved for req told the working directory it was built for, where its
 * request bound it to one (req->cwd_bound; nothing on a failure). */
void kpc_miss_bind(const kpc_normalized_request *req, kpc_status s, kpc_program *prog);
/* core/map.h's kpc_map_resolver.resolve for a kpc_miss: prepared, resolved (core/resolve.h),
 * bound. */
kpc_status kpc_miss_resolve(void *miss, kpc_program **prog, char **log);
#endif /* KPC_CORE_MISS_H */
