/*
 * test_store_limit.c - the disk tree (level 3): the size limit holds in
 * LRU order, and a pruner racing readers never hands out a torn object.
 */
#define _GNU_SOURCE
#include "support.h"
#include "private_mounts.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "store_support.h"

static kpc_cache *open_limits(const char *d, uint64_t max_bytes, size_t mem_max)
{
    /* KPC_NO_SOURCES: records of an exact size (no request section) */
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = d, .disk_max_bytes = max_bytes,
                      .mem_max_programs = mem_max, .flags = KPC_NO_SOURCES};
    kpc_cache *c = NULL;
    ck_assert_int_eq(kpc_cache_open(&cfg, &c), KPC_OK);
    return c;
}

/* =====================================================================================
 * The size limit and LRU (fake platform: hundreds of objects).
 * ===================================================================================== */
#define LIMIT_N 300

static void set_age(const char *path, time_t when)
{
    struct timespec t[2] = {{when, 0}, {when, 0}};
    ck_assert_int_eq(utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW), 0);
}

START_TEST(size_limit_holds_and_recent_objects_survive)
{
    ts_fake_install();
    static char paths[LIMIT_N][4400];
    static uint64_t seen[LIMIT_N]; /* last mtime seen while the file was there; 0: gone */
    /* the record size first, to set a limit of 40 records */
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    for (int i = 0; i < LIMIT_N; i++) {
        kpc_source src = fake_src(i);
        kpc_key key;
        ts_key(ctx, &src, &key);
        ts_record_path(dir, ts_target(), &key, "co", paths[i], sizeof paths[i]);
    }
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    uint64_t rec = 256 + 128 + 4; /* fake code object + empty names table */
    uint64_t limit = 40 * rec;
    c = open_limits(dir, limit, 0);
    ctx = ts_context(c);

    /* phase A: 30 objects, then aged a day, one a minute apart; the last only 30 s old */
    time_t now = time(NULL);
    for (int i = 0; i < 30; i++) {
        kpc_source src = fake_src(i);
        free(ts_get_code(ctx, &src, &(size_t){0}));
        uint64_t size = 0;
        ck_assert_uint_ne(file_mtime(paths[i], &size), 0);
        ck_assert_uint_eq(size, rec);
    }
    for (int i = 0; i < 29; i++)
        set_age(paths[i], now - 86400 + 60 * i);
    set_age(paths[29], now - 30);

    /* phase B: use 0..4 (and 29) again from a new context: the hits refresh 0..4, while
     * 29's refresh is rate-limited (it was used less than a minute ago) */
    kpc_context *ctx2 = ts_context(c);
    uint64_t hits_before = stats_of(c).disk_hits;
    int used[] = {0, 1, 2, 3, 4, 29};
    for (size_t k = 0; k < 6; k++) {
        kpc_source src = fake_src(used[k]);
        free(ts_get_code(ctx2, &src, &(size_t){0}));
    }
    ck_assert_uint_eq(stats_of(c).disk_hits, hits_before + 6);
    kpc_context_destroy(ctx2);
    for (int i = 0; i < 5; i++)
        ck_assert_msg(file_mtime(paths[i], NULL) >= (uint64_t)(now - 5) * 1000000000ull,
                      "a hit did not refresh object %d", i);
    ck_assert_uint_eq(file_mtime(paths[29], NULL), (uint64_t)(now - 30) * 1000000000ull);
    for (int i = 5; i < 29; i++)
        ck_assert_uint_eq(file_mtime(paths[i], NULL), (uint64_t)(now - 86400 + 60 * i) * 1000000000ull);

    /* phase C: 270 more; after every write the limit holds, and whatever a prune removed
     * was no newer than anything it kept */
    for (int i = 0; i < 30; i++)
        seen[i] = file_mtime(paths[i], NULL);
    unsigned prunes = 0;
    for (int i = 30; i < LIMIT_N; i++) {
        kpc_source src = fake_src(i);
        free(ts_get_code(ctx, &src, &(size_t){0}));
        uint64_t bytes, files;
        tree_usage(dir, &bytes, &files);
        ck_assert_msg(bytes <= limit, "after write %d: %llu bytes on disk, limit %llu", i,
                      (unsigned long long)bytes, (unsigned long long)limit);
        uint64_t oldest_kept = UINT64_MAX, newest_removed = 0, sum = 0, n = 0;
        for (int j = 0; j <= i; j++) {
            uint64_t size = 0, m = file_mtime(paths[j], &size);
            if (m) {
                if (m < oldest_kept)
                    oldest_kept = m;
                sum += size, n++;
                seen[j] = m;
            } else if (seen[j]) {
                if (seen[j] > newest_removed)
                    newest_removed = seen[j];
                seen[j] = 0;
            }
        }
        ck_assert_msg(file_mtime(paths[i], NULL) != 0, "object %d was pruned as it was written", i);
        ck_assert_uint_eq(sum, bytes); /* nothing else on disk */
        ck_assert_uint_eq(n, files);
        if (newest_removed) {
            prunes++;
            ck_assert_msg(newest_removed <= oldest_kept, "after write %d a prune removed a newer object "
                          "than one it kept", i);
            ck_assert_msg(bytes <= limit / 10 * 9, "a prune stopped above 90%% of the limit");
        }
        if (i == 59) { /* the used ones survive the old unused ones */
            for (int j = 0; j < 5; j++)
                ck_assert_msg(seen[j] != 0, "object %d, used recently, was pruned before old ones", j);
            for (int j = 25; j < 60; j++)
                ck_assert_msg(seen[j] != 0, "object %d was pruned too early", j);
            for (int j = 5; j < 25; j++)
                ck_assert_msg(seen[j] == 0, "object %d, the oldest, survived", j);
        }
    }
    ck_assert_uint_ge(prunes, (LIMIT_N - 40) / 5);
    /* at the end: exactly the most recent objects are left */
    for (int j = LIMIT_N - 30; j < LIMIT_N; j++)
        ck_assert_msg(seen[j] != 0, "recent object %d is gone", j);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

/* =====================================================================================
 * Pruning from one process while others read: no error, never a torn object.
 * ===================================================================================== */
#define RACE_N 40
typedef struct race {
    kpc_key keys[RACE_N];
    size_t code_size[RACE_N], names_size[RACE_N];
    unsigned char code[RACE_N][256], names[RACE_N][64];
    uint64_t deadline;
    _Atomic uint64_t reads_ok, reads_missed, gets_ok, prunes, pruned_files, tool_prunes;
} race;

static int race_pruner(void *arg)
{
    race *r = arg;
    kpc_store *st;
    CHILD_REQUIRE(kpc_store_open(dir, 1ull << 40, &st) == KPC_OK);
    while (kpc__now_ns() < r->deadline) {
        kpc_prune_result res;
        CHILD_REQUIRE(kpc_store_prune(st, 8 * 400, NULL, &res) == KPC_OK);
        atomic_fetch_add(&r->prunes, 1);
        atomic_fetch_add(&r->pruned_files, res.files_removed);
    }
    kpc_store_close(st);
    return 0;
}

static int race_tool_pruner(void *arg)
{
    race *r = arg;
    const char *tool = getenv("KPC_TOOL");
    CHILD_REQUIRE(tool != NULL);
    while (kpc__now_ns() < r->deadline) {
        const char *argv[] = {tool, "prune", "--cache-dir", dir, "--max-size", "2K", NULL};
        char *out = NULL, *err = NULL;
        int rc = ts_exec(argv, NULL, &out, &err);
        if (rc != 0)
            fprintf(stderr, "kpc prune: exit %d: %s%s", rc, out, err);
        CHILD_REQUIRE(rc == 0);
        free(out), free(err);
        atomic_fetch_add(&r->tool_prunes, 1);
    }
    return 0;
}

static int race_reader(void *arg)
{
    race *r = arg;
    kpc_store *st;
    CHILD_REQUIRE(kpc_store_open(dir, 1ull << 40, &st) == KPC_OK);
    for (unsigned n = 0; kpc__now_ns() < r->deadline; n++) {
        int i = (int)(n % RACE_N);
        kpc_record rec;
        kpc_status s = kpc_store_read(st, &r->keys[i], ts_target(), KPC_RECORD_CODE, &rec);
        if (s == KPC_E_NOT_FOUND) {
            atomic_fetch_add(&r->reads_missed, 1);
            continue;
        }
        if (s != KPC_OK)
            fprintf(stderr, "reader: object %d: %s\n", i, kpc_status_str(s));
        CHILD_REQUIRE(s == KPC_OK); /* KPC_E_CORRUPT would be a torn object */
        CHILD_REQUIRE(rec.code_size == r->code_size[i] && rec.names_size == r->names_size[i]);
        CHILD_REQUIRE(memcmp(rec.payload, r->code[i], rec.code_size) == 0);
        CHILD_REQUIRE(memcmp((char *)rec.payload + rec.code_size, r->names[i], rec.names_size) == 0);
        kpc_record_free(&rec);
        atomic_fetch_add(&r->reads_ok, 1);
    }
    kpc_store_close(st);
    return 0;
}

static int race_getter(void *arg)
{
    race *r = arg;
    /* one program per context map: every get goes to the index and the disk */
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir, .mem_max_programs = 1};
    kpc_cache *c = NULL;
    CHILD_REQUIRE(kpc_cache_open(&cfg, &c) == KPC_OK);
    kpc_context *ctx = NULL;
    CHILD_REQUIRE(kpc_context_create_for_target(c, ts_target(), &ctx) == KPC_OK);
    for (unsigned n = 0; kpc__now_ns() < r->deadline; n++) {
        int i = (int)(n % RACE_N);
        kpc_source src = fake_src(i);
        kpc_program *p = NULL;
        CHILD_REQUIRE(kpc_program_get(ctx, &src, &p) == KPC_OK);
        size_t size;
        const void *code = kpc_program_code(p, &size);
        CHILD_REQUIRE(size == r->code_size[i] && memcmp(code, r->code[i], size) == 0);
        kpc_program_release(p);
        atomic_fetch_add(&r->gets_ok, 1);
    }
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    return 0;
}

START_TEST(pruning_while_reading_never_tears)
{
    ts_fake_install();
    race *r = shared_mem(sizeof *r);
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    for (int i = 0; i < RACE_N; i++) {
        kpc_source src = fake_src(i);
        ts_key(ctx, &src, &r->keys[i]);
        kpc_program *p = NULL;
        ck_assert_int_eq(kpc_program_get(ctx, &src, &p), KPC_OK);
        ck_assert_uint_le(p->code_size, sizeof r->code[i]);
        ck_assert_uint_le(p->names_size, sizeof r->names[i]);
        memcpy(r->code[i], p->code, p->code_size);
        memcpy(r->names[i], p->names, p->names_size);
        r->code_size[i] = p->code_size;
        r->names_size[i] = p->names_size;
        kpc_program_release(p);
    }
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    unsigned builds_before = ts_fake_compiles();
    r->deadline = kpc__now_ns() + 2000000000ull;
    kpc__log_level = 0; /* misses and prunes are expected here */
    pid_t pids[] = {spawn(race_pruner, r), spawn(race_tool_pruner, r), spawn(race_reader, r),
                    spawn(race_getter, r)};
    for (size_t i = 0; i < sizeof pids / sizeof pids[0]; i++)
        ck_assert_msg(reap(pids[i]) == 0, "child %zu failed", i);
    printf("prune race: %llu prunes (%llu files) + %llu tool prunes; %llu reads, %llu misses; "
           "%llu gets, %u rebuilt\n", (unsigned long long)r->prunes, (unsigned long long)r->pruned_files,
           (unsigned long long)r->tool_prunes, (unsigned long long)r->reads_ok,
           (unsigned long long)r->reads_missed, (unsigned long long)r->gets_ok,
           ts_fake_compiles() - builds_before);
    /* the race really ran: files were pruned under readers, reads both hit and missed,
     * and the getter rebuilt what was pruned */
    ck_assert_uint_gt(r->pruned_files, 0);
    ck_assert_uint_gt(r->tool_prunes, 0);
    ck_assert_uint_gt(r->reads_ok, 0);
    ck_assert_uint_gt(r->reads_missed, 0);
    ck_assert_uint_gt(r->gets_ok, RACE_N);
    ck_assert_uint_gt(ts_fake_compiles(), builds_before);
    ck_assert_int_eq(ts_tmp_entries(dir), 0);
    munmap(r, sizeof *r);
}
END_TEST

int main(void)
{
    const TTest *tests[] = {size_limit_holds_and_recent_objects_survive,
                            pruning_while_reading_never_tears, NULL};
    return ts_main_case("store", "limit", 120, setup, teardown, tests);
}
