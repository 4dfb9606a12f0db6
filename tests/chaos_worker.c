/*
 * chaos_worker.c - the chaos test's worker processes (chaos_worker.h): the sources and
 * their reference bytes, the compile and system-call hooks where a worker dies at a
 * chosen phase, and the worker's request loop.
 */
#define _GNU_SOURCE
#include "support.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include "chaos_worker.h"

shared *sh;
const chaos_cfg *cfg;
char *dir;
char **sources;
worker_slot *me;

kpc_source source_of(int i)
{
    return ts_src(sources[i], "chaos.hip");
}

void die_at(enum phase p)
{
    atomic_store(&me->dying_at, p);
    raise(SIGKILL);
}

/* The library's system-call hook (base/fault.h, test builds): the targeted kills at the
 * phases of a write, and while the prune lock is held. Counts restart with each request. */
unsigned req_writes;
enum kpc_sys_call last_call = KPC_SYS_COUNT;

void chaos_hook(enum kpc_sys_call call, unsigned long nth)
{
    (void)nth;
    int arm = me ? atomic_load(&me->armed) : PH_RANDOM;
    if ((arm == PH_MID_WRITE && call == KPC_SYS_WRITE && ++req_writes == 2) || /* header written */
        (arm == PH_BEFORE_FSYNC && call == KPC_SYS_FSYNC) ||
        (arm == PH_BEFORE_RENAME && call == KPC_SYS_RENAME) ||
        (arm == PH_AFTER_RENAME && last_call == KPC_SYS_RENAME) ||
        (arm == PH_PRUNE_LOCK && last_call == KPC_SYS_FLOCK))
        die_at((enum phase)arm);
    last_call = call;
}

uint64_t rnd_state; /* 0: seed on first use; a forked worker starts at 0 again */

uint64_t rnd(void)
{
    uint64_t x = rnd_state;
    if (x == 0)
        x = kpc__now_ns() ^ ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ull;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return rnd_state = x;
}

kpc_cache *worker_open(void)
{
    /* a small disk limit: writers prune often, and die holding the prune lock */
    kpc_config c = {.struct_size = sizeof c, .cache_dir = dir, .shm_entries = cfg->shm_entries,
                    .disk_max_bytes = cfg->disk_max_bytes};
    kpc_cache *cache = NULL;
    if (kpc_cache_open(&c, &cache) != KPC_OK)
        return NULL;
    return cache;
}

/* One request: compare with the reference; count what happened. */
void one_request(kpc_cache *cache)
{
    kpc_context *ctx;
    if (kpc_context_create_for_target(cache, ts_target(), &ctx) != KPC_OK) {
        atomic_fetch_add(&sh->errors, 1);
        return;
    }
    int i = (int)(rnd() % (uint64_t)cfg->sources);
    if (me)
        atomic_store(&me->source, i);
    kpc_source src = source_of(i);
    kpc_program *p = NULL;
    kpc_status s = kpc_program_get(ctx, &src, &p);
    atomic_fetch_add(&sh->requests, 1);
    if (s != sh->ref_status[i]) {
        fprintf(stderr, "chaos: worker %d: source %d: %s, a clean compile says %s\n", (int)getpid(), i,
                kpc_status_str(s), kpc_status_str(sh->ref_status[i]));
        atomic_fetch_add(&sh->errors, 1);
    } else if (s == KPC_OK) {
        size_t size;
        const void *code = kpc_program_code(p, &size);
        if (size != sh->ref_size[i] || memcmp(code, sh->ref[i], size) != 0) {
            fprintf(stderr, "chaos: worker %d: source %d: WRONG OBJECT (%zu bytes, expected %zu)\n",
                    (int)getpid(), i, size, sh->ref_size[i]);
            atomic_fetch_add(&sh->wrong, 1);
        }
    } else
        atomic_fetch_add(&sh->compile_errors_ok, 1);
    kpc_program_release(p);
    kpc_context_destroy(ctx);
}

void worker(int slot)
{
    me = &sh->w[slot];
    kpc__log_level = KPC_LOG_ERROR;
    kpc__sys_hook_set(chaos_hook);
    kpc_cache *cache = NULL;
    while (!atomic_load(&sh->stop)) {
        atomic_store(&me->heartbeat_ns, kpc__now_ns());
        if (cache == NULL || rnd() % 16 == 0) {
            kpc_cache_close(cache);
            if ((cache = worker_open()) == NULL) {
                atomic_fetch_add(&sh->errors, 1);
                continue;
            }
        }
        /* one request in forty aims its death at a phase (with 8 workers, some 50 targeted
         * kills a second: each one at the table lock wipes the host index) */
        int arm = PH_RANDOM;
        if (rnd() % 40 == 0)
            arm = 1 + (int)(rnd() % (PH_COUNT - 1));
        if (arm == PH_TABLE_LOCK) {
            if (cache->index == NULL)
                arm = PH_RANDOM;
            else
                kpc_index_test_hold_lock(cache->index); /* the parent sees the stop, kills */
        }
        req_writes = 0;
        last_call = KPC_SYS_COUNT;
        atomic_store(&me->armed, arm);
        one_request(cache);
        atomic_store(&me->armed, PH_RANDOM);
    }
    kpc_cache_close(cache);
    _exit(0);
}
