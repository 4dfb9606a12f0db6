/*
 * test_tool_messages.c - what the kpc tool says: one-line usage errors
 * with a hint, help and version, the real problem named, sizes labelled, help examples
 * valid for this build.
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

/* ---- messages: what a user reads ------------------------------------------------------- */

/* Does any line of text end in a space, or run over `width` characters? */
static bool has_trailing_space(const char *text)
{
    for (const char *p = text; (p = strchr(p, '\n')) != NULL; p++)
        if (p > text && p[-1] == ' ')
            return true;
    return false;
}

static size_t longest_line(const char *text)
{
    size_t best = 0;
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        best = n > best ? n : best;
        p += n + (p[n] == '\n');
    }
    return best;
}

START_TEST(a_usage_error_is_one_line_and_a_hint)
{
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(kpc(&out, &err, "stats", "--bogus", NULL), 2);
    ck_assert_str_eq(err, "kpc stats: unknown option '--bogus'\nsee 'kpc stats --help'\n");
    ck_assert_str_eq(out, "");
    free(out), free(err);
    ck_assert_int_eq(kpc(NULL, &err, "compile", "--cache-dir", dir, "--target", ts_target(), NULL), 2);
    ck_assert_str_eq(err, "kpc compile: compile needs at least one FILE\nsee 'kpc compile --help'\n");
    free(err);
    ck_assert_int_eq(kpc(NULL, &err, "compile", "-j", "lots", "x.hip", NULL), 2);
    ck_assert_str_eq(err, "kpc compile: -j takes a whole number from 1 to 1024, not \"lots\"\nsee 'kpc compile --help'\n");
    free(err);
    ck_assert_int_eq(kpc(NULL, &err, "ls", "--cache-dir", NULL), 2);
    ck_assert_str_eq(err, "kpc ls: option '--cache-dir' needs a value\nsee 'kpc ls --help'\n");
    free(err);
    ck_assert_int_eq(kpc(NULL, &err, "clear", "--cache-dir", dir, "extra", NULL), 2);
    ck_assert_str_eq(err, "kpc clear: clear takes no operands, not \"extra\"\nsee 'kpc clear --help'\n");
    free(err);
    ck_assert_int_eq(kpc(NULL, &err, "prune", "--cache-dir", dir, "--max-size", "12Q", NULL), 2);
    ck_assert_str_eq(err, "kpc prune: --max-size takes a size in bytes from 0, with an optional K, M, G, T, P "
                          "or E suffix (binary), such as 512M or 2G, not \"12Q\"\n"
                          "see 'kpc prune --help'\n");
    free(err);
    ck_assert_int_eq(kpc(NULL, &err, "frobnicate", NULL), 2);
    ck_assert_str_eq(err, "kpc: unknown command \"frobnicate\"\nsee 'kpc --help'\n");
    free(err);
    ck_assert(is_absent(dir));
}
END_TEST

START_TEST(help_per_command_and_version)
{
    char *a = NULL, *b = NULL, *err = NULL;
    ck_assert_int_eq(kpc(&a, &err, "compile", "--help", NULL), 0);
    ck_assert_int_eq(kpc(&b, NULL, "help", "compile", NULL), 0);
    ck_assert_str_eq(a, b);
    ck_assert_str_eq(err, "");
    ck_assert_msg(strncmp(a, "usage: kpc compile ", 19) == 0 && strstr(a, "--target") && strstr(a, "--name-expr") &&
                      strstr(a, "-j, --jobs") && strstr(a, "kpc(1)") && !strstr(a, "--max-size"),
                  "kpc compile --help:\n%s", a);
    free(a), free(b), free(err);
    ck_assert_int_eq(kpc(&a, NULL, "prune", "-h", NULL), 0);
    ck_assert_msg(strstr(a, "--max-size") && strstr(a, "--stale") && !strstr(a, "--target"), "%s", a);
    free(a);
    ck_assert_int_eq(kpc(NULL, &err, "help", "frobnicate", NULL), 2);
    ck_assert_str_eq(err, "kpc: unknown command \"frobnicate\"\nsee 'kpc --help'\n");
    free(err);
    /* the whole help names every command, and no file that is not installed */
    ck_assert_int_eq(kpc(&a, NULL, "--help", NULL), 0);
    const char *subs[] = {"compile", "stats", "ls", "verify", "prune", "clear"};
    for (size_t i = 0; i < 6; i++) {
        ck_assert_msg(strstr(a, subs[i]) != NULL, "kpc --help lacks %s", subs[i]);
        ck_assert_int_eq(kpc(&b, NULL, "help", subs[i], NULL), 0);
        ck_assert_msg(!strstr(b, "docs/") && !has_trailing_space(b), "kpc help %s:\n%s", subs[i], b);
        free(b);
    }
    ck_assert_msg(!strstr(a, "docs/") && strstr(a, "kpc(1)"), "kpc --help:\n%s", a);
    free(a);
    char version[64];
    snprintf(version, sizeof version, "kpc %d.%d.%d\n", KPC_VERSION_MAJOR, KPC_VERSION_MINOR, KPC_VERSION_PATCH);
    ck_assert_int_eq(kpc(&a, NULL, "--version", NULL), 0);
    ck_assert_str_eq(a, version);
    free(a);
    const char *reset = getenv("KPC_SHM_RESET");
    ck_assert_ptr_nonnull(reset);
    const char *rv[] = {reset, "--version", NULL};
    ck_assert_int_eq(ts_exec(rv, NULL, &a, NULL), 0);
    char reset_version[80];
    snprintf(reset_version, sizeof reset_version, "kpc-shm-reset %s", version + 4);
    ck_assert_str_eq(a, reset_version);
    free(a);
}
END_TEST

START_TEST(shm_reset_says_what_was_wrong)
{
    const char *reset = getenv("KPC_SHM_RESET");
    ck_assert_ptr_nonnull(reset);
    char *out = NULL, *err = NULL;
    const char *help[] = {reset, "--help", NULL};
    ck_assert_int_eq(ts_exec(help, NULL, &out, NULL), 0);
    ck_assert_msg(strstr(out, "-d, --cache-dir DIR") && strstr(out, "-f, --force") && strstr(out, "kpc-shm-reset(1)"),
                  "kpc-shm-reset --help:\n%s", out);
    free(out);
    const char *extra[] = {reset, "extra", NULL};
    ck_assert_int_eq(ts_exec(extra, NULL, NULL, &err), 2);
    ck_assert_str_eq(err, "kpc-shm-reset: takes no operands (give the directory with -d DIR), not 'extra'\n"
                          "see 'kpc-shm-reset --help'\n");
    free(err);
    const char *bogus[] = {reset, "--bogus", NULL};
    ck_assert_int_eq(ts_exec(bogus, NULL, NULL, &err), 2);
    ck_assert_str_eq(err, "kpc-shm-reset: unknown option '--bogus'\nsee 'kpc-shm-reset --help'\n");
    free(err);
    const char *absent[] = {reset, "-d", dir, NULL};
    ck_assert_int_eq(ts_exec(absent, NULL, &out, NULL), 0);
    char want[4400];
    snprintf(want, sizeof want, "no cache directory %s: nothing to reset\n", dir);
    ck_assert_str_eq(out, want);
    free(out);
}
END_TEST

START_TEST(an_absent_cache_is_described_one_way)
{
    const char *cmds[] = {"prune", "verify", "clear"};
    for (size_t i = 0; i < 3; i++) {
        char *out = NULL, want[4400];
        ck_assert_int_eq(kpc(&out, NULL, cmds[i], "--cache-dir", dir, NULL), 0);
        snprintf(want, sizeof want, "no cache directory %s: nothing to %s\n", dir, cmds[i]);
        ck_assert_str_eq(out, want);
        free(out);
    }
    char *out = NULL;
    ck_assert_int_eq(kpc(&out, NULL, "stats", "--cache-dir", dir, NULL), 0);
    ck_assert_msg(!has_trailing_space(out) && strstr(out, "host index     absent\n"), "kpc stats:\n%s", out);
    free(out);
    ck_assert(is_absent(dir));
}
END_TEST

START_TEST(compile_messages_name_the_real_problem)
{
    char *out = NULL, *err = NULL;
    /* a directory: errno kept */
    char *base = strdup(dir);
    *strrchr(base, '/') = '\0';
    ck_assert_int_eq(kpc(&out, &err, "compile", "--cache-dir", dir, "--target", ts_target(), base, NULL), 1);
    ck_assert_msg(strstr(err, "Is a directory") != NULL, "stderr:\n%s", err);
    free(out), free(err), free(base);
    /* a missing file without --target (no GPU here): the file, not the device */
    ck_assert_int_eq(kpc(&out, &err, "compile", "--cache-dir", dir, "/nonexistent/x.hip", NULL), 1);
    ck_assert_msg(strstr(err, "cannot read /nonexistent/x.hip: No such file or directory") &&
                      !strstr(err, "KPC_E_NO_DEVICE") && !strstr(err, "no GPU"),
                  "stderr:\n%s", err);
    free(out), free(err);
    /* an unknown target: the list of targets wrapped, no line over 100 characters */
    char *good = side_file("good.hip", ts_kernel_source(0));
#ifdef KPC_PLATFORM_NVIDIA
    const char *unknown = "sm_1";
#else
    const char *unknown = "gfx9999";
#endif
    ck_assert_int_eq(kpc(&out, &err, "compile", "--cache-dir", dir, "--target", unknown, good, NULL), 1);
    ck_assert_msg(strstr(err, unknown) && longest_line(err) <= 100, "stderr (%zu wide):\n%s", longest_line(err), err);
    free(out), free(err);
    free(good);
}
END_TEST

/* ---- exit statuses that tell the truth ---------------------------------------------- */
/* A cache dir the library refuses: nothing is compiled and nothing said "built"; the
 * status is 1 and the lines name the directory and the rule. */
START_TEST(compile_into_a_refused_cache_dir_fails)
{
    char *good = side_file("good.hip", ts_kernel_source(0));
    char *out = NULL, *err = NULL;
    /* a regular file where the directory should be */
    ck_assert_int_eq(kpc(&out, &err, "compile", "--cache-dir", good, "--target", ts_target(), good, NULL), 1);
    ck_assert_msg(strstr(out, "built") == NULL && strstr(out, "hit") == NULL, "stdout:\n%s", out);
    ck_assert_msg(strstr(err, good) && strstr(err, "not a directory") && strstr(err, "nothing compiled"),
                  "stderr:\n%s", err);
    free(out), free(err);
    if (geteuid() == 0) { /* a directory another user owns */
        ck_assert_int_eq(mkdir(dir, 0700), 0);
        ck_assert_int_eq(chown(dir, 65534, 65534), 0);
        ck_assert_int_eq(kpc(&out, &err, "compile", "--cache-dir", dir, "--target", ts_target(), good, NULL), 1);
        ck_assert_msg(strstr(out, "built") == NULL, "stdout:\n%s", out);
        ck_assert_msg(strstr(err, dir) && strstr(err, "owned by uid 65534") && strstr(err, "refused") &&
                          strstr(err, "nothing compiled"),
                      "stderr:\n%s", err);
        ck_assert_int_eq(ts_count_entries(dir), 0); /* nothing written into it */
        free(out), free(err);
    }
    free(good);
}
END_TEST

/* A cache dir of mode 0500 (for a user its modes bind): the object is built but cannot be
 * cached; said so with the real error (EACCES, not the ENOENT of the v1/ it could not
 * make), and the status is 1. */
START_TEST(compile_into_a_read_only_cache_dir_says_why_and_fails)
{
    char *good = side_file("good.hip", ts_kernel_source(0));
    ck_assert_int_eq(chmod(good, 0644), 0);
    ck_assert_int_eq(mkdir(dir, 0500), 0);
    const char *args[] = {"compile", "--cache-dir", dir, "--target", ts_target(), good, NULL};
    char *out = NULL, *err = NULL;
    int rc = kpc_bound_args(&out, &err, args);
    ck_assert_msg(rc == 1, "exit %d\nstdout: %s\nstderr: %s", rc, out, err);
    ck_assert_msg(strncmp(out, "not cached", 10) == 0, "stdout:\n%s", out);
    ck_assert_msg(strstr(err, "ermission denied") && strstr(err, "read-only") &&
                      !strstr(err, "No such file or directory"),
                  "stderr:\n%s", err);
    free(out), free(err);
    const char *json[] = {"compile", "--json", "--cache-dir", dir, "--target", ts_target(), good, NULL};
    ck_assert_int_eq(kpc_bound_args(&out, &err, json), 1);
    cJSON *j = parse(out);
    ck_assert_str_eq(str(cJSON_GetArrayItem(j, 0), "result"), "built");
    ck_assert(!boolean(cJSON_GetArrayItem(j, 0), "cached"));
    cJSON_Delete(j);
    free(out), free(err);
    ck_assert_int_eq(ts_count_entries(dir), 0);
    /* the host index uid 65534 made (as root) is this test's to remove */
    char name[96], seg[128], root[4096];
    ck_assert_ptr_nonnull(realpath(dir, root));
    kpc_root_segment_name(root, name, sizeof name);
    snprintf(seg, sizeof seg, "/dev/shm/kpc-%u-%s", geteuid() == 0 ? 65534u : (unsigned)geteuid(),
             strrchr(name, '-') + 1);
    unlink(seg);
    chmod(dir, 0700);
    free(good);
}
END_TEST

/* Without --target and without a GPU: the message names the option to pass (with a target
 * of this build), not the library's C function. */
START_TEST(compile_without_a_gpu_names_the_target_option)
{
    char *good = side_file("good.hip", ts_kernel_source(0));
    char *out = NULL, *err = NULL;
    int rc = kpc(&out, &err, "compile", "--cache-dir", dir, good, NULL);
    if (rc == 0) {
        ts_skip("a GPU is present: the target comes from it");
    } else {
        ck_assert_int_eq(rc, 1);
        char want[64];
        snprintf(want, sizeof want, "--target %s", ts_target());
        ck_assert_msg(strstr(err, want) && !strstr(err, "kpc_context_create_for_target"), "stderr:\n%s", err);
    }
    free(out), free(err), free(good);
}
END_TEST

/* The help shows targets this build accepts, and no other platform's. */
START_TEST(help_examples_are_valid_for_this_build)
{
#ifdef KPC_PLATFORM_NVIDIA
    const char *other = "gfx";
#else
    const char *other = "sm_";
#endif
    char want[64];
    snprintf(want, sizeof want, "--target %s", ts_target());
    char *out = NULL;
    ck_assert_int_eq(kpc(&out, NULL, "--help", NULL), 0);
    ck_assert_msg(strstr(out, want) && !strstr(out, other), "kpc --help:\n%s", out);
    free(out);
    ck_assert_int_eq(kpc(&out, NULL, "help", "compile", NULL), 0);
    ck_assert_msg(strstr(out, ts_target()) && !strstr(out, other), "kpc help compile:\n%s", out);
    free(out);
}
END_TEST

/* scripts/test.sh and scripts/demo.sh: --help prints the usage and runs nothing (no
 * set-up, no build); an unknown argument is bad usage. */
START_TEST(script_help_runs_nothing)
{
    const char *src = getenv("KPC_SOURCE_DIR");
    ck_assert_ptr_nonnull(src);
    const char *const scripts[] = {"test.sh", "demo.sh"};
    for (size_t i = 0; i < 2; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/scripts/%s", src, scripts[i]);
        char *out = NULL, *err = NULL;
        const char *help[] = {path, "--help", NULL};
        ck_assert_int_eq(ts_exec(help, NULL, &out, &err), 0);
        ck_assert_msg(strstr(out, "usage: scripts/") && !strstr(out, "setup:") && !strstr(out, "==") && err[0] == '\0',
                      "%s --help:\nstdout: %s\nstderr: %s", scripts[i], out, err);
        free(out), free(err);
        const char *bad[] = {path, "--no-such-option", NULL};
        ck_assert_int_eq(ts_exec(bad, NULL, &out, &err), 2);
        ck_assert_msg(strstr(err, "unknown argument") && out[0] == '\0', "%s: %s", scripts[i], err);
        free(out), free(err);
    }
}
END_TEST

START_TEST(sizes_are_labelled_and_counts_agree)
{
    char *good = side_file("good.hip", ts_kernel_source(0));
    char *out = NULL;
    ck_assert_int_eq(kpc(&out, NULL, "compile", "--json", "--cache-dir", dir, "--target", ts_target(), good, NULL), 0);
    cJSON *j = parse(out);
    double code = num(cJSON_GetArrayItem(j, 0), "size");
    cJSON_Delete(j);
    free(out);
    /* text: the code object's size, labelled as such */
    ck_assert_int_eq(kpc(&out, NULL, "compile", "--cache-dir", dir, "--target", ts_target(), good, NULL), 0);
    ck_assert_msg(strstr(out, " code  ") != NULL && !has_trailing_space(out), "kpc compile:\n%s", out);
    free(out);
    /* ls: the file, a header plus that code; the table has a heading */
    ck_assert_int_eq(kpc(&out, NULL, "ls", "--json", "--cache-dir", dir, NULL), 0);
    j = parse(out);
    ck_assert(num(cJSON_GetArrayItem(j, 0), "size") > code);
    cJSON_Delete(j);
    free(out);
    ck_assert_int_eq(kpc(&out, NULL, "ls", "--cache-dir", dir, NULL), 0);
    ck_assert_msg(strncmp(out, "KEY ", 4) == 0 && strstr(out, "FILE SIZE") && strstr(out, "SOURCE"), "kpc ls:\n%s", out);
    free(out);
    /* sizes in the short form, the limit as given */
    ck_assert_int_eq(kpc(&out, NULL, "prune", "--cache-dir", dir, "--max-size", "5K", NULL), 0);
    ck_assert_msg(strstr(out, "limit 5.0K\n") != NULL, "kpc prune:\n%s", out);
    free(out);
    /* one of a kind is singular */
    ck_assert_int_eq(kpc(&out, NULL, "compile", "--cache-dir", dir, "--target", ts_target(), good, NULL), 0);
    free(out);
    ck_assert_int_eq(kpc(&out, NULL, "clear", "--cache-dir", dir, NULL), 0);
    ck_assert_str_eq(out, "removed 1 file\n");
    free(out);
    free(good);
}
END_TEST

int main(void)
{
    const TTest *tests[] = {a_usage_error_is_one_line_and_a_hint, help_per_command_and_version,
                            shm_reset_says_what_was_wrong, an_absent_cache_is_described_one_way,
                            compile_messages_name_the_real_problem,
                            sizes_are_labelled_and_counts_agree,
                            compile_into_a_refused_cache_dir_fails,
                            compile_into_a_read_only_cache_dir_says_why_and_fails,
                            compile_without_a_gpu_names_the_target_option,
                            help_examples_are_valid_for_this_build, script_help_runs_nothing, NULL};
    return ts_main_case("tool", "messages", 120, setup, teardown, tests);
}
