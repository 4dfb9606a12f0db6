/*
 * test_house.c - the seams of the house: the storage tiers (a read-only tier back-filled
 * into the disk tree; a coordinating tier's begin answers and its lease finished exactly
 * once with the right outcome), the cache directory's one owner, and the failures that
 * must never be shared: a source the compiler refuses before compiling (a first byte of
 * NUL: KPC_E_INVALID, no crash, through real hipRTC) and a compile that fails for a
 * reason of one process's own (an unusable TMPDIR: real hipRTC, and the fake platform).
 */
#define _GNU_SOURCE
#include "support.h"
#include "platform/compile.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char *dir;
static void setup(void) { dir = ts_tmpdir(); }
static void teardown(void)
{
    kpc_tier_test_add(NULL);
    ts_fake_remove();
    ts_cleanup(dir);
}

static kpc_stats stats_of(kpc_cache *c)
{
    kpc_stats st;
    ck_assert_int_eq(kpc_stats_get(c, &st), KPC_OK);
    return st;
}

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
    out->payload = malloc(f->payload_size);
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

/* ---- a failure of one process's own is not shared ------------------------------------ */
static int local_fault_child(int i, void *arg)
{
    (void)i, (void)arg;
    setenv("KPC_FAKE_LOCAL_FAULT", "1", 1);
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source src = ts_src("a healthy source", "h.hip");
    kpc_program *p = NULL;
    kpc_status s = kpc_program_get(ctx, &src, &p);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    return s == KPC_E_COMPILE ? 0 : 1;
}

START_TEST(local_fault_is_not_shared_fake)
{
    ts_fake_install();
    ck_assert_int_eq(ts_run_children(1, local_fault_child, NULL), 1);
    ck_assert_uint_eq(ts_fake_compiles(), 1);
    /* a healthy process right after (well within the 30 s a FAILED answer lasts) */
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source src = ts_src("a healthy source", "h.hip");
    size_t size;
    void *code = ts_get_code(ctx, &src, &size);
    ck_assert(ts_is_code_object(code, size));
    free(code);
    ck_assert_uint_eq(ts_fake_compiles(), 2);
    /* a real compile error, by contrast, is shared: a second process does not compile */
    kpc_source bad = ts_src("#error shared", "b.hip");
    kpc_program *p = NULL;
    ck_assert_int_eq(kpc_program_get(ctx, &bad, &p), KPC_E_COMPILE);
    ck_assert_uint_eq(ts_fake_compiles(), 3);
    kpc_context *ctx2 = ts_context(c);
    ck_assert_int_eq(kpc_program_get(ctx2, &bad, &p), KPC_E_COMPILE);
    ck_assert_str_eq(kpc_last_log(), "fake: #error in source\n");
    ck_assert_uint_eq(ts_fake_compiles(), 3);
    kpc_context_destroy(ctx2);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

#ifndef KPC_PLATFORM_NVIDIA /* hipRTC's behaviours: NVRTC takes these otherwise */
/* Through real hipRTC and the tool: TMPDIR pointing to a file makes hipRTC fail without
 * diagnostics; that process fails, and a healthy one right after builds (before, it got
 * KPC_E_COMPILE with an empty log for 30 s). */
START_TEST(broken_tmpdir_does_not_poison_real)
{
    const char *tool = getenv("KPC_TOOL");
    ck_assert_ptr_nonnull(tool);
    char parent[4096], src_path[4200], notdir[4200], env_tmp[4300], env_dir[4300];
    snprintf(parent, sizeof parent, "%s", dir);
    *strrchr(parent, '/') = '\0';
    snprintf(src_path, sizeof src_path, "%s/ok.hip", parent);
    snprintf(notdir, sizeof notdir, "%s/not-a-dir", parent);
    ts_write_file(src_path, ts_kernel_source(3), strlen(ts_kernel_source(3)));
    ts_write_file(notdir, "x", 1);
    snprintf(env_tmp, sizeof env_tmp, "TMPDIR=%s", notdir);
    snprintf(env_dir, sizeof env_dir, "KPC_CACHE_DIR=%s", dir);
    const char *argv[] = {tool, "compile", "--target", ts_target(), src_path, NULL};
    const char *broken[] = {env_tmp, env_dir, NULL};
    const char *healthy[] = {env_dir, NULL};
    char *out = NULL, *err = NULL;
    int rc = ts_exec(argv, broken, &out, &err);
    ck_assert_msg(rc == 1, "broken TMPDIR: exit %d\n%s\n%s", rc, out, err);
    ck_assert_ptr_nonnull(strstr(err, "KPC_E_COMPILE"));
    free(out);
    free(err);
    rc = ts_exec(argv, healthy, &out, &err);
    ck_assert_msg(rc == 0, "healthy process after a broken one: exit %d\n%s\n%s", rc, out, err);
    ck_assert_msg(strstr(out, "built") != NULL, "%s", out);
    free(out);
    free(err);
}
END_TEST

/* ---- a request the compiler refuses before compiling ---------------------------------- */
START_TEST(nul_first_byte_is_invalid_real)
{
    static const char nul_src[] = {'\0', 'x'};
    kpc_cache *c = ts_open(dir, 0, 0); /* the host index on */
    ck_assert_ptr_nonnull(c->index);
    kpc_context *ctx = ts_context(c);
    kpc_source src = {.code = nul_src, .code_len = sizeof nul_src, .name = "z.hip"};
    kpc_program *p = NULL;
    ck_assert_int_eq(kpc_program_get(ctx, &src, &p), KPC_E_INVALID);
    ck_assert_ptr_null(p);
    kpc_stats st = stats_of(c);
    ck_assert_uint_eq(st.host_build_failures, 0); /* nothing shared as FAILED */
    /* another process asking for the same key is told the same, not a shared failure */
    int status;
    pid_t pid = fork();
    if (pid == 0) {
        kpc_cache *c2 = ts_open(dir, 0, 0);
        kpc_context *ctx2 = ts_context(c2);
        kpc_program *p2 = NULL;
        kpc_status s = kpc_program_get(ctx2, &src, &p2);
        kpc_context_destroy(ctx2);
        kpc_cache_close(c2);
        _exit(s == KPC_E_INVALID ? 0 : 1);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    /* and the cache still works */
    kpc_source good = ts_src(ts_kernel_source(5), "g.hip");
    size_t size;
    void *code = ts_get_code(ctx, &good, &size);
    ck_assert(ts_is_code_object(code, size));
    free(code);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

START_TEST(nul_first_byte_tool_real)
{
    const char *tool = getenv("KPC_TOOL");
    ck_assert_ptr_nonnull(tool);
    char parent[4096], path[4200], env_dir[4300];
    snprintf(parent, sizeof parent, "%s", dir);
    *strrchr(parent, '/') = '\0';
    snprintf(path, sizeof path, "%s/z.hip", parent);
    ts_write_file(path, "\0x", 2);
    snprintf(env_dir, sizeof env_dir, "KPC_CACHE_DIR=%s", dir);
    const char *argv[] = {tool, "compile", "--target", ts_target(), path, NULL};
    const char *env[] = {env_dir, NULL};
    char *out = NULL, *err = NULL;
    int rc = ts_exec(argv, env, &out, &err);
    ck_assert_msg(rc == 1, "exit %d (139 is the crash)\n%s\n%s", rc, out, err);
    ck_assert_msg(strstr(err, "KPC_E_INVALID") != NULL, "%s", err);
    free(out);
    free(err);
}
END_TEST
#endif

/* ---- the shared compile steps: every failure's status, and no call on a missing program */
enum { CC_OK = 0, CC_NOMEM = 7, CC_COMPILE = 8, CC_REFUSED = 9 };
static struct {
    int create, compile; /* what those steps answer */
    const char *log;
    int log_calls;
} cc;

static int cc_create(void **prog, const char *code, const char *name, const kpc_source *src)
{
    (void)code, (void)name, (void)src;
    if (cc.create != CC_OK)
        return cc.create; /* as hipRTC's create does for a NUL first byte: no program */
    *prog = &cc;
    return CC_OK;
}
static int cc_add_name(void *prog, const char *expr) { (void)prog, (void)expr; return CC_OK; }
static int cc_compile(void *prog, int n, const char **opts)
{
    ck_assert_ptr_eq(prog, &cc);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(opts[0], "--arch=t1");
    return cc.compile;
}
static int cc_log_size(void *prog, size_t *size)
{
    ck_assert_ptr_eq(prog, &cc); /* never asked of a program that does not exist */
    cc.log_calls++;
    *size = strlen(cc.log);
    return CC_OK;
}
static int cc_log(void *prog, char *out)
{
    ck_assert_ptr_eq(prog, &cc);
    memcpy(out, cc.log, strlen(cc.log)); /* not terminated, as hipRTC's */
    return CC_OK;
}
static int cc_code_size(void *prog, const char *target, size_t *size)
{
    (void)prog, (void)target;
    *size = 4;
    return CC_OK;
}
static int cc_code(void *prog, const char *target, void *out)
{
    (void)prog, (void)target;
    memcpy(out, "CODE", 4);
    return CC_OK;
}
static int cc_lowered(void *prog, const char *expr, const char **out)
{
    (void)prog, (void)expr;
    *out = "lowered";
    return CC_OK;
}
static void cc_destroy(void **prog) { ck_assert_ptr_eq(*prog, &cc); *prog = NULL; }
static enum kpc_compile_class cc_classify(int r)
{
    return r == CC_OK ? KPC_COMPILE_OK : r == CC_NOMEM ? KPC_COMPILE_NOMEM : KPC_COMPILE_FAILED;
}
static const char *cc_error(int r) { return r == CC_NOMEM ? "OUT_OF_MEMORY" : "ERROR"; }

static const kpc_compiler fake_compiler = {
    .name = "fakeRTC", .arch_option = "--arch=", .default_name = "f.hip", .lock = NULL,
    .create = cc_create, .add_name = cc_add_name, .compile = cc_compile, .log_size = cc_log_size,
    .log = cc_log, .code_size = cc_code_size, .code = cc_code, .lowered = cc_lowered,
    .destroy = cc_destroy, .classify = cc_classify, .error_string = cc_error,
};

static kpc_status run_cc(int create, int compile, const char *log, kpc_build *b)
{
    cc.create = create, cc.compile = compile, cc.log = log, cc.log_calls = 0;
    kpc_source src = ts_src("x", NULL);
    return kpc_compile_run(&fake_compiler, "t1", &src, b);
}

START_TEST(compile_steps_map_failures_once)
{
    kpc_build b;
    /* success: code, names, the log */
    ck_assert_int_eq(run_cc(CC_OK, CC_OK, "fine", &b), KPC_OK);
    ck_assert_uint_eq(b.code_size, 4);
    ck_assert_mem_eq(b.code, "CODE", 4);
    ck_assert(kpc_names_valid(b.names, b.names_size));
    ck_assert_str_eq(b.log, "fine");
    kpc_platform_build_free(&b);
    /* refused before compiling: KPC_E_INVALID, no log read from a program never made */
    ck_assert_int_eq(run_cc(CC_REFUSED, CC_OK, "", &b), KPC_E_INVALID);
    ck_assert_int_eq(cc.log_calls, 0);
    ck_assert_ptr_null(b.code);
    kpc_platform_build_free(&b);
    /* out of memory, at create or at compile: KPC_E_NOMEM, never a compile error */
    ck_assert_int_eq(run_cc(CC_NOMEM, CC_OK, "", &b), KPC_E_NOMEM);
    kpc_platform_build_free(&b);
    ck_assert_int_eq(run_cc(CC_OK, CC_NOMEM, "", &b), KPC_E_NOMEM);
    kpc_platform_build_free(&b);
    /* a compile error with diagnostics: shared; without: local, with the error's name */
    ck_assert_int_eq(run_cc(CC_OK, CC_COMPILE, "f.hip:1: error: x\n", &b), KPC_E_COMPILE);
    ck_assert(!b.local);
    ck_assert_str_eq(b.log, "f.hip:1: error: x\n");
    kpc_platform_build_free(&b);
    ck_assert_int_eq(run_cc(CC_OK, CC_COMPILE, " \n", &b), KPC_E_COMPILE);
    ck_assert(b.local);
    ck_assert_str_eq(b.log, "fakeRTC: ERROR\n");
    ck_assert_ptr_null(b.code);
    kpc_platform_build_free(&b);
}
END_TEST

/* ---- the cache directory's owner ---------------------------------------------------- */
START_TEST(root_owns_the_paths)
{
    kpc_root *r;
    ck_assert_int_eq(kpc_root_open(dir, &r), KPC_OK);
    char real[4096];
    ck_assert(kpc_root_realpath(dir, real, sizeof real));
    ck_assert_str_eq(kpc_root_path(r), real);
    ck_assert(kpc_root_fd(r) >= 0 && kpc_root_v1_fd(r) >= 0);
    kpc_key k;
    memset(k.bytes, 0xab, 16);
    char path[4400], d[4400], want[4400];
    ck_assert_int_eq(kpc_root_record_path(r, &k, "gfx90a", "co", path, sizeof path, d, sizeof d), 0);
    snprintf(want, sizeof want, "%s/v1/gfx90a/ab/abababababababababababababababab.co", real);
    ck_assert_str_eq(path, want);
    /* relative to the held v1/ directory */
    ck_assert_str_eq(kpc_root_rel(r, path), "gfx90a/ab/abababababababababababababababab.co");
    ck_assert_int_eq(kpc_root_record_path(r, &k, "../x", "co", path, sizeof path, NULL, 0), -1);
    ck_assert_int_eq(kpc_root_record_path(r, &k, "tmp", "co", path, sizeof path, NULL, 0), -1);
    /* the segment name the index and the tools use */
    char a[96], b[96];
    kpc_root_segment_name(kpc_root_path(r), a, sizeof a);
    kpc_root_segment_name(real, b, sizeof b);
    ck_assert_str_eq(a, b);
    ck_assert(strncmp(a, "/kpc-", 5) == 0);
    /* a lock, then the same lock without waiting: held */
    const char *call;
    int fd = kpc_root_lock(r, "house-test", false, &call, NULL, 0);
    ck_assert_int_ge(fd, 0);
    pid_t pid = fork();
    if (pid == 0) {
        kpc_root *r2;
        if (kpc_root_open(dir, &r2) != KPC_OK)
            _exit(2);
        int fd2 = kpc_root_lock(r2, "house-test", true, &call, NULL, 0);
        _exit(fd2 < 0 && errno == EWOULDBLOCK ? 0 : 1);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(fd);
    kpc_root_close(r);
}
END_TEST

/* ---- the ABI: a program built against 1.0.0's kpc.h --------------------------------------- */
/* kpc_stats as 1.0.0 declared it (17 counters), and a canary where the struct ended: the
 * 1.0.0 symbol and a sized call with the old size must fill the fields and never touch
 * the canary (the struct has grown since; memset(sizeof) of the new one overran it). */
typedef struct stats_1_0 {
    uint64_t fields[17];
    uint64_t canary;
} stats_1_0;
#define CANARY 0x5a5a5a5aa5a5a5a5ull

START_TEST(old_size_stats_caller_not_overrun)
{
    _Static_assert(sizeof(((stats_1_0 *)0)->fields) == KPC_STATS_SIZE_1_0, "the 1.0.0 size");
    kpc_cache *c = ts_open(dir, 0, 64);
    kpc_stats now = stats_of(c);
    ck_assert_uint_eq(now.capacity, 64); /* a field of 1.0.0 that is not 0 */
    stats_1_0 old = {.canary = CANARY};
    ck_assert_int_eq((kpc_stats_get)(c, (kpc_stats *)&old), KPC_OK); /* the 1.0.0 symbol */
    ck_assert_uint_eq(old.canary, CANARY);
    ck_assert_uint_eq(old.fields[offsetof(kpc_stats, capacity) / 8], 64);
    memset(&old, 0xff, sizeof old.fields);
    old.canary = CANARY;
    ck_assert_int_eq(kpc_stats_get_sized(c, (kpc_stats *)&old, sizeof old.fields), KPC_OK);
    ck_assert_uint_eq(old.canary, CANARY);
    ck_assert_uint_eq(old.fields[offsetof(kpc_stats, capacity) / 8], 64);
    ck_assert_uint_eq(old.fields[offsetof(kpc_stats, mem_hits) / 8], 0);
    /* a newer caller's larger struct: the tail the library does not know reads 0 */
    struct {
        kpc_stats s;
        uint64_t newer[2];
        uint64_t canary;
    } big;
    memset(&big, 0xff, sizeof big);
    big.canary = CANARY;
    ck_assert_int_eq(kpc_stats_get_sized(c, &big.s, sizeof big.s + sizeof big.newer), KPC_OK);
    ck_assert_uint_eq(big.s.capacity, 64);
    ck_assert_uint_eq(big.newer[0], 0);
    ck_assert_uint_eq(big.newer[1], 0);
    ck_assert_uint_eq(big.canary, CANARY);
    ck_assert_int_eq(kpc_stats_get_sized(c, &big.s, 0), KPC_E_INVALID);
    kpc_cache_close(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("house");
    TCase *tiers = tcase_create("tiers");
    tcase_add_checked_fixture(tiers, setup, teardown);
    tcase_add_test(tiers, read_only_tier_hit_is_backfilled);
    tcase_add_test(tiers, coordinating_tier_hit_answers_before_the_copy);
    tcase_add_test(tiers, coordinating_tier_copy_made_by_close);
    tcase_add_test(tiers, coordinating_tier_build_publishes_once);
    tcase_add_test(tiers, coordinating_tier_hit_and_failed);
    tcase_add_test(tiers, coordinating_tier_failures);
    suite_add_tcase(s, tiers);
    TCase *faults = tcase_create("faults");
    tcase_add_checked_fixture(faults, setup, teardown);
    tcase_set_timeout(faults, 120);
    tcase_add_test(faults, compile_steps_map_failures_once);
    tcase_add_test(faults, local_fault_is_not_shared_fake);
#ifndef KPC_PLATFORM_NVIDIA
    tcase_add_test(faults, broken_tmpdir_does_not_poison_real);
    tcase_add_test(faults, nul_first_byte_is_invalid_real);
    tcase_add_test(faults, nul_first_byte_tool_real);
#endif
    suite_add_tcase(s, faults);
    TCase *root = tcase_create("root");
    tcase_add_checked_fixture(root, setup, teardown);
    tcase_add_test(root, root_owns_the_paths);
    tcase_add_test(root, old_size_stats_caller_not_overrun);
    suite_add_tcase(s, root);
    return ts_run_suite(s);
}
