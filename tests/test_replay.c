/*
 * test_replay.c - `kpc replay` and `kpc prune --stale` through real hipRTC.
 *
 *   upgrade: N sources built; the compiler's identity switched (the identity memo is
 *     rewritten with another id: while the compiler's files are unchanged, every process
 *     takes the memo's word, as it would take a new compiler's); `kpc replay -j 2`
 *     rebuilds every request; a process under the new identity then gets every source
 *     with 0 builds; `kpc prune --stale` leaves exactly the N new records
 *   new target: `--from-target gfx90a --target gfx1030` gives gfx1030 objects for all,
 *     and a request that no longer compiles (an #error for gfx1030) is listed with its
 *     log while the others are built; exit status 0
 *   records that keep no request (KPC_KEEP_SOURCES=0) are counted, not replayed
 */
#define _GNU_SOURCE
#include "support.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N 3

static kpc_source source_n(int k, char names[][16])
{
    snprintf(names[k], 16, "r%d.hip", k);
    return ts_src(ts_kernel_source(10 + k), names[k]);
}

/* Build the N sources (and extra, if not NULL) for target in dir; returns builds. */
static uint64_t build_all(const char *dir, const char *target, const kpc_source *extra)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx;
    ck_assert_int_eq(kpc_context_create_for_target(c, target, &ctx), KPC_OK);
    char names[N][16];
    for (int k = 0; k < N; k++) {
        kpc_source s = source_n(k, names);
        size_t size;
        free(ts_get_code(ctx, &s, &size));
    }
    if (extra) {
        size_t size;
        free(ts_get_code(ctx, extra, &size));
    }
    kpc_stats st;
    kpc_stats_get(c, &st);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    return st.builds;
}

static cJSON *tool_json(const char *const *args, int want_rc)
{
    const char *argv[16] = {getenv("KPC_TOOL")};
    int n = 1;
    for (; args[n - 1]; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    char *out = NULL, *err = NULL;
    int rc = ts_exec(argv, NULL, &out, &err);
    ck_assert_msg(rc == want_rc, "kpc %s: exit %d: %s%s", args[0], rc, out, err);
    cJSON *j = cJSON_Parse(out);
    ck_assert_msg(j != NULL, "not JSON: %s", out);
    free(out);
    free(err);
    return j;
}

static double num(cJSON *j, const char *field)
{
    cJSON *v = cJSON_GetObjectItem(j, field);
    ck_assert_msg(cJSON_IsNumber(v), "no %s", field);
    return v->valuedouble;
}

/* Rewrite the identity memo with another id (new_id gets it). */
static void switch_identity(const char *dir, uint8_t new_id[16])
{
    char path[4400], root[4096];
    ck_assert_ptr_nonnull(realpath(dir, root));
    snprintf(path, sizeof path, "%s/v1/compiler-%s.id", root, kpc_platform_get()->name);
    size_t size;
    char *memo = ts_read_file(path, &size);
    ck_assert_ptr_nonnull(memo);
    char *id = strstr(memo, "\nid ");
    ck_assert_ptr_nonnull(id);
    id += 4;
    for (int i = 0; i < 32; i++)
        id[i] = id[i] == 'f' ? '0' : 'f'; /* another id, every digit changed */
    char hex[33];
    memcpy(hex, id, 32);
    hex[32] = '\0';
    ck_assert(kpc_key_parse(hex, (kpc_key *)new_id));
    ts_write_file(path, memo, size);
    free(memo);
}

typedef struct census {
    const uint8_t *id;
    const char *target;
    int with_id, other, of_target;
} census;

static int count_record(const kpc_store_entry *e, void *arg)
{
    census *c = arg;
    if (e->rec->kind != KPC_RECORD_CODE)
        return 0;
    if (memcmp(e->rec->compiler_id, c->id, 16) == 0)
        c->with_id++;
    else
        c->other++;
    if (c->target && strcmp(e->rec->target, c->target) == 0)
        c->of_target++;
    return 0;
}

static census take_census(const char *dir, const uint8_t *id, const char *target)
{
    kpc_store *st;
    ck_assert_int_eq(kpc_store_open(dir, 1ull << 30, &st), KPC_OK);
    census c = {.id = id, .target = target};
    ck_assert_int_eq(kpc_store_walk(st, false, count_record, &c), KPC_OK);
    kpc_store_close(st);
    return c;
}

START_TEST(replay_after_upgrade)
{
    char *dir = ts_tmpdir();
    ck_assert_uint_eq(build_all(dir, ts_target(), NULL), N);
    /* one record that keeps no request: counted, not replayable */
    setenv("KPC_KEEP_SOURCES", "0", 1);
    kpc_source secret = ts_src(ts_kernel_source(20), "secret.hip");
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    size_t size;
    free(ts_get_code(ctx, &secret, &size));
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    unsetenv("KPC_KEEP_SOURCES");

    uint8_t new_id[16];
    switch_identity(dir, new_id);
    const char *replay[] = {"replay", "-j", "2", "--json", "--cache-dir", dir, NULL};
    cJSON *j = tool_json(replay, 0);
    ck_assert_int_eq((int)num(j, "requests"), N);
    ck_assert_int_eq((int)num(j, "built"), N);
    ck_assert_int_eq((int)num(j, "failed"), 0);
    ck_assert_int_eq((int)num(j, "without_request"), 1);
    cJSON_Delete(j);
    census cs = take_census(dir, new_id, NULL);
    ck_assert_int_eq(cs.with_id, N);
    ck_assert_int_eq(cs.other, N + 1);

    /* the application under the new compiler finds every object built */
    ck_assert_uint_eq(build_all(dir, ts_target(), NULL), 0);

    const char *prune[] = {"prune", "--stale", "--json", "--cache-dir", dir, NULL};
    j = tool_json(prune, 0);
    ck_assert_int_eq((int)num(j, "files_removed"), N + 1);
    cJSON_Delete(j);
    cs = take_census(dir, new_id, NULL);
    ck_assert_int_eq(cs.with_id, N);
    ck_assert_int_eq(cs.other, 0);
    /* a second replay has nothing to do */
    j = tool_json(replay, 0);
    ck_assert_int_eq((int)num(j, "requests"), 0);
    cJSON_Delete(j);
    ts_cleanup(dir);
}
END_TEST

START_TEST(replay_for_new_target)
{
    char *dir = ts_tmpdir();
    kpc_source only = ts_src("#if defined(__gfx1030__) || defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900\n"
                             "#error \"this kernel does not support the new target\"\n#endif\n"
                             "extern \"C\" __global__ void only_old(float *x) { x[0] = 1.0f; }\n",
                             "only_old.hip");
    ck_assert_uint_eq(build_all(dir, ts_target(), &only), N + 1);
    const char *replay[] = {"replay", "--from-target", ts_target(), "--target", ts_target2(), "-j", "2",
                            "--json", "--cache-dir", dir, NULL};
    cJSON *j = tool_json(replay, 0);
    ck_assert_int_eq((int)num(j, "requests"), N + 1);
    ck_assert_int_eq((int)num(j, "built"), N);
    ck_assert_int_eq((int)num(j, "failed"), 1);
    cJSON *f = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "failures"), 0);
    ck_assert_ptr_nonnull(f);
    ck_assert_str_eq(cJSON_GetObjectItem(f, "name")->valuestring, "only_old.hip");
    ck_assert_str_eq(cJSON_GetObjectItem(f, "status")->valuestring, "KPC_E_COMPILE");
    ck_assert_ptr_nonnull(strstr(cJSON_GetObjectItem(f, "log")->valuestring, "does not support"));
    cJSON_Delete(j);
    /* an application on the new target finds every object built */
    ck_assert_uint_eq(build_all(dir, ts_target2(), NULL), 0);
    uint8_t none[16] = {0};
    census cs = take_census(dir, none, ts_target2());
    ck_assert_int_eq(cs.of_target, N);
    /* the text report lists the failure too */
    const char *argv[] = {getenv("KPC_TOOL"), "replay", "--from-target", ts_target(), "--target", ts_target2(),
                          "--cache-dir", dir, NULL};
    char *out = NULL;
    ck_assert_int_eq(ts_exec(argv, NULL, &out, NULL), 0);
    ck_assert_msg(strstr(out, "1 failed") && strstr(out, "only_old.hip"), "%s", out);
    free(out);
    ts_cleanup(dir);
}
END_TEST

START_TEST(replay_usage)
{
    const char *argv[] = {getenv("KPC_TOOL"), "replay", "--from-target", "gfx90a", NULL};
    char *err = NULL;
    ck_assert_int_eq(ts_exec(argv, NULL, NULL, &err), 2);
    ck_assert_ptr_nonnull(strstr(err, "needs --target"));
    free(err);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("replay");
    TCase *tc = tcase_create("replay");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, replay_after_upgrade);
    tcase_add_test(tc, replay_for_new_target);
    tcase_add_test(tc, replay_usage);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
