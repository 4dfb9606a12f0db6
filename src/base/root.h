/*
 * root.h - the one owner of the cache directory (base/root.c). Every path inside it,
 * and the name of its host-index segment, come from here; the library, kpc and
 * kpc-shm-reset all use these functions.
 *
 *   <root>/                      realpath of KPC_CACHE_DIR (owned by us, writable by no one
 *                                else; 0700 when kpc makes it)
 *   <root>/v1/<target>/<2 hex>/<32 hex>.<ext>   records (storage/store.c): .co, .log
 *   <root>/v1/tmp/               staging of records, same file system as the records
 *   <root>/v1/<name>.lock        flock files: prune.lock, identity.lock
 *   <root>/v1/<memo>             what a process remembers for the next one: the
 *                                compiler's identity, the targets validated (platform/)
 *   /dev/shm/kpc-<uid>-<16 hex>  the host index's segment, "-L<layout>" after it (shm/)
 *
 * The root directory, v1/ and v1/tmp are held open (kpc_root_fd, kpc_root_v1_fd,
 * kpc_root_tmp_fd): every path built here is <root>/v1/<rel>, and kpc_root_rel gives
 * <rel>; a caller reaches it from the held v1/ one directory at a time
 * (kpc_root_open_tree_dir: never through a symbolic link, each directory checked),
 * never by walking the path again.
 * A kpc_root is immutable after open: any thread may use it.
 */
#ifndef KPC_BASE_ROOT_H
#define KPC_BASE_ROOT_H

#include "base/util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>

typedef struct kpc_root kpc_root;

/* Create dir (mkdir -p, 0700) if absent, refuse one that fails kpc_root_check_trust (or
 * a symbolic link another user owns; its mode is never changed; under KPC_TRUST_GROUP,
 * that group's owners and write bit are trusted too), take its realpath, hold it, v1/
 * and v1/tmp open, creating them (a read-only tree is still opened: it serves reads);
 * a v1/ or v1/tmp that kpc_root_open_tree_dir refuses refuses the whole directory.
 * KPC_E_INVALID (NULL or empty), KPC_E_IO (logged), KPC_E_NOMEM. */
kpc_status kpc_root_open(const char *dir, kpc_root **out);
void kpc_root_close(kpc_root *r);

/* kpc's trust rule for what it takes code from (the cache directory, a pack): st (of the
 * object as opened) owned by this user (or root, where root_may_own) and writable by no
 * one else, and every directory above path's realpath owned by us or root and writable
 * by no one else unless sticky. KPC_OK, or KPC_E_IO logged at error level naming what,
 * the path, the rule broken and the fix. */
kpc_status kpc_root_check_trust(const char *what, const char *path, const struct stat *st, bool root_may_own);

/* The realpath of an existing cache dir, without creating or checking anything (the
 * tools, which must not create a cache to report on it); false if it does not exist. */
bool kpc_root_realpath(const char *dir, char *out, size_t cap);

/* Why st (an entry of the tree below the root, as opened: a directory on the way to a
 * record where dir, else a record file) is not trusted, into why; NULL when it is: a
 * directory (a regular file), owned by this user or root and writable by no one else;
 * under KPC_TRUST_GROUP also one of that group, owned and written by its members. */
const char *kpc_root_entry_refusal(const kpc_root *r, const struct stat *st, bool dir, char *why, size_t cap);
/* Log the refusal of path (st: what stands there, why: kpc_root_entry_refusal's) with
 * the fix: at error level the first time for this root, at debug after. */
void kpc_root_refuse(kpc_root *r, const char *path, const struct stat *st, const char *why);
/* The directory name below at (a directory of the tree, held or reached this way),
 * made first where create (0700; the group's, 02770, under KPC_TRUST_GROUP), opened
 * O_PATH without following a symbolic link, and checked (kpc_root_entry_refusal): its
 * fd, or -1 with errno: EPERM when refused (logged by kpc_root_refuse; a symbolic link
 * or anything not a directory is refused too), else the call's (ENOENT: absent). path:
 * its path, for the log; out (may be NULL) gets its fstat. */
int kpc_root_open_tree_dir(kpc_root *r, int at, const char *name, bool create, const char *path,
                           struct stat *out);
/* The same without opening it: fstatat(AT_SYMLINK_NOFOLLOW) and the check; 0 or -1 (as
 * above). For a directory whose parent at is held and checked: no one but the users
 * trusted may then put anything else under its name between the check and the use. */
int kpc_root_check_tree_dir(kpc_root *r, int at, const char *name, bool create, const char *path);

const char *kpc_root_path(const kpc_root *r); /* the realpath */
const char *kpc_root_v1(const kpc_root *r);   /* <root>/v1 */
int kpc_root_fd(const kpc_root *r);           /* O_PATH | O_DIRECTORY fd of the root */
int kpc_root_v1_fd(const kpc_root *r);        /* the same of v1/, or -1 (none yet) */
int kpc_root_tmp_fd(const kpc_root *r);       /* the same of v1/tmp, or -1 (none) */
/* KPC_TRUST_GROUP's group, when one is trusted: what a new record file is given. */
bool kpc_root_group(const kpc_root *r, gid_t *group);
/* Why v1/ or v1/tmp could not be made at open (EACCES, EROFS: a tree read-only for this
 * process), or 0: what a failed write reports instead of the ENOENT it then meets. */
int kpc_root_tree_errno(const kpc_root *r);
/* The part of a path built here that follows "<root>/v1/". */
const char *kpc_root_rel(const kpc_root *r, const char *path);

/* A directory name a target may have inside v1/: no separator, no dot name, not tmp. */
bool kpc_root_target_ok(const char *target);
/* <root>/v1/<target>/<2 hex>/<32 hex>.<ext>, and its directory into dir (may be NULL).
 * -1 when it does not fit or the target is not a valid directory name. */
int kpc_root_record_path(const kpc_root *r, const kpc_key *key, const char *target, const char *ext,
                         char *out, size_t cap, char *dir, size_t dir_cap);
/* <root>/v1/<target>: a target's directory. */
int kpc_root_target_dir(const kpc_root *r, const char *target, char *out, size_t cap);
/* <root>/v1/tmp, and a fresh staging name in it for key:
 * <32 hex>.<domain>.<pid>.<start time>.<seq>.tmp: where the writer's pid means something
 * (16 hex: its node's boot and its pid namespace), its pid and start time (in clock ticks
 * since boot as kpc__proc_start_time gives it): a sweep removes a dead writer's files,
 * and judges only those of its own domain by their writer. */
const char *kpc_root_tmp_dir(const kpc_root *r);
int kpc_root_tmp_path(kpc_root *r, const kpc_key *key, char *out, size_t cap);
/* Whose staging file a name is: KPC_TMP_OURS, a name kpc_root_tmp_path made in this
 * process's domain (*pid and *start its writer's); KPC_TMP_FOREIGN, one made in another
 * domain (another node sharing the directory, a container with pids of its own: its pid
 * means nothing here); KPC_TMP_UNKNOWN, any other name (an older kpc's
 * <32 hex>.<pid>.<start>.<seq>.tmp or <32 hex>.<pid>.<seq>.tmp among them). */
enum kpc_tmp_writer { KPC_TMP_OURS, KPC_TMP_FOREIGN, KPC_TMP_UNKNOWN };
enum kpc_tmp_writer kpc_root_tmp_writer(kpc_root *r, const char *name, int *pid, uint64_t *start);
/* <root>/v1/<name>.lock, opened (created 0600) and flock'ed: exclusive, waiting unless
 * nowait (EINTR retried). The fd to close (which unlocks), or -1 with errno (EWOULDBLOCK:
 * another holds it) and *call the call that failed ("open" or "flock"); path (may be
 * NULL) gets the lock's path for the caller's message. */
int kpc_root_lock(const kpc_root *r, const char *name, bool nowait, const char **call, char *path,
                  size_t path_cap);

/* A memo file v1/<name> opened from the held v1/ (open(2) flags; O_CLOEXEC and
 * O_NOFOLLOW added), renamed and removed there: the memos are reached like the records,
 * never through the ancestors again. -1 with errno. */
int kpc_root_open_memo(const kpc_root *r, const char *name, int flags, mode_t mode);
/* The same opened for reading as a stdio stream; NULL (with errno) when it cannot be. */
FILE *kpc_root_read_memo(const kpc_root *r, const char *name);
int kpc_root_rename_memo(const kpc_root *r, const char *from, const char *to);
int kpc_root_unlink_memo(const kpc_root *r, const char *name);

/* The directory's part of the host-index segment name of a root's realpath, in this
 * process's pid namespace: "/kpc-<uid>-<16 hex>" (shm/ appends its layout:
 * kpc_index_segment_name). */
void kpc_root_segment_name(const char *root_path, char *out, size_t cap);

#endif /* KPC_BASE_ROOT_H */
