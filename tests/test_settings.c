/*
 * test_settings.c - the one table of KPC_* variables (src/base/settings_table.h): the
 * docs are generated from it and checked against it (kpc(1)'s ENVIRONMENT section and
 * docs/manual.md's environment table: a variable missing there, or documented there but
 * not in the table, fails), no file of src/ reads a KPC_ variable with getenv, and every
 * malformed value is refused by kpc_cache_open (KPC_E_INVALID, logged with the variable
 * and its accepted form) and by the tools (exit 2, the same line on stderr).
 *
 * `test_settings --write-docs` rewrites the generated parts of the docs from the table
 * (run from the source tree, or with KPC_SOURCE_DIR set).
 */
#define _GNU_SOURCE
#include "support.h"
#include "base/log.h"
#include "base/settings.h"
#include "storage/remote.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAN_BEGIN "; generated from src/base/settings_table.h (tests/test_settings --write-docs)\n"
#define MAN_END "; end of the generated settings\n"
#define MD_BEGIN "<!-- generated from src/base/settings_table.h (tests/test_settings --write-docs) -->\n"
#define MD_END "<!-- end of the generated settings -->\n"

typedef struct text {
    char *p;
    size_t len, cap;
} text;

static void put(text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        t->cap = (t->len + n + 1) * 2;
        t->p = realloc(t->p, t->cap);
        if (t->p == NULL)
            abort();
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
}
static void puts_(text *t, const char *s) { put(t, s, strlen(s)); }

/* A doc line for scdoc: `code` becomes *code* (bold), a lone * is escaped, and so is an
 * _ that does not stand inside a word (scdoc would start an underline there). */
static void put_scd(text *t, const char *s)
{
    for (const char *start = s; *s; s++) {
        if (*s == '`')
            puts_(t, "*");
        else if (*s == '*')
            puts_(t, "\\*");
        else if (*s == '_' && (s == start || !isalnum((unsigned char)s[-1])))
            puts_(t, "\\_");
        else
            put(t, s, 1);
    }
}

static char *generate_man(void)
{
    text t = {0};
    puts_(&t, MAN_BEGIN);
    for (int id = 0; id < KPC_SET_COUNT; id++) {
        const kpc_setting *s = kpc__setting((kpc_setting_id)id);
        char form[256];
        kpc__setting_form((kpc_setting_id)id, form, sizeof form);
        puts_(&t, "*");
        puts_(&t, s->name);
        puts_(&t, "*\n\t");
        char first[2] = {(char)(s->doc[0] >= 'a' && s->doc[0] <= 'z' ? s->doc[0] - 32 : s->doc[0]), 0};
        puts_(&t, first);
        put_scd(&t, s->doc + 1);
        puts_(&t, ". Accepted: ");
        put_scd(&t, form);
        puts_(&t, ".");
        if (s->shown_default[0]) {
            puts_(&t, " Default: ");
            put_scd(&t, s->shown_default);
            puts_(&t, ".");
        }
        puts_(&t, "\n\n");
    }
    puts_(&t, MAN_END);
    return t.p;
}

static char *generate_md(void)
{
    text t = {0};
    puts_(&t, MD_BEGIN);
    puts_(&t, "| variable | what it does | accepted | default |\n| --- | --- | --- | --- |\n");
    for (int id = 0; id < KPC_SET_COUNT; id++) {
        const kpc_setting *s = kpc__setting((kpc_setting_id)id);
        char form[256];
        kpc__setting_form((kpc_setting_id)id, form, sizeof form);
        char row[1024];
        snprintf(row, sizeof row, "| `%s` | %s | %s | %s |\n", s->name, s->doc, form,
                 s->shown_default[0] ? s->shown_default : "unset");
        puts_(&t, row);
    }
    puts_(&t, MD_END);
    return t.p;
}

static const char *source_dir(void)
{
    const char *d = getenv("KPC_SOURCE_DIR");
    return d ? d : ".";
}

/* The generated part of a doc file (between begin and end, both included): its offset
 * and length, or -1 when the markers are missing. */
static long generated_part(const char *doc, const char *begin, const char *end, size_t *len)
{
    const char *b = strstr(doc, begin);
    const char *e = b ? strstr(b, end) : NULL;
    if (e == NULL)
        return -1;
    *len = (size_t)(e + strlen(end) - b);
    return b - doc;
}

static char *read_doc(const char *rel)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", source_dir(), rel);
    FILE *f = fopen(path, "r"); /* no ck_assert: --write-docs runs outside a test */
    if (f == NULL)
        return NULL;
    text t = {0};
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        put(&t, buf, n);
    fclose(f);
    return t.p ? t.p : calloc(1, 1);
}

static const struct {
    const char *rel, *begin, *end;
    char *(*generate)(void);
} docs[] = {
    {"docs/man/kpc.1.scd", MAN_BEGIN, MAN_END, generate_man},
    {"docs/manual.md", MD_BEGIN, MD_END, generate_md},
};

static int write_docs(void)
{
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        char *doc = read_doc(docs[i].rel);
        size_t len;
        long at = doc ? generated_part(doc, docs[i].begin, docs[i].end, &len) : -1;
        if (at < 0) {
            fprintf(stderr, "%s: no generated part (the marker lines are missing)\n", docs[i].rel);
            return 1;
        }
        char *gen = docs[i].generate();
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", source_dir(), docs[i].rel);
        FILE *f = fopen(path, "w");
        if (f == NULL || fwrite(doc, 1, (size_t)at, f) != (size_t)at || fputs(gen, f) < 0 ||
            fputs(doc + at + len, f) < 0 || fclose(f) != 0) {
            fprintf(stderr, "%s: %s\n", path, strerror(errno));
            return 1;
        }
        printf("wrote %s\n", path);
        free(gen);
        free(doc);
    }
    return 0;
}

START_TEST(docs_are_generated_from_the_table)
{
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        char *doc = read_doc(docs[i].rel);
        ck_assert_msg(doc != NULL, "%s cannot be read", docs[i].rel);
        size_t len;
        long at = generated_part(doc, docs[i].begin, docs[i].end, &len);
        ck_assert_msg(at >= 0, "%s has no generated settings part", docs[i].rel);
        char *gen = docs[i].generate();
        bool same = strlen(gen) == len && memcmp(doc + at, gen, len) == 0;
        if (!same) /* name the variables that differ: what a reader of the failure needs */
            for (int id = 0; id < KPC_SET_COUNT; id++) {
                const char *name = kpc__setting((kpc_setting_id)id)->name;
                char *hit = memmem(doc + at, len, name, strlen(name));
                if (hit == NULL)
                    printf("%s: %s is missing\n", docs[i].rel, name);
            }
        ck_assert_msg(same, "%s differs from src/base/settings_table.h: run tests/test_settings --write-docs",
                      docs[i].rel);
        free(gen);
        free(doc);
    }
}
END_TEST

/* Every KPC_ word of the generated parts and of the docs' other assignments (KPC_X=...)
 * names a row, or is one of the test harness's own variables. */
START_TEST(docs_name_no_variable_outside_the_table)
{
    static const char *const harness[] = {"KPC_CHAOS_SECONDS", "KPC_CHAOS_PROCS", "KPC_CHAOS_SOURCES",
                                          "KPC_FUZZ_SECONDS", "KPC_BENCH_ROWS", "KPC_BENCH_TMP",
                                          "KPC_GPU_DEBS", "KPC_SANITIZE", "KPC_TEST_LANES", NULL};
    static const char *const files[] = {"docs/man/kpc.1.scd", "docs/man/kpc.3.scd", "docs/man/kpc-shm-reset.1.scd",
                                        "docs/manual.md", "docs/design.md", "docs/cluster.md",
                                        "docs/platforms.md", "README.md", NULL};
    int unknown = 0;
    for (const char *const *f = files; *f; f++) {
        char *doc = read_doc(*f);
        if (doc == NULL)
            continue;
        for (char *p = strstr(doc, "KPC_"); p; p = strstr(p + 1, "KPC_")) {
            size_t n = 4 + strspn(p + 4, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
            if (p[n] != '=' || (p > doc && (p[-1] == '_' || (p[-1] >= 'A' && p[-1] <= 'Z'))))
                continue; /* only assignments: KPC_E_INVALID and KPC_NO_DISK are no variables */
            bool known = false;
            for (int id = 0; id < KPC_SET_COUNT && !known; id++)
                known = strlen(kpc__setting((kpc_setting_id)id)->name) == n &&
                        memcmp(kpc__setting((kpc_setting_id)id)->name, p, n) == 0;
            for (const char *const *h = harness; *h && !known; h++)
                known = strlen(*h) == n && memcmp(*h, p, n) == 0;
            if (!known) {
                printf("%s: %.*s is set there but is not a row of src/base/settings_table.h\n", *f, (int)n, p);
                unknown++;
            }
        }
        free(doc);
    }
    ck_assert_int_eq(unknown, 0);
}
END_TEST

/* No file of src/ but base/settings.c reads a KPC_ variable itself. */
static int scan_getenv(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "%s: %s", dir, strerror(errno));
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        ck_assert_int_eq(stat(path, &st), 0);
        if (S_ISDIR(st.st_mode)) {
            found += scan_getenv(path);
            continue;
        }
        size_t n = strlen(e->d_name);
        if (n < 2 || strcmp(e->d_name + n - 2, ".c") != 0)
            continue;
        size_t size;
        char *src = ts_read_file(path, &size);
        for (char *p = strstr(src, "getenv(\"KPC_"); p; p = strstr(p + 1, "getenv(\"KPC_")) {
            printf("%s reads %.30s itself: ask base/settings.h\n", path, p + 8);
            found++;
        }
        free(src);
    }
    closedir(d);
    return found;
}

START_TEST(no_setting_is_read_outside_the_table)
{
    char src[4096];
    snprintf(src, sizeof src, "%s/src", source_dir());
    ck_assert_int_eq(scan_getenv(src), 0);
}
END_TEST


/* ---- every malformed value refused --------------------------------------------------- */
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

/* variable, value, a word of the accepted form the message must carry */
static const char *const malformed[][3] = {
    {"KPC_SHM_LOCK_TIMEOUT_MS", "abc", "milliseconds from 1"},
    {"KPC_SHM_LOCK_TIMEOUT_MS", "0", "milliseconds from 1"},
    {"KPC_SHM_LOCK_TIMEOUT_MS", "4294967296", "to 4294967295"},
    {"KPC_BUILD_WAIT_MAX_MS", "-1", "milliseconds"},
    {"KPC_BUILD_WAIT_MAX_MS", " 5", "milliseconds"},
    {"KPC_BUILD_WAIT_MAX_MS", "+5", "milliseconds"},
    {"KPC_BUILD_WAIT_MAX_MS", "", "milliseconds"},
    {"KPC_REMOTE_TIMEOUT_MS", "10s", "milliseconds"},
    {"KPC_REMOTE_LEASE_MS", "5", "from 10"},
    {"KPC_REMOTE_BACKOFF_MS", "99999999999", "86400000"},
    {"KPC_CACHE_MAX_SIZE", "17E", "suffix"},
    {"KPC_CACHE_MAX_SIZE", "99999999999999999999", "suffix"},
    {"KPC_CACHE_MAX_SIZE", "5K5", "suffix"},
    {"KPC_CACHE_MAX_SIZE", "1.5G", "suffix"},
    {"KPC_BUILD_THREADS", "257", "from 1 to 256"},
    {"KPC_KEEP_SOURCES", "yes", "1 or 0"},
    {"KPC_DISABLE", "true", "1 or 0"},
    {"KPC_LOG", "loud", "error, warn, info, debug or trace"},
    {"KPC_REMOTE", "foo://x", "redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]"},
    {"KPC_REMOTE", "redis://h:99999", "redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]"},
    {"KPC_REMOTE", "redis://h:6379/x", "redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]"},
    {"KPC_REMOTE_SECRET_FILE", "", "a path, not empty"},
    {"KPC_REMOTE_TRUST", "yes", "authenticated or unauthenticated"},
    {"KPC_REMOTE_TRUST", "Unauthenticated", "authenticated or unauthenticated"},
    {"KPC_REMOTE_NAMESPACE", "a b", "letters, digits"},
    {"KPC_REMOTE_NAMESPACE", "kpc:2", "letters, digits"},
    {"KPC_REMOTE_NAMESPACE", "0123456789012345678901234567890123456789012345678901234567890123", "1 to 63"},
    {"KPC_REMOTE_NAMESPACE", "", "1 to 63"},
    {"KPC_REMOTE_TTL_S", "-1", "seconds from 0"},
    {"KPC_REMOTE_TTL_S", "315360001", "to 315360000"},
    {"KPC_REAL_HIPRTC", "", "a path, not empty"},
    {"KPC_REAL_HIPRTC", "/opt/rocm/lib\n/libhiprtc.so", "no control character"},
    {"KPC_PACK_PATH", "/a.kpack:\t/b", "no control character"},
};

START_TEST(malformed_values_are_refused_by_cache_open)
{
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        setenv(malformed[i][0], malformed[i][1], 1);
        ts_log_begin(KPC_LOG_ERROR);
        kpc_cache *c = (kpc_cache *)1;
        kpc_status s = kpc_cache_open(NULL, &c);
        char *log = ts_log_end();
        unsetenv(malformed[i][0]);
        ck_assert_msg(s == KPC_E_INVALID, "%s=\"%s\": %s", malformed[i][0], malformed[i][1], kpc_status_str(s));
        ck_assert_ptr_null(c);
        ck_assert_msg(strstr(log, malformed[i][0]) && strstr(log, malformed[i][2]),
                      "%s=\"%s\": the log names neither the variable nor its form: %s", malformed[i][0],
                      malformed[i][1], log);
        free(log);
    }
    /* the same values well formed: accepted */
    static const char *const good[][2] = {
        {"KPC_SHM_LOCK_TIMEOUT_MS", "4294967295"}, {"KPC_BUILD_WAIT_MAX_MS", "1"},
        {"KPC_CACHE_MAX_SIZE", "15E"}, {"KPC_CACHE_MAX_SIZE", "512m"}, {"KPC_REMOTE_LEASE_MS", "10"},
        {"KPC_KEEP_SOURCES", "0"}, {"KPC_LOG", "ERROR"}, {"KPC_HOST_ID", "node-7"}, {"KPC_PACK_PATH", ""},
        {"KPC_REMOTE_TRUST", "unauthenticated"}, {"KPC_REMOTE_TRUST", ""}, {"KPC_REMOTE_NAMESPACE", "site-2.a_b"},
        {"KPC_REMOTE_TTL_S", "0"}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        setenv(good[i][0], good[i][1], 1);
        kpc_cache *c = NULL;
        kpc_status s = kpc_cache_open(NULL, &c);
        unsetenv(good[i][0]);
        ck_assert_msg(s == KPC_OK, "%s=\"%s\": %s", good[i][0], good[i][1], kpc_status_str(s));
        kpc_cache_close(c);
    }
}
END_TEST

/* kpc_config.remote is the same URL as KPC_REMOTE: the same check. */
START_TEST(malformed_config_remote_is_refused)
{
    kpc_config cfg = {.struct_size = sizeof cfg, .remote = "foo://x"};
    ts_log_begin(KPC_LOG_ERROR);
    kpc_cache *c = (kpc_cache *)1;
    ck_assert_int_eq(kpc_cache_open(&cfg, &c), KPC_E_INVALID);
    char *log = ts_log_end();
    ck_assert_ptr_null(c);
    /* named as the caller set it (before: "KPC_REMOTE: ...", a variable nobody set) */
    ck_assert_msg(strstr(log, "kpc_config.remote: not a redis://") && !strstr(log, "KPC_REMOTE"), "%s", log);
    free(log);
}
END_TEST

/* A value that turns malformed after the open (the environment changed under a running
 * process): its reader warns once and uses the default. */
START_TEST(a_reader_warns_once_and_uses_the_default)
{
    setenv("KPC_SHM_LOCK_TIMEOUT_MS", "abc", 1);
    ts_log_begin(KPC_LOG_WARN);
    uint64_t a = kpc__setting_number(KPC_SET_SHM_LOCK_TIMEOUT_MS);
    uint64_t b = kpc__setting_number(KPC_SET_SHM_LOCK_TIMEOUT_MS);
    char *log = ts_log_end();
    unsetenv("KPC_SHM_LOCK_TIMEOUT_MS");
    ck_assert_uint_eq(a, 5000);
    ck_assert_uint_eq(b, 5000);
    char *first = strstr(log, "KPC_SHM_LOCK_TIMEOUT_MS=\"abc\"");
    ck_assert_msg(first != NULL, "no warning: %s", log);
    ck_assert_ptr_null(strstr(first + 1, "KPC_SHM_LOCK_TIMEOUT_MS=\"abc\""));
    free(log);
    setenv("KPC_SHM_LOCK_TIMEOUT_MS", "250", 1);
    ck_assert_uint_eq(kpc__setting_number(KPC_SET_SHM_LOCK_TIMEOUT_MS), 250);
    unsetenv("KPC_SHM_LOCK_TIMEOUT_MS");
}
END_TEST

/* The tools: exit 2 with the variable and its form on stderr, before doing anything. */
START_TEST(tools_exit_2_naming_the_variable)
{
    const char *kpc = getenv("KPC_TOOL"), *reset = getenv("KPC_SHM_RESET");
    ck_assert_ptr_nonnull(kpc);
    ck_assert_ptr_nonnull(reset);
    static const char *const envs[][2] = {
        {"KPC_SHM_LOCK_TIMEOUT_MS=abc", "milliseconds"},
        {"KPC_BUILD_WAIT_MAX_MS=-1", "milliseconds"},
        {"KPC_REMOTE=foo://x", "redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]"},
        {"KPC_REMOTE=redis://h:99999", "bad port"},
    };
    for (size_t i = 0; i < sizeof envs / sizeof envs[0]; i++) {
        const char *const cmds[][5] = {{kpc, "stats", NULL}, {kpc, "prune", NULL}, {kpc, "ls", NULL},
                                       {kpc, "pack", "ls", "/nonexistent.kpack"}, {reset, NULL}};
        for (size_t k = 0; k < sizeof cmds / sizeof cmds[0]; k++) {
            const char *env[] = {envs[i][0], NULL};
            char *out = NULL, *err = NULL;
            int rc = ts_exec(cmds[k], env, &out, &err);
            char var[64];
            snprintf(var, sizeof var, "%.*s", (int)strcspn(envs[i][0], "="), envs[i][0]);
            ck_assert_msg(rc == 2, "%s %s with %s: exit %d: %s", cmds[k][0], cmds[k][1] ? cmds[k][1] : "",
                          envs[i][0], rc, err);
            ck_assert_msg(strstr(err, var) && strstr(err, envs[i][1]), "%s %s with %s: %s", cmds[k][0],
                          cmds[k][1] ? cmds[k][1] : "", envs[i][0], err);
            free(out);
            free(err);
        }
    }
}
END_TEST

/* kpc prune --max-size: a size past 2^64 - 1 is bad usage, not a wrapped number. */
START_TEST(prune_refuses_a_size_that_overflows)
{
    const char *kpc = getenv("KPC_TOOL");
    const char *const sizes[] = {"99999999999999999999", "17E", "16384P", "-1", "1.5G", "5K5", NULL};
    for (const char *const *sz = sizes; *sz; sz++) {
        const char *argv[] = {kpc, "prune", "--max-size", *sz, NULL};
        char *err = NULL;
        int rc = ts_exec(argv, NULL, NULL, &err);
        ck_assert_msg(rc == 2 && strstr(err, "--max-size"), "--max-size %s: exit %d: %s", *sz, rc, err);
        free(err);
    }
    const char *argv[] = {kpc, "prune", "--max-size", "0", NULL};
    ck_assert_int_eq(ts_exec(argv, NULL, NULL, NULL), 0);
}
END_TEST

/* A word setting reads as the word's place; a name as itself; 0 seconds is a value. */
START_TEST(words_names_and_seconds_read_as_set)
{
    ck_assert_uint_eq(kpc__setting_number(KPC_SET_REMOTE_TRUST), 0);
    setenv("KPC_REMOTE_TRUST", "unauthenticated", 1);
    ck_assert_uint_eq(kpc__setting_number(KPC_SET_REMOTE_TRUST), 1);
    setenv("KPC_REMOTE_TRUST", "authenticated", 1);
    ck_assert_uint_eq(kpc__setting_number(KPC_SET_REMOTE_TRUST), 0);
    unsetenv("KPC_REMOTE_TRUST");
    ck_assert_ptr_null(kpc__setting_text(KPC_SET_REMOTE_NAMESPACE));
    setenv("KPC_REMOTE_NAMESPACE", "site2", 1);
    ck_assert_str_eq(kpc__setting_text(KPC_SET_REMOTE_NAMESPACE), "site2");
    unsetenv("KPC_REMOTE_NAMESPACE");
    ck_assert_uint_eq(kpc__setting_number(KPC_SET_REMOTE_TTL_S), 2592000);
    setenv("KPC_REMOTE_TTL_S", "0", 1);
    ck_assert_uint_eq(kpc__setting_number(KPC_SET_REMOTE_TTL_S), 0);
    unsetenv("KPC_REMOTE_TTL_S");
    ck_assert_uint_eq(kpc__setting_number(KPC_SET_REMOTE_LEASE_MS), 3000);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--write-docs") == 0)
        return write_docs();
    Suite *s = suite_create("settings");
    TCase *d = tcase_create("docs");
    tcase_add_test(d, docs_are_generated_from_the_table);
    tcase_add_test(d, docs_name_no_variable_outside_the_table);
    tcase_add_test(d, no_setting_is_read_outside_the_table);
    suite_add_tcase(s, d);
    TCase *v = tcase_create("values");
    tcase_add_checked_fixture(v, setup, teardown);
    tcase_add_test(v, malformed_values_are_refused_by_cache_open);
    tcase_add_test(v, malformed_config_remote_is_refused);
    tcase_add_test(v, a_reader_warns_once_and_uses_the_default);
    tcase_add_test(v, tools_exit_2_naming_the_variable);
    tcase_add_test(v, prune_refuses_a_size_that_overflows);
    tcase_add_test(v, words_names_and_seconds_read_as_set);
    suite_add_tcase(s, v);
    return ts_run_suite(s);
}
