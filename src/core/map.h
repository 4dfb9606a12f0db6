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
/* Whether a hit's program still answers as it was built: asked only of a program that
 * read outside its request, with its files from disk (p->deps, or NULL) and the digest
 * of the working directory it was built in (p->cwd where p->cwd_bound, else NULL). One
 * that does not is dropped from the map, and the request misses. */
struct kpc_deps;
typedef bool (*kpc_map_current)(const struct kpc_deps *deps, const uint8_t *cwd);

/* How the map answered. */
typedef enum kpc_map_answer {
    KPC_MAP_HIT,    /* a READY entry (checked by current) */
    KPC_MAP_WAITED, /* another thread's build, waited for */
    KPC_MAP_MISSED, /* no entry: the caller's to resolve (kpc_map_get: resolved, published) */
} kpc_map_answer;

/* KPC_OK with *prog (a hit checked by current, or a wait that ended in success),
 * KPC_E_NOT_FOUND when the caller must build (then it must call kpc_map_publish with
 * *entry), or the failure a waited-for build ended in; *how says which. */
kpc_status kpc_map_acquire(kpc_map *m, const kpc_key *key, kpc_map_current current, kpc_program **prog,
                           kpc_map_entry **entry, kpc_map_answer *how);

/* What kpc_map_get asks of its caller: current, and resolve, a miss's outcome resolved
 * outside any lock (with the call's arg): KPC_OK with *prog (as every program is made,
 * holding the map's reference beside its maker's: core/program.h), or the failure with
 * *log (malloc'd, or NULL). Constant for a caller: a hit passes its address alone. */
typedef struct kpc_map_resolver {
    kpc_map_current current;
    kpc_status (*resolve)(void *arg, kpc_program **prog, char **log);
} kpc_map_resolver;

/* key's program in one call, whatever the map holds (the getOrBuild of SYCL's
 * KernelProgramCache): kpc_map_acquire's answer (with r->current), or on a miss
 * r->resolve(arg)'s outcome, published as kpc_map_publish does. KPC_OK with *prog (a
 * reference for the caller), or the failure (its log in kpc_last_log). */
kpc_status kpc_map_get(kpc_map *m, const kpc_key *key, const kpc_map_resolver *r, void *arg, kpc_program **prog,
                       kpc_map_answer *how);
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
