/*
 * chaos_worker.h - the chaos test's two sides (tests/test_chaos.c conducts,
 * chaos_worker.c works): the storm's shared memory, its settings, the sources and their
 * reference bytes, and a worker's loop.
 *
 * Workers loop: a fresh context (now and then a fresh cache handle), a random source, the
 * object compared with the reference bytes the platform compiled without any cache.
 * Workers also die at chosen phases (targeted kills): inside the compile (the index slot
 * claimed), holding the index's table lock, and at the library's system calls where the
 * fault table lets a test stop them (the syscall hook).
 */
#ifndef KPC_TEST_CHAOS_WORKER_H
#define KPC_TEST_CHAOS_WORKER_H

#include "support.h"

#define MAX_PROCS 64
#define MAX_SOURCES 128
#define REF_MAX (512u * 1024u)

/* Where a worker asked to die (targeted kills); the figures count kills per phase. */
enum phase { PH_RANDOM, PH_COMPILE, PH_TABLE_LOCK, PH_MID_WRITE, PH_BEFORE_FSYNC, PH_BEFORE_RENAME,
             PH_AFTER_RENAME, PH_PRUNE_LOCK, PH_COUNT };

typedef struct worker_slot {
    _Atomic int pid;
    _Atomic int dying_at; /* the phase the worker is killing itself at (PH_RANDOM: none) */
    _Atomic int armed;    /* a phase asked for by the current request */
    _Atomic uint64_t heartbeat_ns;
    _Atomic int source; /* the source of the request under way */
} worker_slot;

typedef struct shared {
    _Atomic int stop;
    _Atomic uint64_t requests, wrong, errors, compile_errors_ok;
    worker_slot w[MAX_PROCS];
    size_t ref_size[MAX_SOURCES];
    kpc_status ref_status[MAX_SOURCES];
    uint8_t ref[MAX_SOURCES][REF_MAX];
} shared;

typedef struct chaos_cfg {
    const char *name; /* "fake" or "hiprtc" */
    bool fake;
    int seconds, procs, sources;
    size_t shm_entries;
    int kill_min_ms, kill_max_ms; /* random kill interval */
    int churn_ms;                 /* a clear or prune every so often */
    uint64_t hang_ns;             /* no request finished in this long: a hang */
    uint64_t disk_max_bytes;      /* the workers' disk limit (0: the default) */
} chaos_cfg;

extern shared *sh;
extern const chaos_cfg *cfg;
extern char *dir;
extern char **sources;
extern worker_slot *me;

kpc_source source_of(int i);

void die_at(enum phase p);

/* The library's system-call hook (base/fault.h, test builds): the targeted kills at the
 * phases of a write, and while the prune lock is held. Counts restart with each request. */
extern unsigned req_writes;
extern enum kpc_sys_call last_call;

void chaos_hook(enum kpc_sys_call call, unsigned long nth);

extern uint64_t rnd_state;

uint64_t rnd(void);

kpc_cache *worker_open(void);

/* One request: compare with the reference; count what happened. */
void one_request(kpc_cache *cache);

void worker(int slot);

#endif
