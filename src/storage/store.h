/*
 * store.h - the disk tree (storage/store.c, storage/store_walk.c): one file per record
 * under the cache directory, the first storage tier.
 */
#ifndef KPC_STORAGE_STORE_H
#define KPC_STORAGE_STORE_H

#include "base/root.h"
#include "storage/record.h"
#include "storage/tier.h"

#include <stdatomic.h>

typedef struct kpc_store kpc_store;
/* Open the tree of dir (base/root.h: created 0700, another user's refused); the store
 * owns that root. */
kpc_status kpc_store_open(const char *dir, uint64_t max_bytes, kpc_store **out);
/* The same on a root the caller keeps open longer than the store. */
kpc_status kpc_store_open_root(kpc_root *root, uint64_t max_bytes, kpc_store **out);
/* The tree of a cache directory several hosts mount (storage/shared_tier.c), opened
 * and checked as kpc_store_open does. Two things differ, since other hosts write it too:
 * a staging file is taken for a live writer's until it is KPC_STALE_TMP_MS old (its pid
 * and start time name a process of another host as often as one of this host), and the
 * store keeps no size limit and no usage estimate (a walk of a tree on a network file
 * system in every process would cost more than the cache saves): `kpc prune` on the
 * directory keeps its size. Its failed writes are logged as warnings: a read-only one
 * is a choice, not an error. */
kpc_status kpc_store_open_shared(const char *dir, kpc_store **out);
void kpc_store_close(kpc_store *st);
const kpc_root *kpc_store_root(const kpc_store *st);
/* Host-wide usage estimate, kept in the shm index where there is one. */
void kpc_store_share_usage(kpc_store *st, _Atomic uint64_t *bytes, _Atomic uint64_t *files,
                           _Atomic uint32_t *known);
/* Read and check a record; KPC_E_NOT_FOUND (absent), KPC_E_CORRUPT (failed a check:
 * removed and logged). A code hit refreshes the file's time, rate-limited. */
kpc_status kpc_store_read(kpc_store *st, const kpc_key *key, const char *target, uint32_t kind,
                          kpc_record *out);
/* Publish atomically (O_EXCL temp file, fsync, rename); then keep the size limit. The
 * payload is code (rec->code_size bytes; for a LOG record the log text, a C string)
 * then names_or_log (second_size bytes). */
kpc_status kpc_store_write(kpc_store *st, const kpc_record *rec, const void *code,
                           const void *names_or_log, size_t second_size);
/* Remove the code record of key if it still holds exactly code (the bytes a runtime
 * refused): KPC_OK when removed, KPC_E_NOT_FOUND when gone or already replaced,
 * KPC_E_IO when it holds them but could not be removed. */
kpc_status kpc_store_remove_refused(kpc_store *st, const kpc_key *key, const char *target,
                                   const void *code, size_t size);

/* Walk every record file; the callback gets its path, stat and the record header
 * (payload not read unless verify is set; then status may be KPC_E_CORRUPT, and a file
 * that fails is removed by the walk itself, while it still holds the bytes it checked:
 * a fresh file renamed over it meanwhile is neither reported nor removed). */
typedef struct kpc_store_entry {
    const char *path;
    uint64_t size;     /* file size */
    uint64_t mtime_ns; /* last use */
    kpc_status status; /* KPC_OK, or KPC_E_CORRUPT when the file fails its checks */
    bool removed;      /* verify: the damaged file was removed */
    const kpc_record *rec;
} kpc_store_entry;
typedef int (*kpc_store_walk_fn)(const kpc_store_entry *e, void *arg); /* nonzero stops */
kpc_status kpc_store_walk(kpc_store *st, bool verify, kpc_store_walk_fn fn, void *arg);
/* Evict least recently used files until the total is at most target_bytes; one pruner
 * at a time (flock). stale_id (may be NULL) also removes records of another compiler. */
typedef struct kpc_prune_result {
    uint64_t files_before, bytes_before, files_removed, bytes_removed, temp_removed;
} kpc_prune_result;
kpc_status kpc_store_prune(kpc_store *st, uint64_t target_bytes, const uint8_t *keep_compiler_id,
                           kpc_prune_result *res);
/* The same, but it waits while another process prunes instead of leaving the work to it
 * (kpc_store_prune skips then): for `kpc prune`, whose limit may be lower. */
kpc_status kpc_store_prune_wait(kpc_store *st, uint64_t target_bytes, const uint8_t *keep_compiler_id,
                                kpc_prune_result *res);
/* Remove the staging files in v1/tmp whose writer is dead (its pid and start time are in
 * the name); by_age also removes other names older than an hour (an older kpc's). Safe
 * at any time: a dead writer's file is never renamed. Returns how many went. Called at
 * open (kpc_store_open_root) and by every prune. */
uint64_t kpc_store_sweep_tmp(kpc_store *st, bool by_age);
/* Walk the tree and count (exact; it also resets the shared estimate). */
kpc_status kpc_store_usage(kpc_store *st, uint64_t *bytes, uint64_t *files);
/* The estimate every write, removal and prune keeps (host-wide where there is an index);
 * one walk when none is known yet. What kpc_stats_get reports: it must not walk 100k files
 * per call (`kpc compile` calls it twice a file). */
kpc_status kpc_store_usage_estimate(kpc_store *st, uint64_t *bytes, uint64_t *files);
/* Remove every record; KPC_E_IO (each failure logged, *files_failed counted) when any
 * could not be removed or the walk met an error: never a silent success. */
kpc_status kpc_store_clear(kpc_store *st, uint64_t *files_removed, uint64_t *files_failed);

/* The disk tree as a storage tier (storage/tier.h): the tier owns a store on env->root
 * (KPC_E_NOT_FOUND without a root: no disk level). */
kpc_status kpc_store_tier_open(const kpc_tier_env *env, kpc_tier **out);
/* A store as a tier with the disk tree's ops (the shared directory's); the tier owns st
 * from now on, also when this fails (st is then closed). */
kpc_status kpc_store_tier(kpc_store *st, kpc_tier **out);
/* The shared directory of KPC_SHARED_DIR as a tier (storage/shared_tier.c): KPC_E_NOT_FOUND
 * (absent) when the setting is unset; a directory that is missing or refused is logged. */
kpc_status kpc_shared_tier_open(const kpc_tier_env *env, kpc_tier **out);
/* The store behind a tier of the disk tree's ops (NULL for another tier). */
kpc_store *kpc_store_of_tier(kpc_tier *t);

#endif /* KPC_STORAGE_STORE_H */
