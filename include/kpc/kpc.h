/*
 * kpc.h - the kpc code-object cache: the whole public C API.
 *
 * kpc makes every runtime-compiled GPU kernel compile once per host. An application
 * asks kpc_program_get() for the code object of a HIP source; kpc answers from
 *   1. the context's in-memory map (this process, this device or target),
 *   2. the host-wide index in POSIX shared memory plus the code object on disk,
 *   3. or, on a miss everywhere, one compile that every other thread and process
 *      asking for the same source at the same time waits for.
 *
 * Conventions
 *   - Every function that can fail returns a kpc_status; KPC_OK is 0.
 *   - Handles are opaque; every function is safe to call from several threads.
 *   - A cache level that fails (unwritable directory, full disk, damaged shared-memory
 *     index) is logged and skipped: the caller still gets its program. Only a bad
 *     request fails a call.
 *
 * Caveats
 *   - fork(): a child must not use a kpc_cache opened by its parent; open its own.
 *     A program or context handle copied across fork() is not valid in the child:
 *     kpc_program_get and kpc_context_create* called there return KPC_E_INVALID (logged).
 *     kpc_context_destroy and kpc_cache_close there only free the child's memory.
 *   - Threads: hipRTC (ROCm 5.2) serialises compiles inside one process. kpc builds
 *     distinct sources from several threads correctly, but only one compiles at a
 *     time; for parallel builds use several processes (see `kpc compile -j`).
 *   - Stale segments: a host index left by a crashed process is repaired on the next
 *     attach; one that fails validation is ignored (disk only) until `kpc-shm-reset`.
 *     A lock of the index that does not answer within KPC_SHM_LOCK_TIMEOUT_MS (5000),
 *     or a segment truncated under the process, turns the index off for that process
 *     (logged once, disk only). A process building a source is waited for at most
 *     KPC_BUILD_WAIT_MAX_MS (600000, 10 minutes) from its claim: a stopped or hung
 *     builder then sends the waiters to compile for themselves (kpc_stats.wait_timeouts).
 *   - Files on disk: a header that appears where the compiler would have found it
 *     before the one it read (an earlier -I directory) is not noticed until the files
 *     it did read change, as with ccache's direct mode; remove the cached objects
 *     (`kpc clear`) after adding such a shadowing header.
 *   - Release: kpc_program_release() drops the caller's reference; the code object,
 *     lowered names and kernels stay valid until the last reference is gone, even if
 *     the context's map has evicted the program.
 */
#ifndef KPC_KPC_H
#define KPC_KPC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define KPC_API __attribute__((visibility("default")))
#else
#define KPC_API
#endif

#define KPC_VERSION_MAJOR 1
#define KPC_VERSION_MINOR 0
#define KPC_VERSION_PATCH 0

/*
 * The kernel handle type of the platform, as HIP declares it. Both declarations are
 * the same type HIP uses, so including <hip/hip_runtime.h> before or after this header
 * is fine (C11 and C++ allow a repeated identical typedef).
 */
#if defined(KPC_PLATFORM_NVIDIA) || defined(__HIP_PLATFORM_NVIDIA__) || defined(__HIP_PLATFORM_NVCC__)
typedef struct CUfunc_st *hipFunction_t;
#else
typedef struct ihipModuleSymbol_t *hipFunction_t;
#endif

/* Statuses are ABI: new ones are appended, none is ever renumbered. */
typedef enum kpc_status {
    KPC_OK = 0,
    KPC_E_INVALID = 1,   /* bad argument, unknown or malformed target, bad environment value */
    KPC_E_NOMEM = 2,     /* out of memory */
    KPC_E_COMPILE = 3,   /* the source did not compile; the log is in kpc_last_log() */
    KPC_E_NO_DEVICE = 4, /* no such GPU, or no GPU at all */
    KPC_E_HIP = 5,       /* the HIP (or CUDA) runtime refused: module load, device query */
    KPC_E_NOT_FOUND = 6, /* no such kernel or name expression */
    KPC_E_IO = 7,        /* a file-system call failed */
    KPC_E_SHM = 8,       /* the shared-memory index could not be used */
    KPC_E_CORRUPT = 9,   /* a cached file or index failed its checks */
    KPC_E_UNAVAILABLE = 10 /* the compiler or runtime library could not be loaded */
} kpc_status;

typedef struct kpc_cache kpc_cache;     /* one per process: cache dir + host shm index */
typedef struct kpc_context kpc_context; /* one per device (or compile target): in-memory maps */
typedef struct kpc_program kpc_program; /* a built code object, and its module on a device context */

/* kpc_config.flags */
#define KPC_NO_DISK 0x1u /* no disk tree (and so no host index: it shares objects through disk) */
#define KPC_NO_SHM 0x2u  /* no host index: processes share the disk tree but may build twice */
#define KPC_NO_SOURCES 0x4u /* records keep no request (source, options, headers), so `kpc
                             * replay` cannot rebuild them; also KPC_KEEP_SOURCES=0 */

typedef struct kpc_config {
    size_t struct_size;        /* sizeof(kpc_config): fields past it are treated as unset */
    const char *cache_dir;     /* NULL: KPC_CACHE_DIR, else $XDG_CACHE_HOME/kpc or ~/.cache/kpc;
                                * either with a control character (a newline, a tab): refused */
    uint64_t disk_max_bytes;   /* 0: KPC_CACHE_MAX_SIZE, else 2G */
    size_t mem_max_programs;   /* 0: KPC_MEM_MAX_PROGRAMS, else 256 (per context) */
    size_t shm_entries;        /* 0: KPC_SHM_ENTRIES, else 65536 (for a newly created index) */
    unsigned flags;            /* KPC_NO_DISK, KPC_NO_SHM, KPC_NO_SOURCES; KPC_DISABLE=1 sets
                                * the first two; any other bit: KPC_E_INVALID */
    /* NULL: KPC_REMOTE, else no cluster tier. A Redis shared by the hosts of a cluster,
     * redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] or redis+unix:///path: a key is then
     * compiled once per cluster (docs/cluster.md). "" turns it off. */
    const char *remote;
    size_t build_threads;      /* 0: KPC_BUILD_THREADS, else 1: threads kpc_program_get_many
                                * compiles with (1 to 256), where the compiler builds in parallel
                                * inside a process (NVRTC; hipRTC 5.2 does not: 1 is used there) */
} kpc_config;

/*
 * The ABI rule (docs/design.md, "The ABI"). Never changes: a function's signature, an
 * enum's values, the order, type and meaning of an existing struct field. May grow: a
 * struct the library fills or reads grows only at its end, and only where every call
 * that passes it says how big the caller's copy is: kpc_config by its struct_size field
 * (fields past it are unset), kpc_stats by the size kpc_stats_get_sized is given (the
 * library writes no byte past it, and zeroes what it does not know). New statuses are
 * appended. Fields are never removed or reused: a retired one reads 0.
 */
/* sizeof(kpc_stats) in 1.0.0: mem_hits to disk_files, what the unsized 1.0.0 symbol
 * kpc_stats_get still fills for programs built against that header */
#define KPC_STATS_SIZE_1_0 136u
typedef struct kpc_stats {
    /* this process */
    uint64_t mem_hits;       /* requests answered by a context's in-memory map */
    uint64_t mem_misses;     /* requests that went past it */
    uint64_t disk_hits;      /* misses answered by a valid file on disk */
    uint64_t builds;         /* compiles run by this process that succeeded */
    uint64_t build_failures; /* compiles run by this process that failed */
    uint64_t waits;          /* requests that waited for another thread's or process's build */
    /* this host (from the shared-memory index; 0 where it is off) */
    uint64_t lookups, hits, host_builds, host_build_failures, host_waits, takeovers, evictions,
        entries, capacity;
    /* the disk tree (0 where it is off): the estimate every write, removal and prune keeps,
     * host-wide with the index; without it (KPC_NO_SHM) other processes' writes show only
     * after this process's next prune. `kpc stats` counts the files exactly. */
    uint64_t disk_bytes, disk_files;
    /* this host (0 where the index is off): requests that found a live builder at work for
     * longer than KPC_BUILD_WAIT_MAX_MS (a stopped or hung process; default 10 minutes)
     * and built for themselves instead of waiting on */
    uint64_t wait_timeouts;
    /* the cluster tier, this process (0 where it is off): records fetched (hits), keys
     * absent that this process took the lease of (misses), builds published under a
     * lease, waits for another host's
     * build, leases taken over from a dead holder, Redis errors (each switches the tier
     * off for a back-off period), and fetched records refused by the checks */
    uint64_t remote_hits, remote_misses, remote_builds, remote_waits, remote_takeovers,
        remote_errors, remote_refused;
    /* this process: requests answered by a pack of KPC_PACK_PATH, and pack entries refused
     * as damaged (each then built) */
    uint64_t pack_hits, pack_refused;
    /* this process: requests answered with a compile error kept in the cache (its log
     * read back from any tier, another host's through the cluster tier included; no
     * compile run; build_failures counts the compiles that failed) */
    uint64_t cached_failures;
    /* this process: requests answered by the shared directory of KPC_SHARED_DIR, and
     * records there refused as damaged (each then built, or read from a tier below) */
    uint64_t shared_hits, shared_refused;
    /* this process: records from another process (any tier) refused because they were
     * built from another request under the same key (a collision: each then built) */
    uint64_t request_mismatches;
} kpc_stats;

typedef struct kpc_source {
    const char *code;           /* HIP C++ source text; required */
    size_t code_len;            /* 0: strlen(code) */
    const char *name;           /* file name used in diagnostics; may be NULL */
    const char *const *options; /* hipRTC options, e.g. "-O3", "-DN=4"; not the target */
    size_t num_options;
    const char *const *header_names; /* as hiprtcCreateProgram's includeNames */
    const char *const *header_sources;
    size_t num_headers;
    const char *const *name_expressions; /* as hiprtcAddNameExpression, e.g. "k<float>" */
    size_t num_name_expressions;
} kpc_source;

/**
 * Name a status ("KPC_E_COMPILE"); never NULL, "KPC_E_UNKNOWN" for a value not listed.
 */
KPC_API const char *kpc_status_str(kpc_status s);

/**
 * Open the cache of this process.
 * @param cfg  NULL or a config whose unset fields (0/NULL) fall back to the environment
 *             (KPC_CACHE_DIR, KPC_DISABLE, KPC_CACHE_MAX_SIZE, KPC_MEM_MAX_PROGRAMS,
 *             KPC_SHM_ENTRIES, KPC_LOG, KPC_REMOTE and its KPC_REMOTE_* companions) and
 *             then the defaults.
 * @param out  receives the cache.
 * @return KPC_OK; KPC_E_INVALID for a NULL out, a bad struct_size, a config field out
 *         of its range (flags with a bit not defined here; build_threads, mem_max_programs
 *         or shm_entries outside their variable's range, such as build_threads 257; a
 *         cache_dir with a control character), logged naming the field, or a malformed
 *         environment value: every KPC_* variable of kpc(1)'s ENVIRONMENT is checked,
 *         whether this cache reads it or not, and so is the cluster tier's URL
 *         (cfg->remote, else KPC_REMOTE: an unknown scheme, a bad port); each malformed
 *         one is logged with the variable's name and the form it takes; KPC_E_NOMEM.
 *         A cache directory or index that cannot be used is not an error: it is logged
 *         and that level is off for this cache.
 */
KPC_API kpc_status kpc_cache_open(const kpc_config *cfg, kpc_cache **out);

/** Close the cache. Every context must be destroyed first. NULL is ignored. With a
 *  cluster tier (KPC_REMOTE), records it answered are copied to the local disk cache
 *  after kpc_program_get returns; the close first makes the copies still pending (a
 *  process that exits without closing only misses them). */
KPC_API void kpc_cache_close(kpc_cache *cache);

/**
 * Create a context for HIP device hip_device: programs are compiled for its target
 * (gcnArchName with feature flags, or sm_XX on the NVIDIA platform) and loaded on it.
 * @return KPC_OK; KPC_E_INVALID (NULL argument, negative device, a fork child);
 *         KPC_E_NO_DEVICE (no GPU, or no such device; on the NVIDIA platform also no CUDA
 *         driver installed);
 *         KPC_E_UNAVAILABLE (the HIP runtime could not be loaded); KPC_E_HIP; KPC_E_NOMEM.
 */
KPC_API kpc_status kpc_context_create(kpc_cache *cache, int hip_device, kpc_context **out);

/**
 * Create a compile-only context for a named target; needs no GPU.
 * @param target "gfx90a", "gfx90a:xnack-", "gfx90a:sramecc+:xnack-" (AMD) or "sm_90",
 *               "compute_90" (NVIDIA). Validated against the compiler's own list before
 *               any compile; features are put in canonical order.
 * @return KPC_OK; KPC_E_INVALID (NULL, a fork child, unknown target or feature: the log
 *         lists the supported targets); KPC_E_UNAVAILABLE (the compiler could not be loaded); KPC_E_NOMEM.
 */
KPC_API kpc_status kpc_context_create_for_target(kpc_cache *cache, const char *target,
                                                 kpc_context **out);

/** The context's normalized target ("gfx90a:sramecc+:xnack-"); NULL for NULL. */
KPC_API const char *kpc_context_target(const kpc_context *ctx);

/** Destroy a context: drops the map's references; programs still held stay valid. */
KPC_API void kpc_context_destroy(kpc_context *ctx);

/**
 * Get the program for this source on this context: from the in-memory map, else the
 * host index and disk, else built once (once per host, however many threads and
 * processes ask at once). On a device context the module is loaded.
 * Files the compile reads from disk (headers found through -I, -isystem, -include or a
 * quoted include, host headers such as <type_traits>) are recorded with their content
 * digests and checked on every get, the in-memory hit included: a file changed, replaced
 * or gone is a miss and a rebuild, never a stale object. An option naming a relative
 * path makes the working directory part of the request. A compile whose files changed
 * within a second of it, or whose files the compiler could not tell (a header not
 * found), is returned but not cached. A request that reads no file is as fast as before.
 * @param out receives a reference; release it with kpc_program_release().
 * @return KPC_OK; KPC_E_INVALID (NULL argument, empty source or one whose first byte is
 *         NUL, an option that sets the target, a cache opened by the parent of this fork
 *         child, a device context asked for -fgpu-rdc where hipRTC gives bitcode);
 *         KPC_E_COMPILE (*out is NULL, kpc_last_log() holds the compiler's log);
 *         KPC_E_HIP (the runtime refused a freshly built object); KPC_E_UNAVAILABLE;
 *         KPC_E_NOMEM.
 */
KPC_API kpc_status kpc_program_get(kpc_context *ctx, const kpc_source *src, kpc_program **out);

/**
 * Get the programs of n sources on this context at once, building side by side with the
 * other processes of the host that ask for the same sources. It first claims and builds
 * (or reads) every key that no process on the host is building, in list order, then
 * waits for the keys other processes were building. So P processes (MPI ranks) that call
 * it with the same K sources in the same order build the K sources in parallel, each
 * taking the next unclaimed key, where K calls of kpc_program_get would build them one
 * after another while the others wait. With a cluster tier (KPC_REMOTE), a key that
 * another host is building is passed over the same way and waited for at the end, so
 * the hosts build side by side too. A source repeated in the list is resolved once.
 * With KPC_BUILD_THREADS (kpc_config.build_threads) = T > 1 and a compiler that builds in
 * parallel inside a process (NVRTC; not hipRTC 5.2, where T is taken as 1), T threads
 * of this process build at once.
 * @param srcs         n requests (as for kpc_program_get).
 * @param out_programs n slots: a reference for each request that succeeded (release each
 *                     with kpc_program_release()), NULL for one that failed.
 * @param out_statuses n slots for each request's own status (as kpc_program_get would
 *                     return it); may be NULL.
 * @return KPC_OK when every request succeeded (n = 0 included, whatever the other
 *         arguments); else the status of the first request that failed (the others are
 *         resolved all the same: one failing source does not fail the rest), and
 *         kpc_last_log() holds that request's log; KPC_E_INVALID for a NULL ctx, srcs or
 *         out_programs with n > 0 (every status KPC_E_INVALID), and for an n so large that
 *         its allocations would overflow (nothing written); KPC_E_NOMEM.
 */
KPC_API kpc_status kpc_program_get_many(kpc_context *ctx, const kpc_source *srcs, size_t n,
                                        kpc_program **out_programs, kpc_status *out_statuses);

/** Take another reference to prog (for handing it to another owner). */
KPC_API kpc_status kpc_program_retain(kpc_program *prog);

/** Drop a reference. NULL is ignored. The last one frees the program and its module. */
KPC_API void kpc_program_release(kpc_program *prog);

/**
 * The code object bytes (AMDGPU ELF, cubin or PTX; LLVM bitcode for -fgpu-rdc where
 * hipRTC gives it, ROCm 5.3 and later, which only a compile-only context hands out);
 * valid while a reference is held, aligned as malloc aligns (an ELF image's headers may
 * be read in place).
 * @param size receives the size; may be NULL. Returns NULL for NULL prog.
 */
KPC_API const void *kpc_program_code(const kpc_program *prog, size_t *size);

/**
 * The lowered (mangled) name of a name expression given in kpc_source.name_expressions,
 * valid while a reference is held.
 * @return the lowered name; "" (empty, not NULL) for an expression the compiler accepted
 *         but gave no lowered name for (hipRTC 5.2: one that does not name a __global__
 *         function or template instantiation as written, e.g. a cast, refused with
 *         HIPRTC_ERROR_NAME_EXPRESSION_NOT_VALID; `kpc compile --name-expr` prints the
 *         compiler's reason); NULL if the expression was not given (or prog is NULL).
 *         An expression the compiler rejects while compiling (an undeclared name, a
 *         template argument that is no type) fails the request instead: kpc_program_get
 *         returns KPC_E_COMPILE and kpc_last_log() holds the compiler's diagnostic.
 */
KPC_API const char *kpc_program_lowered_name(const kpc_program *prog, const char *name_expression);

/**
 * Get a kernel of a program on a device context; loaded once, then from the kernel map.
 * @param kernel_name a lowered name or an extern "C" name.
 * @return KPC_OK; KPC_E_INVALID (NULL argument, compile-only context, a program of another
 *         context); KPC_E_NOT_FOUND (no such kernel); KPC_E_HIP.
 */
KPC_API kpc_status kpc_kernel_get(kpc_context *ctx, kpc_program *prog, const char *kernel_name,
                                  hipFunction_t *out);

/**
 * The compiler's log of the last failed kpc_program_get on this thread ("" if none).
 * Valid until the next kpc call on this thread.
 */
KPC_API const char *kpc_last_log(void);

/**
 * Counters of this process and, from the host index, of this host, into the first size
 * bytes of *out (size: the caller's sizeof(kpc_stats)); no byte past them is written, and
 * bytes past the library's own kpc_stats read 0. kpc_stats_get(cache, out) is this call
 * with sizeof *out.
 * @return KPC_OK; KPC_E_INVALID for NULL arguments or a size of 0.
 */
KPC_API kpc_status kpc_stats_get_sized(kpc_cache *cache, kpc_stats *out, size_t size);
/* The 1.0.0 entry point, kept for programs built against that header: it fills only the
 * 1.0.0 fields (KPC_STATS_SIZE_1_0 bytes). Source that calls kpc_stats_get gets the sized
 * call through the macro below. */
KPC_API kpc_status kpc_stats_get(kpc_cache *cache, kpc_stats *out);
#define kpc_stats_get(cache, out) kpc_stats_get_sized((cache), (out), sizeof *(out))

#ifdef __cplusplus
}
#endif
#endif /* KPC_KPC_H */
