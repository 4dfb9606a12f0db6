/*
 * context.h - struct kpc_context (core/context.c).
 */
#ifndef KPC_CORE_CONTEXT_H
#define KPC_CORE_CONTEXT_H

#include "core/key.h"
#include "core/map.h"
#include "core/map_key.h"

struct kpc_context {
    kpc_cache *cache;
    char target[64];
    uint8_t compiler_id[16]; /* the platform's identity: stored in records */
    uint8_t key_id[16];      /* compiler_id with the hidden options: what keys hash */
    int device; /* -1: compile-only */
    kpc_map *map;
    kpc_key_prefix key_prefix; /* of key_id, the platform's name and target */
    kpc_map_secret map_secret; /* the map's keys are hashed with it (core/map_key.h) */
};

#endif /* KPC_CORE_CONTEXT_H */
