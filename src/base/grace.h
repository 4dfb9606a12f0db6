/*
 * grace.h - grace periods for readers that take no lock (base/grace.c), and a small,
 * stable number per thread for counters kept one per thread slot.
 *
 * A reader brackets its look at shared memory with kpc_grace_enter/kpc_grace_exit; a
 * writer that has unlinked something calls kpc_grace_wait before freeing it: it returns
 * once every reader that could still see it has left its section. A reader never
 * blocks and writes only a cache line of its own thread.
 */
#ifndef KPC_BASE_GRACE_H
#define KPC_BASE_GRACE_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct kpc_grace_rec kpc_grace_rec;

/* Enter a read section: everything unlinked after this, this thread may still see
 * until kpc_grace_exit. Sections do not nest. */
kpc_grace_rec *kpc_grace_enter(void);
void kpc_grace_exit(kpc_grace_rec *rec);
/* Wait until every read section that began before this call has ended. Never call it
 * inside a section of one's own. */
void kpc_grace_wait(void);

/* Thread slots: KPC_THREAD_SLOTS numbers handed to threads in turn, so that up to that
 * many threads alive together get different ones; stable for a thread's life. */
#define KPC_THREAD_SLOTS 64
unsigned kpc_thread_slot(void);

#endif /* KPC_BASE_GRACE_H */
