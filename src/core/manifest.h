/*
 * manifest.h - the files a compile read, and the manifests that map a request to its
 * outcomes (ccache's direct mode, for runtime compiles).
 *
 * A request key (key.c) covers the source, the in-memory headers, the options, the
 * target and the compiler. It does not cover the files the compiler read from disk
 * (a header found through -I, -isystem, -include or a host system header). Those are
 * recorded after each compile as a dependency list, kpc_deps: for every file its
 * absolute path as the compiler opened it (symlinks not resolved, so a re-pointed link
 * is seen), its identity (device, inode, size, mtime and ctime in nanoseconds) and the
 * XXH3-128 digest of its content. Beside them, the lookups that missed: for each header
 * found in a search directory, the same name in every directory searched before that one
 * (platform/options.h gives the order), each an absent entry. A file created there later
 * would shadow the header at the next compile, so its appearance is a mismatch.
 *
 * A manifest, stored under the request key, holds up to KPC_MANIFEST_MAX_ENTRIES entry
 * lists, newest first, one per distinct outcome, each leading to the key of its
 * outcome's record (the object key: the request key mixed with every (path, digest) of
 * the files read; absent entries do not change the bytes, so they are not in it).
 * A lookup takes the first entry whose files all still match; none: a miss, never a
 * stale hit. A request whose compile read no such file has no manifest at all: its
 * record lies under the request key itself, as before manifests existed.
 *
 * The check (kpc_manifest_deps_match): a missing file, another size or another content
 * is a mismatch, and so is anything at the path of an absent entry. A stat whose device,
 * inode, size, mtime and ctime equal the recorded ones vouches for the content (no
 * re-hash, as ccache does), unless the file changed within the last second
 * (KPC_MANIFEST_RECENT_NS): a file system with coarse timestamps could give an edit made
 * now the recorded times. Where the identity cannot decide (another inode, as behind a
 * switched symlink; a recent change), the content hash does. Each directory is opened
 * once per check and its files are stat'ed relative to it (one fstatat each, nothing
 * allocated, nothing hashed unless a stat says the file changed).
 * Recording (kpc_manifest_deps_record) refuses a file modified within that second
 * before the compile started, or during it: the compiler may have read other bytes
 * than the ones hashed after it ("file modified too recently", ccache's race rule);
 * that outcome is then not cached at all. A file that now stands where a lookup missed
 * and changed within that window is refused alike (it may have appeared mid-compile).
 *
 * Every structure here is immutable once built, so threads share it without a lock.
 */
#ifndef KPC_CORE_MANIFEST_H
#define KPC_CORE_MANIFEST_H

#include "base/util.h" /* kpc_key */
#include "kpc/kpc.h"
#include "platform/options.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KPC_MANIFEST_RECENT_NS 1000000000ull /* one second: see above */
#define KPC_MANIFEST_MAX_ENTRIES 16          /* entry lists per manifest; the oldest goes */
#define KPC_MANIFEST_MAX_FILES 65536         /* files per entry list */
#define KPC_MANIFEST_MAX_BYTES (64u << 20)   /* an encoded manifest */
/* The bytes' constants (docs/file-format.md), read by core/manifest_decode.c and written
 * by core/manifest_record.c. */
#define KPC_MANIFEST_MAGIC "KPCMANI1" /* the magic stays; the version after it counts */
#define KPC_MANIFEST_VERSION 2u
#define KPC_MANIFEST_FILE_READ 0u
#define KPC_MANIFEST_FILE_ABSENT 1u
#define KPC_MANIFEST_PATH_MAX 4095u /* a path's bytes */

/* The outcome of a manifest's newest entry travels in the manifest's record (its second
 * part: core/manifest_seen.h) up to this size of its payload; a larger one is read from
 * its own record, where reading costs its bytes more than the second open does. */
#define KPC_MANIFEST_CARRY_MAX (1u << 20)

/* One file a compile read, as it was when the outcome was recorded, or one lookup that
 * missed (absent: only the path means anything): what the recorder fills, and what a
 * list's file reads as (kpc_manifest_file_at). */
typedef struct kpc_manifest_file {
    const char *path;  /* absolute, as the compiler opened it; NOT NUL-terminated when read back */
    size_t path_len;
    uint32_t dir_len;  /* path[dir_len] is its last '/': the directory the check opens */
    bool absent;       /* a lookup that missed: nothing may stand at path */
    uint64_t dev, ino; /* the identity: with the size and the times below */
    uint64_t size;
    int64_t mtime_ns, ctime_ns;
    uint8_t digest[16]; /* XXH3-128 of the content, canonical (big-endian) bytes */
} kpc_manifest_file;

/* The fixed part of a file read, as a list's bytes hold it after its path and kind
 * (docs/file-format.md), every number little-endian: the codec writes and reads it, and
 * a check reads it in place, so its layout has this one home. */
typedef struct kpc_manifest_fixed {
    uint8_t dev[8], ino[8], size[8], mtime_ns[8], ctime_ns[8];
    uint8_t digest[16];
} kpc_manifest_fixed;

/* Where one file of a list lies in the list's bytes, found when the codec read them. */
typedef struct kpc_manifest_at {
    uint32_t path;     /* its path's offset from the list's first byte */
    uint16_t path_len; /* at most 4095: the codec's bound */
    uint16_t dir_len;  /* path[dir_len] is its last '/' */
    uint32_t fixed;    /* its kpc_manifest_fixed's offset; 0: a lookup that missed */
} kpc_manifest_at;

/*
 * The files of one outcome, in the compiler's order, kept as their bytes in a manifest
 * (docs/file-format.md, the files of an entry), and those bytes read once, when the list
 * is made (recorded, decoded, encoded): at[i] says where the i-th file lies in them
 * (12 bytes a file, so the list a new process decodes for its first hit fits in memory
 * it has written already), a check reads each file from there without parsing again, and
 * a list found through a manifest keeps that manifest's own bytes (nothing copied per
 * file). Its bytes follow the struct in one allocation (a copy), or lie in block
 * (encoded; taken out of a manifest whole): kpc_manifest_deps_free frees them and at. A
 * list whose block is NULL and whose bytes are not its tail borrows them
 * (kpc_manifest_lookup's tail): freeing it reads none of them.
 */
typedef struct kpc_deps {
    size_t count;          /* files, read and absent */
    size_t size;           /* bytes at files */
    const uint8_t *files;  /* count encoded files */
    kpc_manifest_at *at;   /* where each lies in files (owned) */
    void *block;           /* owned bytes other than this struct's tail (NULL: none) */
} kpc_deps;

/* File i of d as read: its path in d's bytes, its fields copied out of them. */
void kpc_manifest_file_at(const kpc_deps *d, size_t i, kpc_manifest_file *f);

/* Outcome kinds an entry leads to (the record kinds of the store). */
enum kpc_manifest_outcome { KPC_MANIFEST_CODE = 1, KPC_MANIFEST_LOG = 2 };

typedef struct kpc_manifest_entry {
    kpc_key object;   /* the key of the outcome's record */
    uint32_t outcome; /* enum kpc_manifest_outcome */
    kpc_deps deps;    /* its files, in the manifest's bytes */
} kpc_manifest_entry;

typedef struct kpc_manifest {
    size_t count; /* newest first */
    void *block;  /* the allocation the entries point into, when the manifest owns it */
    kpc_manifest_entry entries[KPC_MANIFEST_MAX_ENTRIES];
} kpc_manifest;

/*
 * Record the files a compile read, and the lookups that missed. paths and absent: as
 * the compiler named them; a relative one is taken relative to cwd (the working
 * directory of the compile). Each file is stat'ed and hashed now; an absent path that
 * is not missing now is left out (or refuses the outcome, see above).
 * compile_start_ns: CLOCK_REALTIME when the compile began.
 * KPC_OK with *out (NULL when paths is empty); KPC_E_NOT_FOUND when a file is gone or
 * unreadable, or was modified too recently to be trusted (logged at debug): the
 * outcome must not be cached; KPC_E_NOMEM; KPC_E_INVALID (a relative path and no cwd,
 * too many files).
 */
kpc_status kpc_manifest_deps_record(const char *const *paths, size_t n, const char *const *absent,
                                    size_t n_absent, const char *cwd, uint64_t compile_start_ns,
                                    kpc_deps **out);
/* True if every file still matches (see the top of this file). NULL or empty: true. */
bool kpc_manifest_deps_match(const kpc_deps *deps);
/* Whether what a compile read outside its request is as it was: its files (deps, may
 * be NULL) and, where cwd is not NULL, the working directory, whose digest it is
 * (kpc__cwd_digest). The map asks it of a hit (core/map.h, kpc_map_current). */
bool kpc_manifest_current(const kpc_deps *deps, const uint8_t *cwd);
/* What a compile read (its platform's report) and when it began. */
typedef struct kpc_manifest_build {
    const char *const *paths; /* the files read, as the compiler named them */
    size_t n;
    const char *const *absent; /* the lookups that missed */
    size_t n_absent;
    const char *cwd;     /* what a relative path is taken against (NULL: unknown) */
    uint64_t started_ns; /* CLOCK_REALTIME when the compile began */
} kpc_manifest_build;
/* A copy (one allocation); NULL for NULL or on ENOMEM (then *ok is false). */
kpc_deps *kpc_manifest_deps_copy(const kpc_deps *deps, bool *ok);
void kpc_manifest_deps_free(kpc_deps *deps);

/* The key of the outcome recorded with deps: XXH3-128 of the request key and each
 * (path, digest). Without deps (NULL or empty) it is the request key itself. */
void kpc_manifest_object_key(const kpc_key *request, const kpc_deps *deps, kpc_key *out);

/* Serialize a manifest (the payload of a KPC_RECORD_MANIFEST record; format in
 * docs/file-format.md; core/manifest_record.c), its entries written from their bytes as
 * they lie. *buf is malloc'd. */
kpc_status kpc_manifest_encode(const kpc_manifest *m, void **buf, size_t *size);
/* Parse and check one; its entries point into buf, which must outlive them (or be handed
 * to the manifest: out->block, freed with it). KPC_E_CORRUPT for anything malformed
 * (never reads past size); KPC_E_NOT_FOUND for a manifest of an older format (its
 * entries lack the identities and the absent entries this check relies on: a miss,
 * rewritten by the next build). On failure *out is empty (out->block NULL). */
kpc_status kpc_manifest_decode(const void *buf, size_t size, kpc_manifest *out);
void kpc_manifest_free(kpc_manifest *m);
/* The first entry (newest first) whose files all match now; NULL if none. */
const kpc_manifest_entry *kpc_manifest_match(const kpc_manifest *m);
/* Entry e's files as a list of their own, for a program to keep: the manifest's bytes
 * themselves when e is its only entry as decoded (then m is only to be freed), else a
 * copy of e's. NULL on ENOMEM. */
kpc_deps *kpc_manifest_take(kpc_manifest *m, const kpc_manifest_entry *e);
/*
 * The two calls a request makes, one before its build (core/manifest.c) and one after
 * (core/manifest_record.c).
 * Lookup: the manifest under the request key, size bytes at bytes, followed by tail
 * bytes, inside the allocation block (malloc'd; taken in every case), decoded into *m
 * (statuses as
 * kpc_manifest_decode); with match, the first entry whose files all match now: found,
 * its object key, outcome and files (taken, kpc_manifest_take; owned by the caller), and
 * *m freed: a request that found its outcome builds nothing (and one whose record is
 * then refused reads the manifest again for its build: a rare path). No entry matched:
 * *m is the manifest as read, for the build to extend, and the tail is not the caller's;
 * its entries own nothing then (where their files lie, which only a check reads, is let
 * go): all it owns is m->block, their bytes. So with match NULL.
 * A match with a tail (the record a manifest's record carries) gives the allocation
 * back: match->block, the tail's bytes at match->tail in it. Where the list kept the
 * manifest's bytes whole (its only entry), they stay where they were read, before the
 * tail (borrowed): the list is freed no later than the allocation, or given it
 * (deps->block = match->block), so a new process's hit moves and copies neither.
 * Otherwise the tail is moved to the head of the allocation, which shrinks to it.
 * Record a build: the files b names as they are now (kpc_manifest_deps_record) in *deps
 * (owned), the key its outcome goes under (kpc_manifest_object_key) in *object, and *m,
 * as a lookup left it (or empty), with (object, outcome, deps) put first encoded into
 * *buf (malloc'd): an entry with the same object key is replaced, and past
 * KPC_MANIFEST_MAX_ENTRIES the oldest is dropped. *m is freed in every case. Statuses as
 * kpc_manifest_deps_record (then *object is the request key and nothing is to be
 * written).
 */
typedef struct kpc_manifest_match_out {
    bool found;
    kpc_key object;
    uint32_t outcome;
    kpc_deps *deps;
    void *block;   /* the allocation, the caller's (NULL: no tail, or no match) */
    void *tail;    /* the tail's bytes, in block */
    bool borrowed; /* deps' bytes lie in block, before the tail */
} kpc_manifest_match_out;
kpc_status kpc_manifest_lookup(void *block, const void *bytes, size_t size, size_t tail, kpc_manifest *m,
                               kpc_manifest_match_out *match);
kpc_status kpc_manifest_record_build(kpc_manifest *m, const kpc_key *request, const kpc_manifest_build *b,
                                     uint32_t outcome, kpc_deps **deps, kpc_key *object, void **buf, size_t *size);

#endif /* KPC_CORE_MANIFEST_H */
