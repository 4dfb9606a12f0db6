/*
 * tool_support.c - the kpc tool tests' shared fixtures and helpers (tool_support.h).
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

char *dir;
const char *tool;
void setup(void)
{
    dir = ts_tmpdir();
    tool = getenv("KPC_TOOL");
    ck_assert_msg(tool != NULL, "KPC_TOOL is not set (run through ctest)");
}
void teardown(void) { ts_cleanup(dir); }

/* Run `kpc ARGS...` (NULL-terminated); stdout and stderr into *out / *err (may be NULL). */
int kpc(char **out, char **err, ...)
{
    const char *argv[64] = {tool};
    int n = 1;
    va_list ap;
    va_start(ap, err);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL) {
        ck_assert_int_lt(n, 63);
        argv[n++] = a;
    }
    va_end(ap);
    argv[n] = NULL;
    return ts_exec(argv, NULL, out, err);
}

cJSON *parse(const char *text)
{
    cJSON *j = cJSON_Parse(text);
    ck_assert_msg(j != NULL, "not JSON:\n%s", text);
    return j;
}

double num(const cJSON *o, const char *field)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, field);
    ck_assert_msg(cJSON_IsNumber(v), "field \"%s\" is missing or not a number", field);
    return v->valuedouble;
}

const char *str(const cJSON *o, const char *field)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, field);
    ck_assert_msg(cJSON_IsString(v), "field \"%s\" is missing or not a string", field);
    return v->valuestring;
}

bool boolean(const cJSON *o, const char *field)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, field);
    ck_assert_msg(cJSON_IsBool(v), "field \"%s\" is missing or not a boolean", field);
    return cJSON_IsTrue(v);
}

/* A file next to the cache dir holding text; returns its path (malloc'd). */
char *side_file(const char *name, const char *text)
{
    char *base = strdup(dir);
    *strrchr(base, '/') = '\0';
    size_t n = strlen(base) + strlen(name) + 2;
    char *path = malloc(n);
    snprintf(path, n, "%s/%s", base, name);
    free(base);
    ts_write_file(path, text, strlen(text));
    return path;
}

bool is_absent(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) != 0 && errno == ENOENT;
}

/* ---- stats --json ---------------------------------------------------------------------- */
const char *const stats_fields[] = {"lookups", "hits", "builds", "build_failures", "waits", "takeovers",
                                           "evictions", "entries", "capacity", "disk_bytes", "disk_files"};

cJSON *stats_json(void)
{
    char *out = NULL, *err = NULL;
    int rc = kpc(&out, &err, "stats", "--json", "--cache-dir", dir, NULL);
    ck_assert_msg(rc == 0, "kpc stats --json: exit %d\n%s", rc, err);
    cJSON *j = parse(out);
    free(out), free(err);
    for (size_t i = 0; i < sizeof stats_fields / sizeof stats_fields[0]; i++) {
        double v = num(j, stats_fields[i]);
        ck_assert_msg(v >= 0 && v == (double)(uint64_t)v, "%s is not a whole number: %g", stats_fields[i], v);
    }
    return j;
}

/* ---- errors the walk meets -------------------------------------------------------------- */
/* `kpc CMD --cache-dir DIR [--json]` as a user the tree's modes bind: as root (whom modes
 * do not bind) the tree is handed to uid 65534 and the tool runs as it (setpriv); the
 * exit status, stdout and stderr. */
int kpc_bound_args(char **out, char **err, const char *const *args)
{
    bool root = geteuid() == 0;
    if (root) {
        char *base = strdup(dir), sh[4400];
        *strrchr(base, '/') = '\0';
        ck_assert_int_eq(chmod(base, 0755), 0); /* the mkdtemp parent: traversable */
        snprintf(sh, sizeof sh, "chown -R 65534:65534 '%s'", dir);
        ck_assert_int_eq(system(sh), 0);
        free(base);
    }
    const char *argv[24];
    int n = 0;
    if (root) {
        argv[n++] = "/usr/bin/setpriv";
        argv[n++] = "--reuid=65534";
        argv[n++] = "--regid=65534";
        argv[n++] = "--clear-groups";
    }
    argv[n++] = tool;
    for (; *args; args++) {
        ck_assert_int_lt(n, 23);
        argv[n++] = *args;
    }
    argv[n] = NULL;
    /* the compiler's own temporary files: where that user may write */
    const char *env[] = {root ? "TMPDIR=/tmp" : NULL, NULL};
    return ts_exec(argv, env, out, err);
}
