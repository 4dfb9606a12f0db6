/*
 * map.h - a context's in-memory program map, level 1 (core/map.c).
 */
#ifndef KPC_CORE_MAP_H
#define KPC_CORE_MAP_H

#include "base/util.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct kpc_map kpc_map;
typedef struct kpc_map_entry kpc_map_entry;
kpc_status kpc_map_new(size_t max_programs, kpc_map **out);
void kpc_map_free(kpc_map *m);
/* A hit: true with *prog (a reference) when key's entry is READY; takes no lock. */
bool kpc_map_hit(kpc_map *m, const kpc_key *key, kpc_program **prog);
/* KPC_OK with *prog (a hit, or a wait that ended in success), KPC_E_NOT_FOUND when the
 * caller must build (then it must call kpc_map_publish with *entry), or the failure a
 * waited-for build ended in. */
kpc_status kpc_map_acquire(kpc_map *m, const kpc_key *key, kpc_program **prog,
                           kpc_map_entry **entry, bool *waited);
/* Publish the builder's outcome; prog on KPC_OK, whose map reference (every program is
 * made holding one, core/program.h) the map takes over; the caller keeps its own. A
 * transient program (kpc_program.transient: its outcome stored nowhere) goes to the
 * waiters but is not kept: the next request misses. */
void kpc_map_publish(kpc_map *m, kpc_map_entry *entry, kpc_status st, kpc_program *prog,
                     const char *log);
size_t kpc_map_count(kpc_map *m);
/* Drop key's READY entry if it still holds prog (a program whose files changed since,
 * or one not to be kept): the next request for key misses. */
void kpc_map_forget(kpc_map *m, const kpc_key *key, const kpc_program *prog);

#endif /* KPC_CORE_MAP_H */
