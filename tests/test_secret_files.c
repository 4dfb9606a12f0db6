/*
 * test_secret_files.c - the cluster tier's secret files (KPC_REMOTE_SECRET_FILE=NEW[:OLD],
 * read by kpc__secret_file_read): one that is missing, a FIFO, readable by every user,
 * owned or writable by another user, or a list with an empty part is refused at the
 * default log level, naming the file and why, and the tier is off (never unauthenticated
 * instead); one readable by its group is used with a warning.
 */
#define _GNU_SOURCE
#include "support.h"
#include "base/log.h"
#include "base/settings.h"
#include "storage/remote.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *dir;
static void setup(void)
{
    dir = ts_tmpdir();
    setenv("KPC_CACHE_DIR", dir, 1);
}
static void teardown(void)
{
    unsetenv("KPC_CACHE_DIR");
    ts_cleanup(dir);
}

/* KPC_REMOTE_SECRET_FILE naming a file that is not there: the cache opens, without the
 * cluster tier (never unauthenticated instead), and the log names the variable and the
 * file, and says the tier is off (before: an open error, and the tier gone without a word). */
START_TEST(a_missing_secret_file_is_said_and_the_tier_is_off)
{
    if (!kpc_remote_built()) {
        printf("a_missing_secret_file_is_said_and_the_tier_is_off: skipped: built without hiredis\n");
        return;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s-absent-secret", dir);
    setenv("KPC_REMOTE", "redis://127.0.0.1:1/0", 1); /* connects lazily: never here */
    setenv("KPC_REMOTE_SECRET_FILE", path, 1);
    ts_log_begin(KPC_LOG_ERROR); /* the default level: said there, as an unset secret is */
    kpc_cache *c = NULL;
    kpc_status s = kpc_cache_open(NULL, &c);
    char *log = ts_log_end();
    unsetenv("KPC_REMOTE");
    unsetenv("KPC_REMOTE_SECRET_FILE");
    ck_assert_int_eq(s, KPC_OK);
    ck_assert_msg(kpc_tier_coordinator(&c->tiers) == NULL, "the cluster tier is on without its secret");
    ck_assert_msg(strstr(log, "KPC_REMOTE_SECRET_FILE") && strstr(log, path) && strstr(log, "cluster tier is off"),
                  "%s", log);
    free(log);
    kpc_cache_close(c);
}
END_TEST

START_TEST(secret_file_missing_fifo_or_readable_by_others)
{
    char path[4096];
    void *buf;
    size_t size;
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    /* missing: a warning naming the file, refused */
    snprintf(path, sizeof path, "%s/absent", dir);
    ts_log_begin(KPC_LOG_WARN);
    ck_assert_int_eq(kpc__secret_file_read("KPC_REMOTE_SECRET_FILE", path, &buf, &size), KPC_E_INVALID);
    char *log = ts_log_end();
    ck_assert_msg(strstr(log, "error") && strstr(log, path) && strstr(log, "No such file"), "%s", log);
    free(log);
    /* a FIFO: refused at once, never a blocking open */
    snprintf(path, sizeof path, "%s/fifo", dir);
    ck_assert_msg(mkfifo(path, 0600) == 0, "mkfifo %s: %s", path, strerror(errno));
    ts_log_begin(KPC_LOG_WARN);
    ck_assert_int_eq(kpc__secret_file_read("KPC_REMOTE_SECRET_FILE", path, &buf, &size), KPC_E_INVALID);
    log = ts_log_end();
    ck_assert_msg(strstr(log, "not a regular file"), "%s", log);
    free(log);
    /* readable by the group: used, with a warning and the fix */
    snprintf(path, sizeof path, "%s/secret", dir);
    ts_write_file(path, "s3cr3t", 6);
    ck_assert_int_eq(chmod(path, 0640), 0);
    ts_log_begin(KPC_LOG_WARN);
    ck_assert_int_eq(kpc__secret_file_read("KPC_REMOTE_SECRET_FILE", path, &buf, &size), KPC_OK);
    log = ts_log_end();
    ck_assert_uint_eq(size, 6);
    ck_assert_int_eq(memcmp(buf, "s3cr3t", 6), 0);
    free(buf);
    ck_assert_msg(strstr(log, "chmod 600"), "%s", log);
    free(log);
    /* 0600: no warning */
    ck_assert_int_eq(chmod(path, 0600), 0);
    ts_log_begin(KPC_LOG_WARN);
    ck_assert_int_eq(kpc__secret_file_read("KPC_REMOTE_SECRET_FILE", path, &buf, &size), KPC_OK);
    log = ts_log_end();
    free(buf);
    ck_assert_msg(strstr(log, "chmod") == NULL, "%s", log);
    free(log);
}
END_TEST

/* A secret file another user owns, or one another user may write or every user may read:
 * refused at error level, naming the file and its owner or mode (before: used, another
 * owner silently, the modes with a warning below the default log level), since that user
 * could tag code this host runs. Root's is used; its group may read it, with a warning. */
START_TEST(a_secret_file_another_user_could_know_is_refused)
{
    char path[4096];
    void *buf = NULL;
    size_t size = 0;
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    snprintf(path, sizeof path, "%s/secret", dir);
    ts_write_file(path, "s3cr3t", 6);
    static const struct { mode_t mode; const char *said; } modes[] = {
        {0644, "may be read by every user (mode 644)"},
        {0604, "may be read by every user (mode 604)"},
        {0620, "may be written by its group (mode 620)"},
        {0602, "may be written by every user (mode 602)"},
    };
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        ck_assert_int_eq(chmod(path, modes[i].mode), 0);
        ts_log_begin(KPC_LOG_ERROR);
        kpc_status s = kpc__secret_file_read("KPC_REMOTE_SECRET_FILE", path, &buf, &size);
        char *log = ts_log_end();
        ck_assert_msg(s == KPC_E_INVALID, "mode %03o: %s", (unsigned)modes[i].mode, kpc_status_str(s));
        ck_assert_ptr_null(buf);
        ck_assert_msg(strstr(log, path) && strstr(log, modes[i].said) && strstr(log, "refused"), "%s", log);
        free(log);
    }
    ck_assert_int_eq(chmod(path, 0600), 0);
    if (geteuid() != 0) {
        printf("a_secret_file_another_user_could_know_is_refused: skipped: another owner needs root (chown)\n");
        return;
    }
    /* another user's, mode 0600: that user knows the secret */
    ck_assert_int_eq(chown(path, 65534, 65534), 0);
    ts_log_begin(KPC_LOG_ERROR);
    ck_assert_int_eq(kpc__secret_file_read("KPC_REMOTE_SECRET_FILE", path, &buf, &size), KPC_E_INVALID);
    char *log = ts_log_end();
    ck_assert_ptr_null(buf);
    ck_assert_msg(strstr(log, path) && strstr(log, "owned by uid 65534") && strstr(log, "refused"), "%s", log);
    free(log);
    /* root's (this user here), readable by its group: used, with a warning */
    ck_assert_int_eq(chown(path, 0, 0), 0);
    ck_assert_int_eq(chmod(path, 0640), 0);
    ts_log_begin(KPC_LOG_WARN);
    ck_assert_int_eq(kpc__secret_file_read("KPC_REMOTE_SECRET_FILE", path, &buf, &size), KPC_OK);
    log = ts_log_end();
    ck_assert_uint_eq(size, 6);
    free(buf);
    ck_assert_msg(strstr(log, "its group") && strstr(log, "chmod 600"), "%s", log);
    free(log);
}
END_TEST

/* KPC_REMOTE_SECRET_FILE of the forms NEW: and :OLD (an unset variable in "$NEW:$OLD"),
 * or with a second colon: the cluster tier is off, said at error level (the default)
 * with the form it takes (before: "NEW:" ran as NEW alone, with no word). */
START_TEST(a_secret_file_list_with_an_empty_part_is_refused)
{
    if (!kpc_remote_built()) {
        printf("a_secret_file_list_with_an_empty_part_is_refused: skipped: built without hiredis\n");
        return;
    }
    char secret[4096], list[8300];
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    snprintf(secret, sizeof secret, "%s/secret", dir);
    ts_write_file(secret, "s3cr3t", 6);
    ck_assert_int_eq(chmod(secret, 0600), 0);
    const char *forms[][2] = {{"%s:", "no OLD secret after the colon"},
                              {":%s", "no NEW secret before the colon"},
                              {"%s:%s:", "more than one colon"}};
    setenv("KPC_REMOTE", "redis://127.0.0.1:1/0", 1); /* connects lazily: never here */
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        snprintf(list, sizeof list, forms[i][0], secret, secret);
        setenv("KPC_REMOTE_SECRET_FILE", list, 1);
        ts_log_begin(KPC_LOG_ERROR);
        kpc_remote *r = NULL;
        kpc_status s = kpc_remote_open("redis://127.0.0.1:1/0", &r);
        char *log = ts_log_end();
        ck_assert_msg(s == KPC_E_INVALID && r == NULL, "%s: %s", list, kpc_status_str(s));
        ck_assert_msg(strstr(log, "KPC_REMOTE_SECRET_FILE") && strstr(log, forms[i][1]) &&
                          strstr(log, "cluster tier is off"),
                      "%s: %s", list, log);
        free(log);
    }
    /* NEW alone and NEW:OLD: open */
    const char *good[] = {"%s", "%s:%s"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(list, sizeof list, good[i], secret, secret);
        setenv("KPC_REMOTE_SECRET_FILE", list, 1);
        kpc_remote *r = NULL;
        ck_assert_int_eq(kpc_remote_open("redis://127.0.0.1:1/0", &r), KPC_OK);
        kpc_remote_close(r);
    }
    unsetenv("KPC_REMOTE_SECRET_FILE");
    unsetenv("KPC_REMOTE");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("secret_files");
    TCase *v = tcase_create("secret_files");
    tcase_add_checked_fixture(v, setup, teardown);
    tcase_add_test(v, secret_file_missing_fifo_or_readable_by_others);
    tcase_add_test(v, a_missing_secret_file_is_said_and_the_tier_is_off);
    tcase_add_test(v, a_secret_file_another_user_could_know_is_refused);
    tcase_add_test(v, a_secret_file_list_with_an_empty_part_is_refused);
    suite_add_tcase(s, v);
    return ts_run_suite(s);
}
