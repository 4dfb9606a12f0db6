/*
 * test_house_tiers.c - the storage tiers' seam: a read-only tier
 * back-filled into the disk tree; a coordinating tier's begin answers and its lease
 * finished exactly once with the right outcome (fake tiers); a back-fill answers for the
 * host disk; a miss that builds behind a manifest reads that manifest once.
 */
#define _GNU_SOURCE
#include "support.h"
#include "platform/compile.h"
#include "storage/request_codec.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "house_support.h"

/* ---- a fake tier: read-only (a pack) or coordinating (a cluster) ------------------------- */
typedef struct fake_tier {
    kpc_tier t;
    /* what it holds: one record (CODE or LOG), or none */
    bool has;
    kpc_record rec;
    void *payload;
    size_t payload_size;
    /* coordinating: begin's answer when it holds nothing (BUILD), and what it saw */
    int begins, finishes, renews;
    enum kpc_tier_outcome outcome;
    uint32_t finished_kind;
    void *finished_code;
    size_t finished_size;
} fake_tier;

static fake_tier fake; /* one per test, reset by fake_setup */
static struct { char lease; } the_lease;

static kpc_status fake_read(kpc_tier *t, const kpc_key *key, const char *target, uint32_t kind,
                            kpc_record *out)
{
    fake_tier *f = (fake_tier *)t;
    if (!f->has || f->rec.kind != kind || memcmp(f->rec.key.bytes, key->bytes, 16) != 0 ||
        strcmp(f->rec.target, target) != 0)
        return KPC_E_NOT_FOUND;
    *out = f->rec;
    out->block = out->payload = malloc(f->payload_size);
    memcpy(out->payload, f->payload, f->payload_size);
    return KPC_OK;
}

static kpc_status fake_begin(kpc_tier *t, const kpc_key *key, const char *target, kpc_tier_begin *res)
{
    fake_tier *f = (fake_tier *)t;
    f->begins++;
    if (fake_read(t, key, target, KPC_RECORD_CODE, &res->rec) == KPC_OK) {
        res->verdict = KPC_TIER_HIT;
    } else if (fake_read(t, key, target, KPC_RECORD_LOG, &res->rec) == KPC_OK) {
        res->verdict = KPC_TIER_FAILED;
    } else {
        res->verdict = KPC_TIER_BUILD;
        res->lease = (kpc_tier_lease *)&the_lease;
        res->renew_ns = 1000000; /* 1 ms: the keeper thread runs during a compile */
    }
    return KPC_OK;
}

static kpc_status fake_renew(kpc_tier *t, kpc_tier_lease *lease)
{
    fake_tier *f = (fake_tier *)t; /* the keeper thread: no ck_assert here */
    __atomic_add_fetch(&f->renews, lease == (kpc_tier_lease *)&the_lease ? 1 : 1000000, __ATOMIC_RELAXED);
    return KPC_OK;
}

static void fake_finish(kpc_tier *t, kpc_tier_lease *lease, enum kpc_tier_outcome how,
                        const kpc_record *rec, const void *first, const void *second)
{
    fake_tier *f = (fake_tier *)t;
    ck_assert_ptr_eq(lease, &the_lease);
    f->finishes++;
    f->outcome = how;
    ck_assert((how == KPC_TIER_ABANDON) == (rec == NULL));
    if (rec) {
        f->finished_kind = rec->kind;
        f->finished_size = rec->code_size;
        f->finished_code = malloc(rec->code_size + 1);
        memcpy(f->finished_code, first, rec->code_size);
        (void)second;
    }
}

static const kpc_tier_ops pack_ops = {.read = fake_read};
static const kpc_tier_ops cluster_ops = {.begin = fake_begin, .renew = fake_renew, .finish = fake_finish};

static kpc_status open_pack(const kpc_tier_env *env, kpc_tier **out)
{
    (void)env;
    fake.t.ops = &pack_ops;
    fake.t.name = "fake-pack";
    fake.t.flags = 0;
    *out = &fake.t;
    return KPC_OK;
}

static kpc_status open_cluster(const kpc_tier_env *env, kpc_tier **out)
{
    (void)env;
    fake.t.ops = &cluster_ops;
    fake.t.name = "fake-cluster";
    fake.t.flags = KPC_TIER_WRITABLE | KPC_TIER_COORDINATES;
    *out = &fake.t;
    return KPC_OK;
}

/* Let the fake tier hold a record of kind for src on ctx, with payload bytes. */
static void fake_hold(kpc_context *ctx, const kpc_source *src, uint32_t kind, const void *payload,
                      size_t code_size, size_t names_size)
{
    fake.has = true;
    memset(&fake.rec, 0, sizeof fake.rec);
    ts_key(ctx, src, &fake.rec.key);
    fake.rec.kind = kind;
    snprintf(fake.rec.target, sizeof fake.rec.target, "%s", kpc_context_target(ctx));
    memcpy(fake.rec.compiler_id, ctx->compiler_id, 16);
    fake.rec.code_size = code_size;
    fake.rec.names_size = names_size;
    /* as every record this release writes: the request's digest, which a hit compares */
    fake.rec.has_digest = kpc_request_digest(&fake.rec.key, src, fake.rec.request_digest);
    fake.payload_size = code_size + names_size;
    fake.payload = malloc(fake.payload_size);
    memcpy(fake.payload, payload, fake.payload_size);
}

/* Let the fake tier hold a code object whose first bytes are text, with an empty name
 * table (as a pack or another host would hold it); the 128 bytes of code into code. */
static void fake_hold_code(kpc_context *ctx, const kpc_source *src, const char *text, char code[128])
{
    void *names;
    size_t names_size;
    ck_assert_int_eq(kpc_names_encode(NULL, NULL, 0, &names, &names_size), KPC_OK);
    char payload[160] = "\x7f" "ELF ";
    strncat(payload, text, 100);
    memcpy(payload + 128, names, names_size);
    free(names);
    fake_hold(ctx, src, KPC_RECORD_CODE, payload, 128, names_size);
    memcpy(code, payload, 128);
}

static void fake_reset(void)
{
    free(fake.payload);
    free(fake.finished_code);
    memset(&fake, 0, sizeof fake);
}

/* The program of src: its 128 code bytes are payload's. */
static void expect_code(kpc_context *ctx, const kpc_source *src, const char payload[128])
{
    size_t size;
    void *code = ts_get_code(ctx, src, &size);
    ck_assert_uint_eq(size, 128);
    ck_assert_mem_eq(code, payload, 128);
    free(code);
}

/* ---- tiers -------------------------------------------------------------------------- */
START_TEST(read_only_tier_hit_is_backfilled)
{
    ts_fake_install();
    fake_reset();
    kpc_tier_test_add(open_pack);
    kpc_cache *c = ts_open(dir, KPC_NO_SHM, 0);
    ck_assert_uint_eq(c->tiers.n, 2);
    ck_assert_str_eq(c->tiers.t[0]->name, "disk");
    kpc_context *ctx = ts_context(c);
    kpc_source src = ts_src("pack me", "p.hip");
    char payload[128];
    fake_hold_code(ctx, &src, "packed object", payload);

    expect_code(ctx, &src, payload);
    ck_assert_uint_eq(ts_fake_compiles(), 0);
    ck_assert_uint_eq(stats_of(c).builds, 0);
    ck_assert_uint_eq(atomic_load(&fake.t.n.hits), 1);
    ck_assert_uint_eq(atomic_load(&c->tiers.t[0]->n.backfills), 1);
    ck_assert_uint_eq(atomic_load(&c->tiers.t[0]->n.misses), 1);
    /* the disk tree holds it now: the next process reads it there */
    kpc_record rec;
    ck_assert_int_eq(kpc_store_read(c->store, &fake.rec.key, kpc_context_target(ctx), KPC_RECORD_CODE, &rec),
                     KPC_OK);
    ck_assert_uint_eq(rec.code_size, 128);
    ck_assert_mem_eq(rec.payload, payload, 128);
    kpc_record_free(&rec);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    fake_reset();
}
END_TEST

/* With the host index on, the claimant asks the coordinating tier; a build under its
 * lease is finished exactly once, with the record, and renewed while it compiles. */
START_TEST(coordinating_tier_build_publishes_once)
{
    ts_fake_install();
    fake_reset();
    kpc_tier_test_add(open_cluster);
    kpc_cache *c = ts_open(dir, 0, 0);
    ck_assert_ptr_nonnull(c->index);
    kpc_context *ctx = ts_context(c);
    kpc_source src = ts_src("cluster build // sleep_ms=30", "c.hip");
    size_t size;
    void *code = ts_get_code(ctx, &src, &size);
    ck_assert_uint_eq(ts_fake_compiles(), 1);
    ck_assert_int_eq(fake.begins, 1);
    ck_assert_int_eq(fake.finishes, 1);
    ck_assert_int_eq(fake.outcome, KPC_TIER_PUBLISH);
    ck_assert_uint_eq(fake.finished_kind, KPC_RECORD_CODE);
    ck_assert_uint_eq(fake.finished_size, size);
    ck_assert_mem_eq(fake.finished_code, code, size);
    ck_assert_uint_eq(atomic_load(&fake.t.n.builds), 1);
    ck_assert_int_lt(__atomic_load_n(&fake.renews, __ATOMIC_RELAXED), 1000000); /* its own lease */
    free(code);
    /* the disk tree got it too; a second context's miss reads the disk, never the tier */
    kpc_context *ctx2 = ts_context(c);
    code = ts_get_code(ctx2, &src, &size);
    free(code);
    ck_assert_int_eq(fake.begins, 1);
    ck_assert_int_eq(fake.finishes, 1);
    kpc_context_destroy(ctx2);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    fake_reset();
}
END_TEST

/* A cache over the fake cluster tier, which holds the CODE record of src (payload: its
 * 128 code bytes, the text first). */
static kpc_cache *cluster_holding(const kpc_source *src, const char *text, char payload[128], kpc_context **ctx)
{
    ts_fake_install();
    fake_reset();
    kpc_tier_test_add(open_cluster);
    kpc_cache *c = ts_open(dir, 0, 0);
    *ctx = ts_context(c);
    fake_hold_code(*ctx, src, text, payload);
    return c;
}

/* The end of a test over the fake cluster tier. */
static void cluster_close(kpc_context *ctx, kpc_cache *c)
{
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    fake_reset();
}

/* The same, after the request for src answered with those bytes. */
static kpc_cache *cluster_hit(const kpc_source *src, const char *text, char payload[128], kpc_context **ctx)
{
    kpc_cache *c = cluster_holding(src, text, payload, ctx);
    expect_code(*ctx, src, payload);
    return c;
}

/* A record the coordinating tier answers reaches the caller before its copy to disk is
 * made: the copy runs on the cache's back-fill thread (held here at its rename). Until it
 * is renamed into place the disk has no record and the host slot is still building (the
 * host's waiters wait for the copy, not for another fetch); then the disk holds the same
 * bytes and the slot is READY. */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static bool gate_closed, gate_timed_out;

static void hold_renames(enum kpc_sys_call call, unsigned long nth)
{
    (void)nth;
    if (call != KPC_SYS_RENAME)
        return;
    pthread_mutex_lock(&gate_lock);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5; /* a copy made on the request's path would hold the request here */
    while (gate_closed && !gate_timed_out)
        if (pthread_cond_timedwait(&gate_cond, &gate_lock, &until) == ETIMEDOUT)
            gate_timed_out = true;
    pthread_mutex_unlock(&gate_lock);
}

static int slot_child(int i, void *arg)
{
    (void)i;
    kpc__sys_hook_set(NULL);
    kpc_tier_test_add(NULL); /* the index alone: no tier, no thread in a forked child */
    enum kpc_index_verdict want = *(enum kpc_index_verdict *)arg, v;
    bool waited;
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_status s = kpc_index_begin(c->index, &fake.rec.key, KPC_INDEX_NOWAIT, &v, &waited);
    if (s == KPC_OK && v == KPC_INDEX_BUILD)
        kpc_index_abandon(c->index, &fake.rec.key);
    kpc_cache_close(c);
    return s == KPC_OK && v == want ? 0 : 1;
}

START_TEST(coordinating_tier_hit_answers_before_the_copy)
{
    kpc_source src = ts_src("answered first", "a.hip");
    char payload[128];
    kpc_context *ctx;
    kpc_cache *c = cluster_holding(&src, "from another host, copied later", payload, &ctx);
    gate_closed = true;
    gate_timed_out = false;
    kpc__sys_hook_set(hold_renames);
    size_t size;
    void *code = ts_get_code(ctx, &src, &size);
    ck_assert(!gate_timed_out);
    ck_assert_uint_eq(size, 128);
    ck_assert_mem_eq(code, payload, 128);
    free(code);
    /* the copy is held before its rename: nothing on disk, the slot still building */
    kpc_record rec;
    ck_assert_int_eq(kpc_store_read(c->store, &fake.rec.key, kpc_context_target(ctx), KPC_RECORD_CODE, &rec),
                     KPC_E_NOT_FOUND);
    enum kpc_index_verdict want = KPC_INDEX_BUSY;
    ck_assert_int_eq(ts_run_children(1, slot_child, &want), 1);
    pthread_mutex_lock(&gate_lock);
    gate_closed = false;
    pthread_cond_broadcast(&gate_cond);
    pthread_mutex_unlock(&gate_lock);
    kpc_backfill_wait(&c->fill);
    kpc__sys_hook_set(NULL);
    ck_assert(!gate_timed_out);
    ck_assert_uint_eq(atomic_load(&c->tiers.t[0]->n.backfills), 1);
    ck_assert_int_eq(kpc_store_read(c->store, &fake.rec.key, kpc_context_target(ctx), KPC_RECORD_CODE, &rec),
                     KPC_OK);
    ck_assert_uint_eq(rec.code_size, 128);
    ck_assert_mem_eq(rec.payload, payload, 128);
    kpc_record_free(&rec);
    want = KPC_INDEX_READY;
    ck_assert_int_eq(ts_run_children(1, slot_child, &want), 1);
    ck_assert_int_eq(fake.begins, 1);
    cluster_close(ctx, c);
}
END_TEST

/* kpc_cache_close makes the copies still queued: the next process reads the disk. */
START_TEST(coordinating_tier_copy_made_by_close)
{
    kpc_source src = ts_src("copied at close", "z.hip");
    char payload[128];
    kpc_context *ctx;
    kpc_cache *c = cluster_hit(&src, "copied by the close", payload, &ctx);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ck_assert_int_eq(fake.begins, 1);
    c = ts_open(dir, 0, 0);
    ctx = ts_context(c);
    expect_code(ctx, &src, payload);
    ck_assert_int_eq(fake.begins, 1); /* read from disk, the tier not asked again */
    ck_assert_uint_eq(stats_of(c).disk_hits, 1);
    cluster_close(ctx, c);
}
END_TEST

START_TEST(coordinating_tier_hit_and_failed)
{
    /* HIT: taken, back-filled, nothing compiled, no lease */
    kpc_source src = ts_src("cluster hit", "h.hip");
    char payload[128];
    kpc_context *ctx;
    kpc_cache *c = cluster_hit(&src, "from another host", payload, &ctx);
    ck_assert_uint_eq(ts_fake_compiles(), 0);
    ck_assert_int_eq(fake.finishes, 0);
    kpc_backfill_wait(&c->fill); /* the copy to disk is made after the answer */
    ck_assert_uint_eq(atomic_load(&c->tiers.t[0]->n.backfills), 1);
    kpc_record rec;
    ck_assert_int_eq(kpc_store_read(c->store, &fake.rec.key, kpc_context_target(ctx), KPC_RECORD_CODE, &rec),
                     KPC_OK);
    kpc_record_free(&rec);
    /* FAILED: another host's compile error, shared here with its log */
    free(fake.payload);
    const char *log = "other host: error: no such type\n";
    kpc_source bad = ts_src("cluster failed", "f.hip");
    fake_hold(ctx, &bad, KPC_RECORD_LOG, log, strlen(log), 0);
    kpc_program *p = NULL;
    ck_assert_int_eq(kpc_program_get(ctx, &bad, &p), KPC_E_COMPILE);
    ck_assert_ptr_null(p);
    ck_assert_str_eq(kpc_last_log(), log);
    ck_assert_uint_eq(ts_fake_compiles(), 0);
    ck_assert_int_eq(fake.finishes, 0);
    /* another host's failure, served: cached here, never a build failure of this process */
    kpc_stats st;
    kpc_stats_get(c, &st);
    ck_assert_uint_eq(st.build_failures, 0);
    ck_assert_uint_eq(st.cached_failures, 1);
    cluster_close(ctx, c);
}
END_TEST

/* Under a lease: a compile error is published as one (its log), a local fault abandons. */
START_TEST(coordinating_tier_failures)
{
    ts_fake_install();
    fake_reset();
    kpc_tier_test_add(open_cluster);
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_program *p = NULL;
    kpc_source err = ts_src("#error nope", "e.hip");
    ck_assert_int_eq(kpc_program_get(ctx, &err, &p), KPC_E_COMPILE);
    ck_assert_int_eq(fake.finishes, 1);
    ck_assert_int_eq(fake.outcome, KPC_TIER_PUBLISH_FAILED);
    ck_assert_uint_eq(fake.finished_kind, KPC_RECORD_LOG);
    ck_assert_ptr_nonnull(fake.finished_code);
    ((char *)fake.finished_code)[fake.finished_size] = '\0';
    ck_assert_str_eq(fake.finished_code, "fake: #error in source\n");
    free(fake.finished_code);
    fake.finished_code = NULL;

    setenv("KPC_FAKE_LOCAL_FAULT", "1", 1);
    kpc_source local = ts_src("fine source", "l.hip");
    ck_assert_int_eq(kpc_program_get(ctx, &local, &p), KPC_E_COMPILE);
    unsetenv("KPC_FAKE_LOCAL_FAULT");
    ck_assert_int_eq(fake.finishes, 2);
    ck_assert_int_eq(fake.outcome, KPC_TIER_ABANDON);
    ck_assert_ptr_null(fake.finished_code);
    cluster_close(ctx, c);
}
END_TEST

/* A back-fill's status is the host disk's: the host slot's READY promises the record is on
 * this host's disk, so a writable tier that refuses the copy (a read-only shared
 * directory) does not turn READY into ABANDON; a disk that refuses it does. */
static kpc_status write_ok(kpc_tier *t, const kpc_record *rec, const void *a, const void *b)
{
    (void)t, (void)rec, (void)a, (void)b;
    return KPC_OK;
}

static kpc_status write_refused(kpc_tier *t, const kpc_record *rec, const void *a, const void *b)
{
    (void)t, (void)rec, (void)a, (void)b;
    return KPC_E_IO;
}

START_TEST(backfill_status_is_the_host_disks)
{
    static const kpc_tier_ops ok_ops = {.write = write_ok}, refused_ops = {.write = write_refused},
                              none = {0};
    kpc_tier disk = {.ops = &ok_ops, .flags = KPC_TIER_WRITABLE | KPC_TIER_HOST_DISK},
             shared = {.ops = &refused_ops, .flags = KPC_TIER_WRITABLE},
             cluster = {.ops = &none, .flags = KPC_TIER_COORDINATES};
    kpc_tiers ts = {.t = {&disk, &shared, &cluster}, .n = 3};
    char payload[16] = "code";
    kpc_record rec = {.kind = KPC_RECORD_CODE, .payload = payload, .code_size = sizeof payload};
    ck_assert_int_eq(kpc_tier_backfill(&ts, &cluster, &rec), KPC_OK);
    ck_assert_uint_eq(atomic_load(&disk.n.backfills), 1);
    ck_assert_uint_eq(atomic_load(&shared.n.errors), 1); /* counted, not the answer */
    disk.ops = &refused_ops;
    shared.ops = &ok_ops;
    ck_assert_int_eq(kpc_tier_backfill(&ts, &cluster, &rec), KPC_E_IO);
    ck_assert_uint_eq(atomic_load(&disk.n.errors), 1);
    ck_assert_uint_eq(atomic_load(&shared.n.backfills), 1);
}
END_TEST

/* ---- one read of a manifest per miss ------------------------------------------------ */
/* A pack that holds nothing and counts the reads of a manifest that reach it: with the
 * disk empty, every one the walk makes. */
static _Atomic unsigned manifest_reads;

static kpc_status count_manifest_reads(kpc_tier *t, const kpc_key *key, const char *target, uint32_t kind,
                                       kpc_record *out)
{
    (void)t, (void)key, (void)target, (void)out;
    if (kind == KPC_RECORD_MANIFEST)
        atomic_fetch_add(&manifest_reads, 1);
    return KPC_E_NOT_FOUND;
}

static kpc_status open_counting_pack(const kpc_tier_env *env, kpc_tier **out)
{
    static const kpc_tier_ops ops = {.read = count_manifest_reads};
    (void)env;
    fake.t.ops = &ops;
    fake.t.name = "counting-pack";
    fake.t.flags = 0;
    *out = &fake.t;
    return KPC_OK;
}

/* A miss that builds behind a manifest reads the manifest once: the build adds its entry
 * to the manifest its lookup read. Both orders of the lookup: the record under the key
 * first (no option names a file), and the manifest first (an -I directory). The next
 * process finds the entry in the manifest written and builds nothing. */
START_TEST(build_behind_a_manifest_reads_it_once)
{
    ts_fake_install();
    fake_reset();
    kpc_tier_test_add(open_counting_pack);
    char header[4300], opt[4300], code[2][4400];
    ts_include_dir(dir, header, opt, sizeof header);
    const char *opts[] = {opt};
    usleep(1100 * 1000); /* older than the race window (manifest.h): the outcome is stored */
    for (unsigned i = 0; i < 2; i++) {
        snprintf(code[i], sizeof code[i], "kernel %u\n// dep=%s\n", i, header);
        kpc_source src = ts_src(code[i], "m.hip");
        src.options = i ? opts : NULL;
        src.num_options = i;
        kpc_cache *c = ts_open(dir, 0, 0);
        kpc_context *ctx = ts_context(c);
        atomic_store(&manifest_reads, 0);
        size_t size;
        free(ts_get_code(ctx, &src, &size));
        ck_assert_uint_eq(ts_fake_compiles(), i + 1);
        unsigned reads = atomic_load(&manifest_reads);
        ck_assert_uint_eq(reads, 1); /* the lookup's: the build added to what it read */
        kpc_key key;
        ts_key(ctx, &src, &key);
        kpc_record rec;
        ck_assert_int_eq(kpc_store_read(c->store, &key, kpc_context_target(ctx), KPC_RECORD_MANIFEST, &rec),
                         KPC_OK);
        kpc_record_free(&rec);
        kpc_context_destroy(ctx);
        kpc_cache_close(c);

        c = ts_open(dir, 0, 0);
        ctx = ts_context(c);
        free(ts_get_code(ctx, &src, &size));
        ck_assert_uint_eq(ts_fake_compiles(), i + 1);
        ck_assert_uint_eq(stats_of(c).disk_hits, 1);
        reads = atomic_load(&manifest_reads);
        ck_assert_uint_eq(reads, 1); /* the disk held it: the pack was not asked */
        kpc_context_destroy(ctx);
        kpc_cache_close(c);
    }
    fake_reset();
}
END_TEST

int main(void)
{
    const TTest *tests[] = {read_only_tier_hit_is_backfilled, coordinating_tier_hit_answers_before_the_copy,
                            coordinating_tier_copy_made_by_close,
                            coordinating_tier_build_publishes_once,
                            coordinating_tier_hit_and_failed, coordinating_tier_failures,
                            backfill_status_is_the_host_disks, build_behind_a_manifest_reads_it_once,
                            NULL};
    return ts_main_case("house", "tiers", 0, setup, teardown, tests);
}
