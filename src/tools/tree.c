/*
 * tree.c - the kpc commands over the disk tree: ls, verify, prune, clear.
 *
 * They read (and, for verify, prune and clear, change) the cache dir through the store
 * (storage/store.h), never the compiler, except `prune --stale`, which asks the platform
 * for the installed compiler's identity. ls and verify walk every record into rows
 * (collect_row), newest first; a walk that met errors fails the command, since what was
 * not read was not checked. An absent cache dir is an empty one under --json, else said.
 */
#define _GNU_SOURCE
#include "base/log.h"
#include "base/settings.h"
#include "core/config.h"
#include "platform/platform.h"
#include "storage/store.h"
#include "tools/tool.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct ls_row {
    char key[33], target[64], source[80], kind[4];
    char *path; /* malloc'd: a cache dir's path may be long */
    uint64_t size, mtime_ns;
    bool bad, removed;
} ls_row;

typedef struct ls_acc {
    ls_row *rows;
    size_t n, cap;
} ls_acc;

static int collect_row(const kpc_store_entry *e, void *arg)
{
    ls_acc *a = arg;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 256;
        ls_row *r = realloc(a->rows, cap * sizeof *r);
        if (r == NULL)
            return 1;
        a->rows = r;
        a->cap = cap;
    }
    char *path = strdup(e->path);
    if (path == NULL)
        return 1;
    ls_row *r = &a->rows[a->n++];
    memset(r, 0, sizeof *r);
    r->path = path;
    const char *base = strrchr(e->path, '/') + 1;
    memcpy(r->key, base, 32);
    snprintf(r->kind, sizeof r->kind, "%s", strstr(base, ".log") ? "log" : strstr(base, ".mf") ? "mf" : "co");
    r->size = e->size;
    r->mtime_ns = e->mtime_ns;
    r->bad = e->status != KPC_OK;
    r->removed = e->removed;
    if (e->rec) {
        snprintf(r->target, sizeof r->target, "%s", e->rec->target);
        snprintf(r->source, sizeof r->source, "%s", e->rec->source_name);
    }
    return 0;
}

static int by_recent(const void *x, const void *y)
{
    const ls_row *a = x, *b = y;
    return a->mtime_ns > b->mtime_ns ? -1 : a->mtime_ns < b->mtime_ns;
}

static void iso_time(uint64_t ns, char *out, size_t cap)
{
    time_t t = (time_t)(ns / 1000000000u);
    struct tm tm;
    strftime(out, cap, "%Y-%m-%dT%H:%M:%S", localtime_r(&t, &tm));
}

/* Every record of the cache dir, newest first; with `verify`, the walk checks each one and
 * removes the damaged. */
static int walk_rows(const kpc_tool *t, bool verify, ls_acc *acc, kpc_status *walked)
{
    *walked = KPC_OK;
    if (t->root[0]) {
        kpc_store *st;
        int rc = kpc_tool_store(t, &st);
        if (rc != KPC_TOOL_OK)
            return rc;
        /* an error the walk met (an unreadable directory) is logged by the walk and fails
         * the command: what was not read was not checked */
        *walked = kpc_store_walk(st, verify, collect_row, acc);
        kpc_store_close(st);
    }
    if (acc->n > 1) /* qsort wants a non-NULL array, even of none */
        qsort(acc->rows, acc->n, sizeof *acc->rows, by_recent);
    return KPC_TOOL_OK;
}

static void free_rows(ls_acc *acc)
{
    for (size_t i = 0; i < acc->n; i++)
        free(acc->rows[i].path);
    free(acc->rows);
}

int kpc_tool_ls(kpc_tool *t)
{
    ls_acc acc = {0};
    kpc_status walked = KPC_OK;
    int rc = kpc_tool_open(t);
    if (rc == KPC_TOOL_OK)
        rc = walk_rows(t, false, &acc, &walked);
    if (rc != KPC_TOOL_OK)
        return rc;
    cJSON *arr = t->json ? cJSON_CreateArray() : NULL;
    if (!arr) /* SIZE is the file's: the record header plus the code `kpc compile` reports */
        printf("%-32s %-4s %-24s %9s %-19s %s\n", "KEY", "KIND", "TARGET", "FILE SIZE", "LAST USE", "SOURCE");
    for (size_t i = 0; i < acc.n; i++) {
        const ls_row *r = &acc.rows[i];
        if (arr) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "key", r->key);
            cJSON_AddStringToObject(o, "kind", r->kind);
            cJSON_AddStringToObject(o, "target", r->bad ? "" : r->target);
            cJSON_AddNumberToObject(o, "size", (double)r->size);
            cJSON_AddNumberToObject(o, "last_use", (double)(r->mtime_ns / 1000000000u));
            cJSON_AddStringToObject(o, "source", r->source);
            cJSON_AddBoolToObject(o, "damaged", r->bad);
            cJSON_AddItemToArray(arr, o);
            continue;
        }
        char when[32], size[16];
        iso_time(r->mtime_ns, when, sizeof when);
        kpc_tool_human(size, sizeof size, r->size);
        printf("%-32s %-4s %-24s %9s %-19s %s\n", r->key, r->kind, r->bad ? "(damaged)" : r->target, size, when,
               r->source);
    }
    free_rows(&acc);
    rc = arr ? kpc_tool_print_json(arr) : KPC_TOOL_OK;
    if (walked != KPC_OK) {
        fprintf(stderr, "kpc ls: %s: the walk met errors (above): not every file was listed\n", t->root);
        return KPC_TOOL_FAIL;
    }
    return rc;
}

int kpc_tool_verify(kpc_tool *t)
{
    ls_acc acc = {0};
    int rc = kpc_tool_open(t);
    if (rc != KPC_TOOL_OK)
        return rc;
    if (!t->root[0] && !t->json)
        return kpc_tool_say_absent(t);
    kpc_status walked = KPC_OK;
    if ((rc = walk_rows(t, true, &acc, &walked)) != KPC_TOOL_OK)
        return rc;
    size_t removed = 0, failed_removals = 0;
    cJSON *arr = t->json ? cJSON_CreateArray() : NULL;
    for (size_t i = 0; i < acc.n; i++) {
        const ls_row *r = &acc.rows[i];
        if (!r->bad)
            continue;
        bool ok = r->removed; /* the walk removed it while it still held what it checked */
        ok ? removed++ : failed_removals++;
        if (arr) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "path", r->path);
            cJSON_AddBoolToObject(o, "removed", ok);
            cJSON_AddItemToArray(arr, o);
        } else
            printf("%s %s\n", ok ? "removed" : "could not remove", r->path);
    }
    if (arr) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "checked", (double)acc.n);
        cJSON_AddNumberToObject(o, "removed", (double)removed);
        cJSON_AddItemToObject(o, "damaged", arr);
        kpc_tool_print_json(o);
    } else
        printf("checked %zu %s, removed %zu damaged\n", acc.n, kpc_tool_plural(acc.n, "file", "files"), removed);
    free_rows(&acc);
    if (walked != KPC_OK)
        fprintf(stderr, "kpc verify: %s: the walk met errors (above): not every file was checked\n",
                t->root);
    return walked != KPC_OK || removed || failed_removals ? KPC_TOOL_FAIL : KPC_TOOL_OK;
}

/* ---- prune / clear ------------------------------------------------------------------ */
int kpc_tool_prune_option(kpc_tool *t, int c, const char *arg)
{
    if (c == KPC_TOOL_OPT_STALE)
        t->stale = true;
    else
        t->max_size = arg;
    return KPC_TOOL_OK;
}

int kpc_tool_prune(kpc_tool *t)
{
    uint64_t max = 0;
    if (t->max_size && kpc_tool_number(t, "--max-size", t->max_size, KPC_SETTING_SIZE, 0, UINT64_MAX, &max) != KPC_TOOL_OK)
        return KPC_TOOL_USAGE;
    int rc = kpc_tool_open(t);
    if (rc != KPC_TOOL_OK)
        return rc;
    if (t->max_size == NULL)
        max = t->set.disk_max_bytes;
    kpc_prune_result res = {0};
    kpc_status s = KPC_OK;
    if (!t->root[0] && !t->json)
        return kpc_tool_say_absent(t);
    if (t->root[0]) { /* else --json: an absent cache is an empty one, all zeros */
        kpc_store *st;
        if ((rc = kpc_tool_store(t, &st)) != KPC_TOOL_OK)
            return rc;
        uint8_t id[16];
        char desc[512];
        if (t->stale) {
            /* the identity a context would key with now (the compiler is loaded only if its
             * files changed since the last process remembered it) */
            s = kpc_platform_get()->identity(kpc_store_root(st), id, desc, sizeof desc);
            if (s != KPC_OK) {
                fprintf(stderr, "kpc prune: --stale needs the installed compiler's identity: %s\n",
                        kpc_status_str(s));
                kpc_store_close(st);
                return KPC_TOOL_FAIL;
            }
        }
        /* wait for a library process that is pruning: its limit may be higher than ours */
        s = kpc_store_prune_wait(st, max, t->stale ? id : NULL, &res);
        kpc_store_close(st);
    }
    if (t->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "files_before", (double)res.files_before);
        cJSON_AddNumberToObject(o, "bytes_before", (double)res.bytes_before);
        cJSON_AddNumberToObject(o, "files_removed", (double)res.files_removed);
        cJSON_AddNumberToObject(o, "bytes_removed", (double)res.bytes_removed);
        cJSON_AddNumberToObject(o, "temp_removed", (double)res.temp_removed);
        cJSON_AddNumberToObject(o, "max_bytes", (double)max);
        kpc_tool_print_json(o);
    } else {
        char b[16], m[16];
        kpc_tool_human(b, sizeof b, res.bytes_removed);
        kpc_tool_human(m, sizeof m, max);
        printf("removed %llu of %llu %s (%s); limit %s\n", (unsigned long long)res.files_removed,
               (unsigned long long)res.files_before, kpc_tool_plural(res.files_before, "file", "files"), b, m);
    }
    return s == KPC_OK ? KPC_TOOL_OK : KPC_TOOL_FAIL;
}

int kpc_tool_clear(kpc_tool *t)
{
    int rc = kpc_tool_open(t);
    if (rc != KPC_TOOL_OK)
        return rc;
    if (!t->root[0] && !t->json)
        return kpc_tool_say_absent(t);
    uint64_t removed = 0, failed = 0;
    kpc_status s = KPC_OK;
    if (t->root[0]) {
        kpc_store *st;
        if ((rc = kpc_tool_store(t, &st)) != KPC_TOOL_OK)
            return rc;
        /* each failed removal or walk error is logged; the command then fails, whatever it
         * did remove (a failure is reported, not hidden behind the successes) */
        s = kpc_store_clear(st, &removed, &failed);
        kpc_store_close(st);
    }
    if (t->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "removed", (double)removed);
        cJSON_AddNumberToObject(o, "failed", (double)failed);
        kpc_tool_print_json(o);
    } else
        printf("removed %llu %s\n", (unsigned long long)removed, kpc_tool_plural(removed, "file", "files"));
    if (s != KPC_OK) {
        fprintf(stderr, "kpc clear: %s: %llu %s could not be removed%s (above)\n", t->root,
                (unsigned long long)failed, kpc_tool_plural(failed, "file", "files"), failed ? "" : ", the walk met errors");
        return KPC_TOOL_FAIL;
    }
    return KPC_TOOL_OK;
}
