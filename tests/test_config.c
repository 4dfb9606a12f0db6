/*
 * test_config.c - what kpc_cache_open and the tools refuse of a kpc_config and of a cache
 * directory path, beside the table's own checks (test_settings.c): a count field outside
 * its variable's range, a flags bit kpc.h does not define, and a path (KPC_CACHE_DIR,
 * kpc_config.cache_dir, --cache-dir, -d) holding a control character. Each is
 * KPC_E_INVALID (exit 2 for the tools), logged naming the field or the variable.
 */
#define _GNU_SOURCE
#include "support.h"
#include "base/log.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *dir; /* every cache of these cases is opened here (cache_dir), never the default */
static void setup(void) { dir = ts_tmpdir(); }
static void teardown(void) { ts_cleanup(dir); }

/* kpc_config's counts are held to their settings' ranges, and its flags to the known
 * bits: a field past them is KPC_E_INVALID, logged naming the field. */
START_TEST(config_fields_outside_their_range_are_refused)
{
    static const struct {
        kpc_config cfg;
        const char *field;
    } bad[] = {
        {{.struct_size = sizeof(kpc_config), .build_threads = 257}, "kpc_config.build_threads 257"},
        {{.struct_size = sizeof(kpc_config), .build_threads = SIZE_MAX}, "kpc_config.build_threads"},
        {{.struct_size = sizeof(kpc_config), .mem_max_programs = SIZE_MAX}, "kpc_config.mem_max_programs"},
        {{.struct_size = sizeof(kpc_config), .shm_entries = (1u << 24) + 1}, "kpc_config.shm_entries"},
        {{.struct_size = sizeof(kpc_config), .flags = 0x8}, "kpc_config.flags 0x8"},
        {{.struct_size = sizeof(kpc_config), .flags = KPC_NO_SHM | 0x80000000u}, "(0x80000000)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ts_log_begin(KPC_LOG_ERROR);
        kpc_cache *c = (kpc_cache *)1;
        kpc_config cfg = bad[i].cfg;
        cfg.cache_dir = dir;
        kpc_status s = kpc_cache_open(&cfg, &c);
        char *log = ts_log_end();
        ck_assert_msg(s == KPC_E_INVALID, "%s: %s", bad[i].field, kpc_status_str(s));
        ck_assert_ptr_null(c);
        ck_assert_msg(strstr(log, bad[i].field) != NULL, "the log does not name %s: %s", bad[i].field, log);
        free(log);
    }
    /* the edges of the ranges and every known flag: accepted */
    kpc_config good = {.struct_size = sizeof good, .cache_dir = dir, .build_threads = 256, .shm_entries = 1u << 24,
                       .flags = KPC_NO_SHM | KPC_NO_SOURCES};
    kpc_cache *c = NULL;
    ck_assert_int_eq(kpc_cache_open(&good, &c), KPC_OK);
    kpc_cache_close(c);
}
END_TEST

/* A cache dir holding a control character (a newline, a tab, DEL), relative or absolute,
 * from KPC_CACHE_DIR or kpc_config.cache_dir (--cache-dir): refused as a malformed value,
 * and the log line that names it stays one line. Nothing is created. */
START_TEST(a_cache_dir_with_a_control_character_is_refused)
{
    char cwd[4096];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    ck_assert_int_eq(chdir(dir), 0); /* a relative one that were accepted would land here */
    static const char *const paths[] = {"rel\ndir", "rel\tdir", "/tmp/kpc-abs\ndir", "del\x7f", "cr\r"};
    const char *kpc = getenv("KPC_TOOL"), *reset = getenv("KPC_SHM_RESET");
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        setenv("KPC_CACHE_DIR", paths[i], 1);
        ts_log_begin(KPC_LOG_ERROR);
        kpc_cache *c = (kpc_cache *)1;
        kpc_status s = kpc_cache_open(NULL, &c);
        char *log = ts_log_end();
        unsetenv("KPC_CACHE_DIR");
        ck_assert_msg(s == KPC_E_INVALID, "KPC_CACHE_DIR=\"%s\": %s", paths[i], kpc_status_str(s));
        ck_assert_ptr_null(c);
        ck_assert_msg(strstr(log, "KPC_CACHE_DIR=\"") && strstr(log, "no control character") &&
                          strstr(log, "\\x") && strchr(log, '\n') == log + strlen(log) - 1,
                      "KPC_CACHE_DIR=\"%s\": not one line naming it and its form: %s", paths[i], log);
        free(log);
        kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = paths[i]};
        ts_log_begin(KPC_LOG_ERROR);
        s = kpc_cache_open(&cfg, &c);
        free(ts_log_end());
        ck_assert_msg(s == KPC_E_INVALID, "kpc_config.cache_dir \"%s\": %s", paths[i], kpc_status_str(s));
        /* the tools: bad usage, from the variable or from --cache-dir */
        char env_dir[64];
        snprintf(env_dir, sizeof env_dir, "KPC_CACHE_DIR=%s", paths[i]);
        const char *env[] = {env_dir, NULL};
        const char *const runs[][6] = {{kpc, "stats", NULL}, {kpc, "compile", "--target", ts_target(), "x.hip", NULL},
                                       {reset, NULL}};
        for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
            char *err = NULL;
            int rc = ts_exec(runs[k], env, NULL, &err);
            ck_assert_msg(rc == 2 && strstr(err, "KPC_CACHE_DIR"), "%s %s with KPC_CACHE_DIR=\"%s\": exit %d: %s",
                          runs[k][0], runs[k][1] ? runs[k][1] : "", paths[i], rc, err);
            free(err);
        }
        const char *ls[] = {kpc, "ls", "--cache-dir", paths[i], NULL};
        const char *reset_d[] = {reset, "-d", paths[i], NULL};
        ck_assert_msg(ts_exec(ls, NULL, NULL, NULL) == 2, "kpc ls --cache-dir \"%s\"", paths[i]);
        ck_assert_msg(ts_exec(reset_d, NULL, NULL, NULL) == 2, "kpc-shm-reset -d \"%s\"", paths[i]);
    }
    ck_assert_int_eq(ts_count_entries(dir), 0);
    ck_assert_int_eq(access("/tmp/kpc-abs\ndir", F_OK), -1);
    ck_assert_int_eq(chdir(cwd), 0);
}
END_TEST

int main(void)
{
    const TTest *tests[] = {config_fields_outside_their_range_are_refused,
                            a_cache_dir_with_a_control_character_is_refused, NULL};
    return ts_main_case("config", "values", 120, setup, teardown, tests);
}
