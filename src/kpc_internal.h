/*
 * kpc_internal.h - what the modules of libkpc share, and nothing else.
 *
 * Module prefixes: kpc__ (log, config, util), kpc_key_, kpc_platform_, kpc_store_,
 * kpc_index_ (shm/index.h), kpc_map_ (context.c), kpc_prog_ (program.c).
 * None of these symbols is exported from libkpc.so (hidden visibility); the tools and
 * tests link the static library to reach them.
 */
#ifndef KPC_INTERNAL_H
#define KPC_INTERNAL_H

#include "kpc/kpc.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

/* ---- log.c ---------------------------------------------------------------------- */
enum kpc_log_level { KPC_LOG_ERROR = 1, KPC_LOG_WARN, KPC_LOG_INFO, KPC_LOG_DEBUG, KPC_LOG_TRACE };
extern int kpc__log_level; /* read racily on purpose: a level change is advisory */
void kpc__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define KPC_LOG(level, ...)                                                                    \
    do {                                                                                       \
        if ((level) <= kpc__log_level)                                                         \
            kpc__log((level), __VA_ARGS__);                                                    \
    } while (0)
/* Parse a KPC_LOG value; -1 when it names no level. */
int kpc__log_parse(const char *value);
/* Set this thread's kpc_last_log() text (copied; NULL clears it). */
void kpc__last_log_set(const char *text);

/* ---- config.c ------------------------------------------------------------------- */
typedef struct kpc_settings {
    char cache_dir[4096];
    uint64_t disk_max_bytes;
    size_t mem_max_programs;
    size_t shm_entries;
    unsigned flags;
    size_t build_threads; /* kpc_program_get_many's threads (platforms that compile in parallel) */
} kpc_settings;
/* Fill s from cfg, then the environment, then the defaults; KPC_E_INVALID (logged) for
 * a malformed value. */
kpc_status kpc__settings_resolve(const kpc_config *cfg, kpc_settings *s);
/* Parse a size with K/M/G/T suffixes (libbsd expand_number); KPC_E_INVALID if malformed or 0. */
kpc_status kpc__parse_size(const char *text, uint64_t *out);

/* ---- util.c --------------------------------------------------------------------- */
uint64_t kpc__now_ns(void);          /* CLOCK_MONOTONIC: host-wide, comparable across processes */
uint64_t kpc__wall_ns(void);         /* CLOCK_REALTIME */
/* Start time of a process in clock ticks since boot (field 22 of /proc/PID/stat); 0 if gone. */
uint64_t kpc__proc_start_time(pid_t pid);
/* True if pid runs and started at start_time: a reused pid is never taken for the original. */
bool kpc__proc_alive(pid_t pid, uint64_t start_time);
/* Read a whole file with pread into a malloc'd buffer (never mmap: a truncated file
 * would SIGBUS). KPC_E_NOT_FOUND, KPC_E_IO, KPC_E_NOMEM. max bounds the size. */
kpc_status kpc__read_fd(int fd, size_t max, void **buf, size_t *size);
/* The same, handing back the fstat it made (*st is set whenever that succeeded), so a
 * caller needs no second one: a system call is microseconds on a paravirtualized guest. */
struct stat;
kpc_status kpc__read_fd_stat(int fd, size_t max, void **buf, size_t *size, struct stat *st);
/* write() all of it, retrying EINTR and short writes; -1 with errno set on failure. */
int kpc__write_all(int fd, const void *buf, size_t size);
/* mkdir -p with mode; 0 or -1 with errno. */
int kpc__mkdir_p(const char *path, mode_t mode);
char *kpc__strdup(const char *s); /* NULL-safe */
void kpc__hex(const uint8_t *bytes, size_t n, char *out /* 2n+1 */);

/*
 * System-call seam for failure-injection tests: the store calls file-system functions
 * through kpc__sys, and a test may make the Nth call of one fail with an errno.
 */
enum kpc_sys_call { KPC_SYS_OPEN, KPC_SYS_WRITE, KPC_SYS_RENAME, KPC_SYS_MKDIR, KPC_SYS_FSYNC,
                    KPC_SYS_COUNT };
/* 0 to proceed; -1 with errno set when a test asked this call to fail. */
int kpc__sys_fault(enum kpc_sys_call call);
/* Test hook: make calls of `call` fail with err after `skip` successful ones, `count`
 * times (count 0 stops). */
void kpc__sys_fault_set(enum kpc_sys_call call, int err, unsigned skip, unsigned count);

/* ---- key.c ---------------------------------------------------------------------- */
typedef struct kpc_key {
    uint8_t bytes[16];
} kpc_key;
#define KPC_KEY_HEX 33
void kpc_key_hex(const kpc_key *key, char out[KPC_KEY_HEX]);
bool kpc_key_parse(const char *hex, kpc_key *out);
/* The key of a source for a compiler identity and a normalized target. */
kpc_status kpc_key_compute(const uint8_t compiler_id[16], const char *platform, const char *target,
                           const kpc_source *src, kpc_key *out);
/* The same in two steps: what every source of a context shares, serialized once (the
 * strings are not copied: they must outlive the prefix), then a source's key. */
typedef struct kpc_key_prefix {
    uint8_t bytes[192];
    size_t len; /* SIZE_MAX: the names were too long for bytes */
    uint8_t compiler_id[16];
    const char *platform, *target;
} kpc_key_prefix;
void kpc_key_prefix_init(kpc_key_prefix *pre, const uint8_t compiler_id[16], const char *platform,
                         const char *target);
kpc_status kpc_key_compute_prefixed(const kpc_key_prefix *pre, const kpc_source *src, kpc_key *out);

/* ---- platform_*.c: the compiler and the device runtime behind one seam ------------ */
typedef struct kpc_build {
    void *code;       /* malloc'd code object */
    size_t code_size;
    void *names;      /* malloc'd lowered-name table, kpc_prog_names_encode format */
    size_t names_size;
    char *log;        /* malloc'd compiler log, NUL-terminated; may be NULL */
} kpc_build;
void kpc_build_free(kpc_build *b);

typedef struct kpc_platform {
    const char *name; /* "amd", "nvidia", "fake" */
    /* Identity of the compiler: 16 bytes that change whenever the compiler or its libraries
     * change. Records carry it (`kpc prune --stale` compares it). cache_dir (may be NULL)
     * remembers it between processes so that a warm hit needs no compiler load. */
    kpc_status (*identity)(const char *cache_dir, uint8_t id[16], char *desc, size_t desc_cap);
    /* NULL-terminated names of environment variables the compiler turns into hidden
     * options (hipRTC: GPU_ENABLE_WAVE32_MODE...); NULL for none. They enter the key, not
     * the identity: a tool run with another environment must not call objects stale. */
    const char *const *key_env;
    /* Validate and normalize a target; KPC_E_INVALID (logged with the supported list).
     * Targets once validated for compiler `id` are remembered under cache_dir (may be
     * NULL), so that a warm process need not load the compiler to check its target. */
    kpc_status (*target_normalize)(const char *cache_dir, const uint8_t id[16], const char *target,
                                   char *out, size_t cap);
    /* Compile; KPC_E_COMPILE with b->log on a compile error. */
    kpc_status (*compile)(const char *target, const kpc_source *src, kpc_build *b);
    /* Devices. */
    kpc_status (*device_target)(int device, char *out, size_t cap);
    /* Load a code object on a device; KPC_E_CORRUPT when the runtime refuses the image
     * (a stale or foreign object), KPC_E_HIP for other refusals. */
    kpc_status (*module_load)(int device, const void *code, size_t size, void **module);
    void (*module_unload)(int device, void *module);
    kpc_status (*module_function)(int device, void *module, const char *name, void **fn);
    /* true when compiles run in parallel in one process (NVRTC); hipRTC 5.2 serialises
     * them, so kpc_program_get_many uses one thread there whatever KPC_BUILD_THREADS says */
    bool parallel_compiles;
} kpc_platform;

/* The platform this library was built for, or the one a test installed. */
const kpc_platform *kpc_platform_get(void);
/* Test hook: replace the platform (NULL restores the built-in one). */
void kpc_platform_set(const kpc_platform *p);
extern const kpc_platform kpc_platform_builtin;

/* Identity helpers shared by the platforms (identity.c). A fingerprint file in the cache
 * dir remembers (path, dev, inode, size, mtime) of each file the identity was hashed
 * from, so a later process re-stats them instead of loading the compiler. */
typedef struct kpc_identity_files {
    size_t count;
    char paths[32][512];
} kpc_identity_files;
/* Read the remembered identity for `platform`; true if every file still matches. */
bool kpc_identity_recall(const char *cache_dir, const char *platform, uint8_t id[16]);
void kpc_identity_remember(const char *cache_dir, const char *platform, const kpc_identity_files *f,
                           const uint8_t id[16]);
/* The NT_GNU_BUILD_ID of a loaded object whose path contains `needle`; found through
 * dl_iterate_phdr. Copies the path into path_out. Returns the id length, 0 if none. */
size_t kpc_identity_loaded_build_id(const char *needle, uint8_t *id, size_t cap, char *path_out,
                                    size_t path_cap);

/* Hash the build id of the loaded object whose path contains `needle` into st, remember
 * its path in files and append "needle:<first 8 bytes hex>" to desc (logged when absent). */
struct XXH3_state_s;
void kpc_identity_add_build_id(struct XXH3_state_s *st, kpc_identity_files *files, const char *needle,
                               char *desc, size_t desc_cap);

/* Targets validated before for compiler id (platform.c). */
bool kpc_targets_known(const char *cache_dir, const char *platform, const uint8_t id[16],
                       const char *target);
void kpc_targets_remember(const char *cache_dir, const char *platform, const uint8_t id[16],
                          const char *target);

/* ---- program.c ------------------------------------------------------------------ */
typedef struct kpc_kernel_slot {
    char *name;
    void *fn;
} kpc_kernel_slot;

struct kpc_program {
    atomic_uint refs;
    kpc_key key;
    void *code;
    size_t code_size;
    void *names; /* encoded lowered-name table */
    size_t names_size;
    /* device programs only */
    kpc_context *ctx;       /* not owned; the module's context outlives no program */
    void *module;
    int device;
    pthread_mutex_t kernels_lock; /* guards kernels, num_kernels */
    kpc_kernel_slot *kernels;
    size_t num_kernels, cap_kernels;
};
/* Takes ownership of b's code and names. */
kpc_status kpc_prog_new(const kpc_key *key, kpc_build *b, kpc_program **out);
/* Encode name_expressions + lowered names: [u32 n] then n x ([u32 len][bytes]) x 2. */
kpc_status kpc_prog_names_encode(const char *const *exprs, const char *const *lowered, size_t n,
                                 void **out, size_t *size);
bool kpc_prog_names_valid(const void *names, size_t size);

/* ---- store.c: the disk tree ------------------------------------------------------ */
#define KPC_STORE_MAGIC "KPCOBJ\x00\x01"
#define KPC_STORE_VERSION 2u /* 2 adds the request section; 1 (no request) is still read and
                              * still written for records that keep none */
enum kpc_record_kind { KPC_RECORD_CODE = 1, KPC_RECORD_LOG = 2 };

typedef struct kpc_record {
    kpc_key key;
    uint32_t kind;
    uint64_t created_ns;
    char target[64];
    char source_name[80];
    uint8_t compiler_id[16];
    void *payload; /* malloc'd: code, names, then the request section (CODE), or the log text */
    uint64_t code_size;
    uint64_t names_size;
    uint64_t request_size;  /* bytes of the request section (request.c) after the names; 0: none */
    const void *request;    /* writing only: the request section's bytes (not owned) */
} kpc_record;
void kpc_record_free(kpc_record *r);

typedef struct kpc_store kpc_store;
/* Open (create 0700) the tree under dir; refuse one another user owns. */
kpc_status kpc_store_open(const char *dir, uint64_t max_bytes, kpc_store **out);
void kpc_store_close(kpc_store *st);
const char *kpc_store_root(const kpc_store *st); /* realpath of dir */
/* Host-wide usage estimate, kept in the shm index where there is one. */
void kpc_store_share_usage(kpc_store *st, _Atomic uint64_t *bytes, _Atomic uint64_t *files,
                           _Atomic uint32_t *known);
/* Read and check a record; KPC_E_NOT_FOUND (absent), KPC_E_CORRUPT (failed a check:
 * removed and logged). A code hit refreshes the file's time, rate-limited. */
kpc_status kpc_store_read(kpc_store *st, const kpc_key *key, const char *target, uint32_t kind,
                          kpc_record *out);
/* Check a whole record image in memory (every check of a read; key and target may be NULL
 * for "any"). NULL when good: *out describes it and out->payload is buf with the header
 * taken off (buf now belongs to out); else why not, and buf is still the caller's. */
const char *kpc_store_parse(void *buf, size_t size, const kpc_key *key, const char *target,
                            uint32_t kind, kpc_record *out);
/* Publish atomically (O_EXCL temp file, fsync, rename); then keep the size limit. */
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
/* Walk the tree and count (exact; it also resets the shared estimate). */
kpc_status kpc_store_usage(kpc_store *st, uint64_t *bytes, uint64_t *files);
/* The estimate every write, removal and prune keeps (host-wide where there is an index);
 * one walk when none is known yet. What kpc_stats_get reports: it must not walk 100k files
 * per call (`kpc compile` calls it twice a file). */
kpc_status kpc_store_usage_estimate(kpc_store *st, uint64_t *bytes, uint64_t *files);
kpc_status kpc_store_clear(kpc_store *st, uint64_t *files_removed);

/* ---- request.c: the request a record keeps (for `kpc replay`) -------------------- */
typedef struct kpc_request {
    kpc_source src;      /* every string malloc'd and NUL-terminated */
    size_t num_env;      /* the hidden-option variables as the requester had them */
    char **env_names;
    char **env_values;   /* NULL: the variable was unset */
} kpc_request;
/* Serialize src and the values of env_names (NULL-terminated; may be NULL) now, zstd'ed,
 * into a malloc'd section. */
kpc_status kpc_request_encode(const kpc_source *src, const char *const *env_names, void **out,
                              size_t *size);
/* KPC_E_CORRUPT when the section fails any check. */
kpc_status kpc_request_decode(const void *section, size_t size, kpc_request *out);
void kpc_request_free(kpc_request *rq);

/* ---- storage/pack.c: pack files of pre-built records ----------------------------- */
typedef struct kpc_pack kpc_pack;
typedef struct kpc_pack_entry {
    kpc_key key;
    uint64_t offset, size; /* the record's bytes in the pack */
    uint32_t kind;
    char target[64];
} kpc_pack_entry;
/* Open and check a pack (header, size, index); KPC_E_CORRUPT (logged: why) when refused. */
kpc_status kpc_pack_open(const char *path, kpc_pack **out);
void kpc_pack_close(kpc_pack *p);
const char *kpc_pack_path(const kpc_pack *p);
size_t kpc_pack_count(const kpc_pack *p);
kpc_status kpc_pack_entry_get(const kpc_pack *p, size_t i, kpc_pack_entry *e);
/* Read and check one record (pread of that entry only): KPC_OK, KPC_E_NOT_FOUND,
 * KPC_E_CORRUPT (a damaged entry: logged), KPC_E_IO, KPC_E_NOMEM. */
kpc_status kpc_pack_read(kpc_pack *p, const kpc_key *key, const char *target, uint32_t kind,
                         kpc_record *out);
kpc_status kpc_pack_read_at(kpc_pack *p, size_t i, kpc_record *out);
/* Writing: create (a temp file beside path), add whole record images (checked), finish
 * (index, header, fsync, rename; *count gets the entries kept) or abort. */
typedef struct kpc_pack_writer kpc_pack_writer;
kpc_status kpc_pack_create(const char *path, kpc_pack_writer **out);
kpc_status kpc_pack_add(kpc_pack_writer *w, const void *record, size_t size);
kpc_status kpc_pack_finish(kpc_pack_writer *w, size_t *count);
void kpc_pack_abort(kpc_pack_writer *w);

/* ---- storage/pack_tier.c: the packs of KPC_PACK_PATH, read-only ------------------ */
typedef struct kpc_pack_tier kpc_pack_tier;
/* KPC_E_NOT_FOUND when pack_path (colon-separated files and directories) names no usable
 * pack; refused packs are logged and left out. */
kpc_status kpc_pack_tier_open(const char *pack_path, kpc_pack_tier **out);
void kpc_pack_tier_close(kpc_pack_tier *t);
/* The first good entry of the packs, in order; damaged entries are logged and skipped. */
kpc_status kpc_pack_tier_read(kpc_pack_tier *t, const kpc_key *key, const char *target, uint32_t kind,
                              kpc_record *out);
void kpc_pack_tier_counters(kpc_pack_tier *t, uint64_t *hits, uint64_t *misses, uint64_t *refused);

/* ---- cache.c / context.c ---------------------------------------------------------- */
typedef struct kpc_index kpc_index; /* shm/index.h */

/* Memory hits are counted on every hit, from every thread: one counter per thread slot,
 * each on a cache line of its own, summed by kpc_stats_get (a single counter was a line
 * that every hitting thread fought over). */
#define KPC_HIT_SLOTS 64
typedef struct kpc_hit_counter {
    _Atomic uint64_t n;
    char pad[56];
} kpc_hit_counter;

struct kpc_cache {
    kpc_settings settings;
    const kpc_platform *platform;
    kpc_store *store;  /* NULL: disk level off */
    kpc_index *index;  /* NULL: host index off */
    kpc_pack_tier *packs; /* NULL: no KPC_PACK_PATH (or no usable pack in it) */
    /* process counters */
    _Atomic uint64_t mem_misses, disk_hits, builds, build_failures, waits;
    atomic_int contexts;
    kpc_hit_counter mem_hits[KPC_HIT_SLOTS];
};

typedef struct kpc_map kpc_map;
struct kpc_context {
    kpc_cache *cache;
    char target[64];
    uint8_t compiler_id[16]; /* the platform's identity: stored in records */
    uint8_t key_id[16];      /* compiler_id with the hidden options: what keys hash */
    int device; /* -1: compile-only */
    kpc_map *map;
    kpc_key_prefix key_prefix; /* of key_id, the platform's name and target */
};

/* The per-context map (context.c). acquire: KPC_OK with *prog (a hit, or a wait that
 * ended in success), KPC_E_NOT_FOUND when the caller must build (then it must call
 * kpc_map_publish with *entry), or the failure a waited-for build ended in. */
typedef struct kpc_map_entry kpc_map_entry;
kpc_status kpc_map_new(size_t max_programs, kpc_map **out);
void kpc_map_free(kpc_map *m);
kpc_status kpc_map_acquire(kpc_map *m, const kpc_key *key, kpc_program **prog,
                           kpc_map_entry **entry, bool *waited);
/* Publish the builder's outcome; prog (with one reference given to the map) on KPC_OK. */
void kpc_map_publish(kpc_map *m, kpc_map_entry *entry, kpc_status st, kpc_program *prog,
                     const char *log);
size_t kpc_map_count(kpc_map *m);

/* The 16 bytes keys hash for a compiler identity: it with the values of pf->key_env now. */
void kpc__key_identity(const kpc_platform *pf, const uint8_t compiler_id[16], uint8_t key_id[16]);

/* Resolve a miss through the host index, the disk and the compiler (resolve.c). */
kpc_status kpc__resolve(kpc_context *ctx, const kpc_key *key, const kpc_source *src,
                        kpc_program **out, char **log);
/* The same, but where another process is building the key it returns KPC_E_NOT_FOUND
 * at once with *busy set, instead of sleeping (kpc_program_get_many's first pass). */
kpc_status kpc__resolve_nowait(kpc_context *ctx, const kpc_key *key, const kpc_source *src,
                               kpc_program **out, char **log, bool *busy);
/* Check a request as kpc_program_get does (logged), and compute its key (context.c). */
kpc_status kpc_context_check_source(const kpc_source *src);
void kpc_context_key(const kpc_context *ctx, const kpc_source *src, kpc_key *key);

#endif /* KPC_INTERNAL_H */
