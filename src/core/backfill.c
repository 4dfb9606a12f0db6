/*
 * backfill.c - copies of records found on the coordinating (cluster) tier into the host's
 * disk tree, made by a thread of the cache after the request has its answer.
 *
 * Why: once the fetched record is checked, the program is in memory; the copy to disk is
 * several file-system metadata calls (mkdir, an O_EXCL create, a rename), which on a slow
 * file system cost more than the whole fetch. The requesting thread builds the program,
 * hands the copy over with the claim it holds on the host slot and a reference to the
 * program (whose code buffer is the record's payload), and returns.
 *
 * What stays true: READY in the host index still means "on this host's disk": the
 * thread publishes it only after the copy is renamed into place, so the host's waiters on
 * the key wait for the copy (not for another fetch). A copy that no tier stored finishes
 * the claim ABANDON: a waiter then claims the key and asks the cluster itself.
 * kpc_cache_close makes every copy first. A process that ends without closing (or is
 * killed) mid-copy leaves a slot whose builder is dead (taken over as any dead builder's)
 * and at most a temp file in the tree's tmp/ (swept by the next walk), never a torn or
 * wrong record: the store writes a temp file and renames it into place.
 *
 * The thread is started with the cache when it has a coordinating tier (starting it on
 * the first hit would put a thread's creation on that request's path). The queue is a
 * FIFO under one mutex: it is touched once per remote hit, never by a memory or disk hit.
 */
#define _GNU_SOURCE
#include "core/backfill.h"
#include "base/log.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

struct kpc_backfill_job {
    kpc_backfill_job *next;
    kpc_tier *from;
    kpc_claim claim;
    kpc_record head; /* payload: the program's code buffer (code, names, request) */
    kpc_program *prog;
};

void kpc_backfill_copy(kpc_tiers *tiers, kpc_tier *from, kpc_claim *claim, kpc_record *head)
{
    kpc_status s = kpc_tier_backfill(tiers, from, head);
    head->payload = NULL; /* the program's */
    head->request = NULL;
    head->request_size = 0;
    if (s == KPC_OK)
        kpc_claim_finish(claim, KPC_CLAIM_READY, head, NULL, NULL);
    else
        kpc_claim_finish(claim, KPC_CLAIM_ABANDON, NULL, NULL, NULL);
}

static void copy_one(kpc_backfill *bf, kpc_backfill_job *j)
{
    kpc_backfill_copy(bf->tiers, j->from, &j->claim, &j->head);
    kpc_program_release(j->prog);
    free(j);
}

static void *fill(void *arg)
{
    kpc_backfill *bf = arg;
    pthread_mutex_lock(&bf->lock);
    for (;;) {
        while (bf->head == NULL && !bf->stop)
            pthread_cond_wait(&bf->work, &bf->lock);
        kpc_backfill_job *j = bf->head;
        if (j == NULL)
            break; /* stop, and nothing left */
        bf->head = j->next;
        if (bf->head == NULL)
            bf->tail = NULL;
        pthread_mutex_unlock(&bf->lock);
        copy_one(bf, j);
        pthread_mutex_lock(&bf->lock);
        if (--bf->busy == 0)
            pthread_cond_broadcast(&bf->idle);
    }
    pthread_mutex_unlock(&bf->lock);
    return NULL;
}

void kpc_backfill_start(kpc_backfill *bf, kpc_tiers *tiers)
{
    memset(bf, 0, sizeof *bf);
    bf->tiers = tiers;
    pthread_mutex_init(&bf->lock, NULL);
    pthread_cond_init(&bf->work, NULL);
    pthread_cond_init(&bf->idle, NULL);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 256 * 1024); /* the store's writes and a log line */
    /* the application's signals are for its own threads: this one starts with all blocked */
    sigset_t all, was;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &was);
    if (pthread_create(&bf->thread, &a, fill, bf) == 0) {
        bf->running = true;
        pthread_setname_np(bf->thread, "kpc-backfill");
    } else {
        KPC_LOG(KPC_LOG_WARN, "no thread for back-fills: records from the cluster are copied to "
                "disk on the request's path");
    }
    pthread_sigmask(SIG_SETMASK, &was, NULL);
    pthread_attr_destroy(&a);
}

kpc_status kpc_backfill_defer(kpc_backfill *bf, kpc_tier *from, kpc_claim *claim, const kpc_record *head,
                              kpc_program *prog)
{
    if (!bf->running)
        return KPC_E_UNAVAILABLE;
    kpc_backfill_job *j = malloc(sizeof *j);
    if (j == NULL)
        return KPC_E_NOMEM;
    *j = (kpc_backfill_job){.from = from, .claim = *claim, .head = *head, .prog = prog};
    kpc_program_retain(prog);
    memset(claim, 0, sizeof *claim); /* the job's now: finishing it here does nothing */
    pthread_mutex_lock(&bf->lock);
    if (bf->tail)
        bf->tail->next = j;
    else
        bf->head = j;
    bf->tail = j;
    bf->busy++;
    pthread_cond_signal(&bf->work);
    pthread_mutex_unlock(&bf->lock);
    return KPC_OK;
}

void kpc_backfill_wait(kpc_backfill *bf)
{
    if (!bf->running)
        return;
    pthread_mutex_lock(&bf->lock);
    while (bf->busy)
        pthread_cond_wait(&bf->idle, &bf->lock);
    pthread_mutex_unlock(&bf->lock);
}

void kpc_backfill_stop(kpc_backfill *bf)
{
    if (!bf->running)
        return;
    pthread_mutex_lock(&bf->lock);
    bf->stop = true;
    pthread_cond_signal(&bf->work);
    pthread_mutex_unlock(&bf->lock);
    pthread_join(bf->thread, NULL);
    bf->running = false;
    pthread_cond_destroy(&bf->idle);
    pthread_cond_destroy(&bf->work);
    pthread_mutex_destroy(&bf->lock);
}
