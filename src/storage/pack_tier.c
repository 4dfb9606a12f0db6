/*
 * pack_tier.c - the read-only tier of pack files named by KPC_PACK_PATH.
 *
 * KPC_PACK_PATH is a colon-separated list, like PATH, of pack files and of directories
 * whose `*.kpack` files are taken in name order. Every pack is opened (and its index
 * checked and read) once, when the cache opens; a pack that is refused (not a pack,
 * truncated, a bad index, or one another user could have written: the cache directory's
 * trust rule, kpc_pack_check_trust) is logged and left out, and the others are used. A request
 * reaches this tier after a miss in the disk tree and before a compile; the packs are
 * asked in order and the first good entry answers. A damaged entry (it fails the checks
 * of any record read) is refused, logged and counted, and the next pack is asked; with
 * no good entry anywhere the request builds. The walk (storage/tier.c) back-fills a hit
 * into the disk tree, so the next process of the host reads it from there.
 *
 * Threads: after open the tier is read-only (each read is one pread on an fd no one
 * seeks); the walk (storage/tier.c) keeps its counters.
 */
#define _GNU_SOURCE
#include "storage/pack_tier.h"
#include "base/fault.h"
#include "base/log.h"
#include "base/settings.h"
#include "storage/pack.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_PACKS 64

typedef struct pack_tier {
    kpc_tier t; /* first: a kpc_tier * is a pack_tier * */
    kpc_pack *packs[MAX_PACKS]; /* opened once, read-only after open */
    size_t n;
} pack_tier;

static void add_pack(pack_tier *t, const char *path)
{
    if (t->n == MAX_PACKS) {
        KPC_LOG(KPC_LOG_WARN, "KPC_PACK_PATH: more than %d packs: %s not used", MAX_PACKS, path);
        return;
    }
    kpc_pack *p;
    if (kpc_pack_open(path, &p) != KPC_OK) /* a refusal is logged by the open */
        return;
    if (kpc_pack_check_trust(p) != KPC_OK) { /* logged with the file and the rule */
        kpc_pack_close(p);
        return;
    }
    t->packs[t->n++] = p;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every *.kpack of dir, in name order. */
static void add_dir(pack_tier *t, const char *dir)
{
    DIR *d = kpc__opendir(dir);
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

/* The tier's read: the first good entry of the packs, in order. A damaged entry is
 * logged by kpc_pack_read and the next pack asked; with none good, KPC_E_CORRUPT when
 * one was refused (the walk counts it), else KPC_E_NOT_FOUND. */
static kpc_status pack_read(kpc_tier *tier, const kpc_key *key, const char *target, uint32_t kind,
                            kpc_record *out)
{
    pack_tier *t = (pack_tier *)tier;
    kpc_status result = KPC_E_NOT_FOUND;
    for (size_t i = 0; i < t->n; i++) {
        kpc_status s = kpc_pack_read(t->packs[i], key, target, kind, out);
        if (s == KPC_OK || s == KPC_E_NOMEM)
            return s;
        if (s == KPC_E_CORRUPT || (s == KPC_E_IO && result == KPC_E_NOT_FOUND))
            result = s;
    }
    return result;
}

static void pack_close(kpc_tier *tier)
{
    pack_tier *t = (pack_tier *)tier;
    for (size_t i = 0; i < t->n; i++)
        kpc_pack_close(t->packs[i]);
    free(t);
}

static const kpc_tier_ops pack_ops = {
    .read = pack_read,
    .close = pack_close,
};

kpc_status kpc_pack_tier_open(const kpc_tier_env *env, kpc_tier **out)
{
    (void)env;
    *out = NULL;
    const char *pack_path = kpc__setting_text(KPC_SET_PACK_PATH);
    if (pack_path == NULL)
        return KPC_E_NOT_FOUND;
    pack_tier *t = calloc(1, sizeof *t);
    char *list = kpc__strdup(pack_path);
    if (t == NULL || list == NULL) {
        free(t);
        free(list);
        return KPC_E_NOMEM;
    }
    char *save = NULL;
    for (char *item = strtok_r(list, ":", &save); item; item = strtok_r(NULL, ":", &save)) {
        struct stat sb;
        if (kpc__fstatat(AT_FDCWD, item, &sb, 0) != 0)
            KPC_LOG(KPC_LOG_WARN, "KPC_PACK_PATH: %s: %s", item, strerror(errno));
        else if (S_ISDIR(sb.st_mode))
            add_dir(t, item);
        else
            add_pack(t, item);
    }
    free(list);
    if (t->n == 0) {
        KPC_LOG(KPC_LOG_WARN, "KPC_PACK_PATH names no usable pack: no pack tier");
        free(t);
        return KPC_E_NOT_FOUND;
    }
    t->t.ops = &pack_ops;
    *out = &t->t;
    return KPC_OK;
}
