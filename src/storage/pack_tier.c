/*
 * pack_tier.c - the read-only tier of pack files named by KPC_PACK_PATH.
 *
 * KPC_PACK_PATH is a colon-separated list, like PATH, of pack files and of directories
 * whose `*.kpack` files are taken in name order. Every pack is opened (and its index
 * checked and read) once, when the cache opens; a pack that is refused (not a pack,
 * truncated, a bad index) is logged and left out, and the others are used. A request
 * reaches this tier after a miss in the disk tree and before a compile; the packs are
 * asked in order and the first good entry answers. A damaged entry (it fails the checks
 * of any record read) is refused, logged and counted, and the next pack is asked; with
 * no good entry anywhere the request builds. The caller back-fills a hit into the disk
 * tree, so the next process of the host reads it from there.
 *
 * Threads: after open the tier is read-only (each read is one pread on an fd no one
 * seeks); the counters are relaxed atomics.
 */
#define _GNU_SOURCE
#include "../kpc_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_PACKS 64

struct kpc_pack_tier {
    kpc_pack *packs[MAX_PACKS];
    size_t n;
    _Atomic uint64_t hits, misses, refused;
};

static void add_pack(kpc_pack_tier *t, const char *path)
{
    if (t->n == MAX_PACKS) {
        KPC_LOG(KPC_LOG_WARN, "KPC_PACK_PATH: more than %d packs: %s not used", MAX_PACKS, path);
        return;
    }
    kpc_pack *p;
    if (kpc_pack_open(path, &p) == KPC_OK) /* a refusal is logged by the open */
        t->packs[t->n++] = p;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every *.kpack of dir, in name order. */
static void add_dir(kpc_pack_tier *t, const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        KPC_LOG(KPC_LOG_WARN, "KPC_PACK_PATH: opendir(%s): %s", dir, strerror(errno));
        return;
    }
    char *names[MAX_PACKS];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < MAX_PACKS) {
        size_t len = strlen(e->d_name);
        if (len > 6 && strcmp(e->d_name + len - 6, ".kpack") == 0 && (names[n] = kpc__strdup(e->d_name)))
            n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", dir, names[i]) < (int)sizeof path)
            add_pack(t, path);
        free(names[i]);
    }
}

kpc_status kpc_pack_tier_open(const char *pack_path, kpc_pack_tier **out)
{
    *out = NULL;
    if (pack_path == NULL || pack_path[0] == '\0')
        return KPC_E_NOT_FOUND;
    kpc_pack_tier *t = calloc(1, sizeof *t);
    char *list = kpc__strdup(pack_path);
    if (t == NULL || list == NULL) {
        free(t);
        free(list);
        return KPC_E_NOMEM;
    }
    char *save = NULL;
    for (char *item = strtok_r(list, ":", &save); item; item = strtok_r(NULL, ":", &save)) {
        struct stat sb;
        if (stat(item, &sb) != 0)
            KPC_LOG(KPC_LOG_WARN, "KPC_PACK_PATH: %s: %s", item, strerror(errno));
        else if (S_ISDIR(sb.st_mode))
            add_dir(t, item);
        else
            add_pack(t, item);
    }
    free(list);
    if (t->n == 0) {
        KPC_LOG(KPC_LOG_INFO, "KPC_PACK_PATH names no usable pack");
        free(t);
        return KPC_E_NOT_FOUND;
    }
    *out = t;
    return KPC_OK;
}

void kpc_pack_tier_close(kpc_pack_tier *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->n; i++)
        kpc_pack_close(t->packs[i]);
    free(t);
}

kpc_status kpc_pack_tier_read(kpc_pack_tier *t, const kpc_key *key, const char *target, uint32_t kind,
                              kpc_record *out)
{
    for (size_t i = 0; i < t->n; i++) {
        kpc_status s = kpc_pack_read(t->packs[i], key, target, kind, out);
        if (s == KPC_OK) {
            atomic_fetch_add_explicit(&t->hits, 1, memory_order_relaxed);
            return KPC_OK;
        }
        if (s == KPC_E_CORRUPT)
            atomic_fetch_add_explicit(&t->refused, 1, memory_order_relaxed);
        if (s == KPC_E_NOMEM)
            return s;
    }
    atomic_fetch_add_explicit(&t->misses, 1, memory_order_relaxed);
    return KPC_E_NOT_FOUND;
}

void kpc_pack_tier_counters(kpc_pack_tier *t, uint64_t *hits, uint64_t *misses, uint64_t *refused)
{
    *hits = atomic_load(&t->hits);
    *misses = atomic_load(&t->misses);
    *refused = atomic_load(&t->refused);
}
