/*
 * test_store_off.c - the disk tree (level 3) turned off: KPC_DISABLE and
 * KPC_NO_DISK; `kpc prune --stale` removes other compilers' records.
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

/* =====================================================================================
 * KPC_DISABLE=1 and KPC_NO_DISK.
 * ===================================================================================== */
static void check_no_disk_level(unsigned flags)
{
    /* a cache dir with an object already in it: it must be neither read nor written */
    kpc_source a = real_src(0), b = real_src(1);
    char *base = strdup(dir);
    *strrchr(base, '/') = '\0';
    char populated[4200], fresh[4200];
    snprintf(populated, sizeof populated, "%s", dir);
    snprintf(fresh, sizeof fresh, "%s/fresh", base);
    cached_obj o;
    if (flags == 0)
        unsetenv("KPC_DISABLE");
    cache_obj(populated, &a, &o);
    if (flags == 0)
        setenv("KPC_DISABLE", "1", 1);
    uint64_t mtime = file_mtime(o.path, NULL);
    for (int round = 0; round < 2; round++) {
        const char *d = round == 0 ? populated : fresh;
        for (int handle = 0; handle < 2; handle++) {
            kpc_cache *c = ts_open(d, flags, 0);
            ck_assert_ptr_null(c->store);
            ck_assert_ptr_null(c->index);
            kpc_context *ctx = ts_context(c);
            size_t size;
            void *code = ts_get_code(ctx, &a, &size);
            ck_assert(size == o.code_size && memcmp(code, o.code, size) == 0);
            free(code);
            code = ts_get_code(ctx, &a, &size); /* the in-memory map still works */
            free(code);
            code = ts_get_code(ctx, &b, &size);
            free(code);
            kpc_stats st = stats_of(c);
            ck_assert_uint_eq(st.builds, 2); /* every new cache handle compiles again */
            ck_assert_uint_eq(st.disk_hits, 0);
            ck_assert_uint_eq(st.mem_hits, 1);
            ck_assert_uint_eq(st.disk_files, 0);
            kpc_context_destroy(ctx);
            kpc_cache_close(c);
        }
    }
    ck_assert(is_absent(fresh)); /* not even created */
    uint64_t bytes, files;
    tree_usage(populated, &bytes, &files);
    ck_assert_uint_eq(files, 1); /* b was not written */
    ck_assert_uint_eq(file_mtime(o.path, NULL), mtime);
    free(base);
    free(o.code), free(o.file);
}

START_TEST(kpc_disable_turns_disk_and_shm_off)
{
    setenv("KPC_DISABLE", "1", 1);
    check_no_disk_level(0);
    unsetenv("KPC_DISABLE");
}
END_TEST

START_TEST(no_disk_flag_turns_disk_off)
{
    unsetenv("KPC_DISABLE");
    check_no_disk_level(KPC_NO_DISK);
}
END_TEST

/* =====================================================================================
 * `kpc prune --stale`.
 * ===================================================================================== */
START_TEST(prune_stale_removes_other_compilers_records)
{
    const char *tool = getenv("KPC_TOOL");
    ck_assert_msg(tool != NULL, "KPC_TOOL is not set (run through ctest)");
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source srcs[2] = {real_src(0), real_src(1)};
    kpc_key keys[2];
    void *codes[2];
    size_t sizes[2];
    for (int i = 0; i < 2; i++) {
        ts_key(ctx, &srcs[i], &keys[i]);
        codes[i] = ts_get_code(ctx, &srcs[i], &sizes[i]);
    }
    /* forge a code record and a log record built by "another compiler" */
    kpc_record rec;
    memset(&rec, 0, sizeof rec);
    memset(rec.key.bytes, 0xab, 16);
    rec.kind = KPC_RECORD_CODE;
    rec.created_ns = kpc__wall_ns();
    snprintf(rec.target, sizeof rec.target, "%s", ts_target());
    snprintf(rec.source_name, sizeof rec.source_name, "old.hip");
    memset(rec.compiler_id, 0x11, 16);
    void *names;
    size_t names_size;
    ck_assert_int_eq(kpc_names_encode(NULL, NULL, 0, &names, &names_size), KPC_OK);
    rec.code_size = sizes[0];
    rec.names_size = names_size;
    ck_assert_int_eq(kpc_store_write(c->store, &rec, codes[0], names, names_size), KPC_OK);
    kpc_record log_rec = rec;
    memset(log_rec.key.bytes, 0xcd, 16);
    log_rec.kind = KPC_RECORD_LOG;
    ck_assert_int_eq(kpc_store_write(c->store, &log_rec, "old compiler's log", NULL, 0), KPC_OK);
    free(names);
    char forged[2][4400];
    ts_record_path(dir, ts_target(), &rec.key, "co", forged[0], sizeof forged[0]);
    ts_record_path(dir, ts_target(), &log_rec.key, "log", forged[1], sizeof forged[1]);
    ck_assert(!is_absent(forged[0]) && !is_absent(forged[1]));
    /* a forged record is sound: it reads back */
    kpc_record back;
    ck_assert_int_eq(kpc_store_read(c->store, &rec.key, ts_target(), KPC_RECORD_CODE, &back), KPC_OK);
    kpc_record_free(&back);

    /* without --stale nothing goes (far under the limit) */
    const char *plain[] = {tool, "prune", "--cache-dir", dir, NULL};
    ck_assert_int_eq(ts_exec(plain, NULL, NULL, NULL), 0);
    ck_assert(!is_absent(forged[0]) && !is_absent(forged[1]));
    char *out = NULL;
    const char *argv[] = {tool, "prune", "--stale", "--json", "--cache-dir", dir, NULL};
    /* run where hipRTC's hidden options differ from the application's: they change keys,
     * not the compiler, so the current compiler's records must stay all the same */
    const char *env[] = {"GPU_ENABLE_WAVE32_MODE=1", NULL};
    int rc = ts_exec(argv, env, &out, NULL);
    ck_assert_msg(rc == 0, "kpc prune --stale: exit %d: %s", rc, out);
    cJSON *j = cJSON_Parse(out);
    ck_assert_msg(j != NULL, "kpc prune --stale --json printed no JSON:\n%s", out);
    const cJSON *removed = cJSON_GetObjectItemCaseSensitive(j, "files_removed");
    const cJSON *before = cJSON_GetObjectItemCaseSensitive(j, "files_before");
    ck_assert_msg(cJSON_IsNumber(removed) && removed->valuedouble == 2, "kpc prune --stale said:\n%s", out);
    ck_assert_msg(cJSON_IsNumber(before) && before->valuedouble == 4, "kpc prune --stale said:\n%s", out);
    cJSON_Delete(j);
    free(out);
    ck_assert(is_absent(forged[0]) && is_absent(forged[1]));
    for (int i = 0; i < 2; i++) { /* the current compiler's records stay */
        assert_record_valid(dir, &keys[i], codes[i], sizes[i]);
        free(codes[i]);
    }
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

int main(void)
{
    const TTest *tests[] = {kpc_disable_turns_disk_and_shm_off, no_disk_flag_turns_disk_off,
                            prune_stale_removes_other_compilers_records, NULL};
    return ts_main_case("store", "off", 120, setup, teardown, tests);
}
