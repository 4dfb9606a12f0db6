/*
 * test_tool_exit.c - the kpc tool's exit codes: bad usage exits 2, help 0,
 * and every subcommand succeeds and fails with the right code.
 */
#define _GNU_SOURCE
#include "support.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tool_support.h"

/* The same with an environment entry ("K=V"). */
static int kpc_env(const char *env, char **out, char **err, const char *a1, const char *a2, const char *a3)
{
    const char *argv[] = {tool, a1, a2, a3, NULL};
    const char *envs[] = {env, NULL};
    return ts_exec(argv, envs, out, err);
}

/* ---- exit codes ------------------------------------------------------------------------ */
START_TEST(bad_usage_exits_2_and_help_exits_0)
{
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(kpc(NULL, &err, NULL), 2);
    ck_assert_ptr_nonnull(strstr(err, "usage"));
    free(err);
    ck_assert_int_eq(kpc(NULL, NULL, "frobnicate", NULL), 2);
    ck_assert_int_eq(kpc(NULL, NULL, "--cache-dir", dir, "ls", NULL), 2); /* options follow the command */
    ck_assert_int_eq(kpc(&out, NULL, "--help", NULL), 0);
    ck_assert_ptr_nonnull(strstr(out, "usage"));
    free(out);
    const char *subs[] = {"ls", "stats", "verify", "prune", "clear", "compile"};
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        ck_assert_msg(kpc(NULL, NULL, subs[i], "--cache-dir", dir, "--bogus", NULL) == 2, "%s --bogus", subs[i]);
        ck_assert_msg(kpc(NULL, NULL, subs[i], "--cache-dir", NULL) == 2, "%s --cache-dir (no DIR)", subs[i]);
        out = NULL;
        ck_assert_msg(kpc(&out, NULL, subs[i], "-h", NULL) == 0, "%s -h", subs[i]);
        ck_assert_msg(strstr(out, "usage") != NULL, "%s -h printed no usage:\n%s", subs[i], out);
        free(out);
        ck_assert_msg(kpc(NULL, NULL, subs[i], "--help", NULL) == 0, "%s --help", subs[i]);
        if (i < 5)
            ck_assert_msg(kpc(NULL, NULL, subs[i], "--cache-dir", dir, "operand", NULL) == 2, "%s operand", subs[i]);
    }
    ck_assert_int_eq(kpc(NULL, NULL, "ls", "--cache-dir", dir, "--max-size", "1M", NULL), 2);
    ck_assert_int_eq(kpc(NULL, NULL, "stats", "--cache-dir", dir, "--stale", NULL), 2);
    ck_assert_int_eq(kpc(NULL, NULL, "prune", "--cache-dir", dir, "--max-size", "12Q", NULL), 2);
    ck_assert_int_eq(kpc(NULL, NULL, "prune", "--cache-dir", dir, "--max-size", NULL), 2);
    ck_assert_int_eq(kpc(NULL, NULL, "compile", "--cache-dir", dir, "--target", ts_target(), NULL), 2);
    ck_assert_int_eq(kpc(NULL, NULL, "compile", "--cache-dir", dir, "-j", "0", "x.hip", NULL), 2);
    ck_assert_int_eq(kpc(NULL, NULL, "compile", "--cache-dir", dir, "-o", "/nonexistent/dir", "a.hip", "b.hip",
                         NULL), 2);
    /* -o DIR writes DIR/NAME.co: two files of one name would overwrite each other */
    err = NULL;
    ck_assert_int_eq(kpc(NULL, &err, "compile", "--cache-dir", dir, "-o", "/tmp", "a/x.hip", "b/x.hip", NULL), 2);
    ck_assert_msg(strstr(err, "x.hip") != NULL, "%s", err);
    free(err);
    /* a malformed environment is bad usage too, named in the message */
    err = NULL;
    ck_assert_int_eq(kpc_env("KPC_CACHE_MAX_SIZE=lots", NULL, &err, "ls", "--cache-dir", dir), 2);
    ck_assert_ptr_nonnull(strstr(err, "KPC_CACHE_MAX_SIZE"));
    free(err);
    const char *compile_argv[] = {tool, "compile", "--cache-dir", dir, "--target", ts_target(), "x.hip", NULL};
    const char *bad_env[] = {"KPC_LOG=loud", NULL};
    err = NULL;
    ck_assert_int_eq(ts_exec(compile_argv, bad_env, NULL, &err), 2);
    ck_assert_ptr_nonnull(strstr(err, "KPC_LOG"));
    free(err);
    ck_assert(is_absent(dir)); /* nothing above created the cache dir */
}
END_TEST

START_TEST(every_subcommand_succeeds_and_fails_with_the_right_code)
{
    char *good = side_file("good.hip", ts_kernel_source(0));
    char *good2 = side_file("good2.hip", ts_kernel_source(1));
    char *bad = side_file("bad.hip", ts_bad_source());
    char *out = NULL, *err = NULL;
    /* an absent cache dir is an empty cache */
    ck_assert_int_eq(kpc(NULL, NULL, "ls", "--cache-dir", dir, NULL), 0);
    ck_assert_int_eq(kpc(NULL, NULL, "verify", "--cache-dir", dir, NULL), 0);
    ck_assert_int_eq(kpc(NULL, NULL, "stats", "--cache-dir", dir, NULL), 0);
    ck_assert_int_eq(kpc(NULL, NULL, "prune", "--cache-dir", dir, NULL), 0);
    ck_assert_int_eq(kpc(NULL, NULL, "clear", "--cache-dir", dir, NULL), 0);

    /* compile: built, then hit */
    ck_assert_int_eq(kpc(&out, NULL, "compile", "--cache-dir", dir, "--target", ts_target(), good, NULL), 0);
    ck_assert_msg(strncmp(out, "built", 5) == 0, "first compile said:\n%s", out);
    free(out);
    ck_assert_int_eq(kpc(&out, NULL, "compile", "--cache-dir", dir, "--target", ts_target(), good, NULL), 0);
    ck_assert_msg(strncmp(out, "hit", 3) == 0, "second compile said:\n%s", out);
    free(out);
    /* --json, two files: one hit, one built */
    ck_assert_int_eq(kpc(&out, NULL, "compile", "--json", "-j", "1", "--cache-dir", dir, "--target", ts_target(),
                         good, good2, NULL), 0);
    cJSON *j = parse(out);
    ck_assert(cJSON_IsArray(j) && cJSON_GetArraySize(j) == 2);
    ck_assert_str_eq(str(cJSON_GetArrayItem(j, 0), "result"), "hit");
    ck_assert_str_eq(str(cJSON_GetArrayItem(j, 1), "result"), "built");
    ck_assert_str_eq(str(cJSON_GetArrayItem(j, 1), "status"), "KPC_OK");
    ck_assert_str_eq(str(cJSON_GetArrayItem(j, 0), "file"), good);
    ck_assert(num(cJSON_GetArrayItem(j, 1), "size") > 0 && num(cJSON_GetArrayItem(j, 1), "seconds") > 0);
    cJSON_Delete(j);
    free(out);
    /* -o writes the code object itself */
    char *obj = side_file("good.co", "");
    ck_assert_int_eq(kpc(NULL, NULL, "compile", "--cache-dir", dir, "--target", ts_target(), "-o", obj, good, NULL), 0);
    size_t size;
    void *code = ts_read_file(obj, &size);
    ck_assert(ts_is_code_object(code, size));
    free(code);
    /* compile failures: a compile error (with the compiler's log), a missing file, an
     * unknown target */
    ck_assert_int_eq(kpc(&out, &err, "compile", "--cache-dir", dir, "--target", ts_target(), bad, NULL), 1);
    ck_assert_msg(strstr(err, "KPC_E_COMPILE") && strstr(err, "undeclared_thing"), "stderr:\n%s", err);
    ck_assert_msg(strncmp(out, "failed", 6) == 0, "stdout:\n%s", out);
    free(out), free(err);
    ck_assert_int_eq(kpc(NULL, NULL, "compile", "--cache-dir", dir, "--target", ts_target(), "/nonexistent.hip",
                         NULL), 1);
    ck_assert_int_eq(kpc(NULL, NULL, "compile", "--cache-dir", dir, "--target", "gfx9999", good, NULL), 1);

    /* the data commands on a populated cache: 2 objects and 1 log */
    ck_assert_int_eq(kpc(&out, NULL, "ls", "--cache-dir", dir, NULL), 0);
    ck_assert_ptr_nonnull(strstr(out, "good.hip"));
    ck_assert_ptr_nonnull(strstr(out, "bad.hip"));
    free(out);
    ck_assert_int_eq(kpc(&out, NULL, "verify", "--cache-dir", dir, NULL), 0);
    ck_assert_msg(strstr(out, "checked 3 files, removed 0") != NULL, "verify said:\n%s", out);
    free(out);
    ck_assert_int_eq(kpc(&out, NULL, "stats", "--cache-dir", dir, NULL), 0);
    ck_assert_ptr_nonnull(strstr(out, "in 3 files"));
    free(out);
    ck_assert_int_eq(kpc(&out, NULL, "prune", "--cache-dir", dir, NULL), 0);
    ck_assert_msg(strstr(out, "removed 0 of 3 files") != NULL, "prune said:\n%s", out);
    free(out);
    ck_assert_int_eq(kpc(&out, NULL, "clear", "--cache-dir", dir, NULL), 0);
    ck_assert_msg(strstr(out, "removed 3 files") != NULL, "clear said:\n%s", out);
    free(out);
    ck_assert_int_eq(kpc(&out, NULL, "ls", "--json", "--cache-dir", dir, NULL), 0);
    j = parse(out);
    ck_assert(cJSON_IsArray(j) && cJSON_GetArraySize(j) == 0);
    cJSON_Delete(j);
    free(out);

    /* a cache dir the library would refuse: a regular file */
    const char *data_cmds[] = {"ls", "stats", "verify", "prune", "clear"};
    for (size_t i = 0; i < 5; i++) {
        err = NULL;
        ck_assert_msg(kpc(NULL, &err, data_cmds[i], "--cache-dir", good, NULL) == 1, "%s on a file", data_cmds[i]);
        ck_assert_msg(strstr(err, "not a directory") != NULL, "%s said:\n%s", data_cmds[i], err);
        free(err);
    }
    if (geteuid() == 0) { /* and a directory another user owns */
        char *theirs = side_file("theirs", "");
        unlink(theirs);
        ck_assert_int_eq(mkdir(theirs, 0700), 0);
        ck_assert_int_eq(chown(theirs, 65534, 65534), 0);
        for (size_t i = 0; i < 5; i++)
            ck_assert_msg(kpc(NULL, NULL, data_cmds[i], "--cache-dir", theirs, NULL) == 1, "%s on uid 65534's dir",
                          data_cmds[i]);
        ck_assert_int_eq(rmdir(theirs), 0);
        free(theirs);
    }
    free(good), free(good2), free(bad), free(obj);
}
END_TEST

int main(void)
{
    const TTest *tests[] = {bad_usage_exits_2_and_help_exits_0,
                            every_subcommand_succeeds_and_fails_with_the_right_code, NULL};
    return ts_main_case("tool", "exit", 120, setup, teardown, tests);
}
