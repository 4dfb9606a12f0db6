/*
 * root_private.h - the cache directory's state (base/root.h), shared by the files that
 * implement it: root.c (the directory, its trust checks and its paths) and
 * root_writer.c (what a staging file's or the segment's name says of its processes).
 * Nothing else includes it.
 */
#ifndef KPC_BASE_ROOT_PRIVATE_H
#define KPC_BASE_ROOT_PRIVATE_H

#include "base/root.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct kpc_root {
    char path[PATH_MAX]; /* realpath of the cache dir */
    char v1[PATH_MAX + 8]; /* path/v1 */
    char tmp[PATH_MAX + 16]; /* path/v1/tmp */
    size_t v1_len;
    int fd, v1_fd, tmp_fd; /* held open for the life of the root */
    /* KPC_TRUST_GROUP: its members may write the tree too (docs/trust.md) */
    bool has_group;
    gid_t group;
    uid_t uid; /* geteuid() at open: the user the tree is checked for */
    atomic_bool refusal_said; /* an entry of the tree refused: said once at error level */
    atomic_uint tmp_seq;   /* staging names unique within the process */
    /* this process in staging names: its domain, pid and start time, so that a sweep can
     * tell a dead writer's file (base/root.h); recomputed in a fork child (which may be
     * in a new pid namespace) */
    _Atomic int tmp_pid;
    _Atomic uint64_t tmp_start, tmp_domain;
    int tree_errno; /* why v1/ or v1/tmp could not be made at open; 0: both there */
};

#endif /* KPC_BASE_ROOT_PRIVATE_H */
