/*
 * store_private.h - what the two files of the disk tree share (store.c, store_walk.c);
 * nothing outside storage/store*.c includes it.
 */
#ifndef KPC_STORAGE_STORE_PRIVATE_H
#define KPC_STORAGE_STORE_PRIVATE_H

#include "storage/store.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/stat.h>

/* A target's directory v1/<target>, checked once and held for the life of the store
 * (store.c: target_dir); a held one found replaced is retired, closed with the store. */
#define KPC_STORE_HELD 8
typedef struct kpc_held_dir {
    char name[64];
    int fd;
    dev_t dev;
    ino_t ino;
} kpc_held_dir;

struct kpc_store {
    kpc_root *root;
    bool own_root;    /* opened by kpc_store_open: closed with the store */
    bool shared;      /* a tree other hosts write too (kpc_store_open_shared) */
    uint64_t max_bytes;
    /* usage estimate: in the host index if shared, else here */
    _Atomic uint64_t local_bytes, local_files;
    _Atomic uint32_t local_known;
    _Atomic uint64_t *bytes, *files;
    _Atomic uint32_t *known;
    atomic_int write_failures; /* the first failure is an error, later ones warnings */
    pthread_mutex_t held_lock;
    kpc_held_dir held[KPC_STORE_HELD];
    int n_held, retired[KPC_STORE_HELD], n_retired;
};

void kpc_store_usage_add(kpc_store *st, int64_t bytes, int64_t files);
/* The held directories (store_tree.c), at open and close of the store. */
void kpc_store_tree_init(kpc_store *st);
void kpc_store_tree_close(kpc_store *st);
/* Where a record is reached from (store_tree.c): its target's directory (held, or the
 * caller's to close where owned) and its name there, "<2 hex>/<32 hex>.<ext>". */
typedef struct kpc_record_at {
    int fd;
    bool owned;
    const char *name;
} kpc_record_at;
/* Where the record of path (one the root built: v1/<target>/<2 hex>/<name>) is reached
 * from, each directory on the way made first where create, and checked: 0, or -1 with
 * errno (EPERM: a directory refused, logged; ENOENT: absent). Done with it:
 * kpc_store_record_at_done. */
int kpc_store_record_at(kpc_store *st, const char *path, bool create, kpc_record_at *out);
void kpc_store_record_at_done(kpc_record_at *a);
/* Read and fully check the record at an open fd. NULL when good, else why not (and
 * *status KPC_E_CORRUPT, or the read's failure). *sb gets the file's fstat when the
 * read got that far. */
const char *kpc_store_read_fd(int fd, const kpc_key *key, const char *target, uint32_t kind,
                              kpc_record *out, kpc_status *status, struct stat *sb);
/* Remove path only if it is still the file we opened: a fresh file renamed over a bad
 * one in the meantime must survive. NOT_REMOVED leaves errno set (the caller logs). */
enum kpc_store_removal {
    KPC_STORE_REMOVED,
    KPC_STORE_REPLACED,    /* not ours any more, or gone */
    KPC_STORE_NOT_REMOVED, /* ours, still there */
};
enum kpc_store_removal kpc_store_remove_if_same(kpc_store *st, const char *path, int fd);
/* The same for name in the directory at dirfd (a walk's). */
enum kpc_store_removal kpc_store_remove_if_same_at(int dirfd, const char *name, int fd);
/* Every file of the tree is reached from the root's held v1/ descriptor, never by
 * walking path's ancestors again (an ancestor swapped for a link in between would lead
 * elsewhere): path is one the root built. */
int kpc_store_unlink(kpc_store *st, const char *path); /* 0, or -1 (logged unless ENOENT) */

#endif /* KPC_STORAGE_STORE_PRIVATE_H */
