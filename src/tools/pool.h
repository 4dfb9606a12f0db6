/*
 * pool.h - the kpc tool's worker pool: N items shared by W forked processes.
 *
 * hipRTC compiles one source at a time per process, so parallel builds need processes,
 * not threads. The items live in memory mapped MAP_SHARED before the fork, so a worker's
 * writes are seen by the parent; worker w takes items w, w + W, w + 2W, ... The parent
 * calls tick() about ten times a second while the workers run (progress), and lost() for
 * each item of a worker that died, exited non-zero, or could not be started: the item's
 * owner decides whether the worker had finished it.
 */
#ifndef KPC_TOOLS_POOL_H
#define KPC_TOOLS_POOL_H

#include <stdbool.h>
#include <stddef.h>

typedef struct kpc_pool_ops {
    /* in a worker: do items first, first + step, ... (then the worker exits 0) */
    void (*work)(void *arg, int first, int step);
    /* in the parent, while workers run; may be NULL */
    void (*tick)(void *arg);
    /* in the parent: item `item` may be unfinished because `why` (one line, no newline) */
    void (*lost)(void *arg, int item, const char *why);
    /* never run the work in this process, even for one item: it loads what the parent
     * must not (replay sets the environment a compiler reads when it loads) */
    bool always_fork;
} kpc_pool_ops;

/* Zeroed memory for n items of `size` bytes, shared with the workers forked later; NULL on
 * failure. Free with kpc_pool_free. */
void *kpc_pool_alloc(size_t n, size_t size);
void kpc_pool_free(void *items, size_t n, size_t size);

/* Run `num_items` items in `workers` processes (at most num_items, at most 1024). With one
 * item, or one worker and no tick, the work runs in this process (unless always_fork). Returns the number of
 * workers that were started (0: the work ran here). */
int kpc_pool_run(int num_items, int workers, const kpc_pool_ops *ops, void *arg);

#endif
