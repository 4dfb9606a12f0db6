/*
 * pack.c - `kpc pack create | verify | ls`: pack files of pre-built records
 * (storage/pack.c owns the format; docs/file-format.md describes it).
 *
 *   create OUT.kpack [--target T]...   the code records of the cache (of those targets),
 *                                      each checked as it is read, into one new pack
 *   verify FILE                        open (header, size, index) and check every entry
 *   ls FILE                            one row per entry
 *
 * Nothing here loads the compiler. A pack that is refused, or an entry that fails its
 * checks, is reported on stderr (with the library's log line saying why) and the exit
 * status is 1.
 */
#define _GNU_SOURCE
#include "base/fault.h"
#include "base/util.h"
#include "core/config.h"
#include "core/key.h"
#include "storage/pack.h"
#include "storage/store.h"
#include "tools/tool.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define USAGE "usage: kpc pack create OUT.kpack [--target T]... [--cache-dir DIR] [--json]\n" \
              "       kpc pack verify FILE [--json]\n"                                      \
              "       kpc pack ls FILE [--json]\n"

static int usage(const char *msg)
{
    fprintf(stderr, "kpc pack: %s\n" USAGE, msg);
    return KPC_TOOL_USAGE;
}

/* ---- create ------------------------------------------------------------------------- */
typedef struct create_job {
    kpc_pack_writer *w;
    const char *const *targets;
    size_t ntargets;
    size_t added, skipped;
    uint64_t bytes;
    kpc_status failed;
} create_job;

static int add_record(const kpc_store_entry *e, void *arg)
{
    create_job *c = arg;
    if (e->rec->kind != KPC_RECORD_CODE)
        return 0;
    bool wanted = c->ntargets == 0;
    for (size_t i = 0; i < c->ntargets && !wanted; i++)
        wanted = strcmp(e->rec->target, c->targets[i]) == 0;
    if (!wanted)
        return 0;
    int fd = kpc__open(e->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0);
    void *buf = NULL;
    size_t size = 0;
    kpc_status s = fd < 0 ? KPC_E_NOT_FOUND : kpc__read_fd(fd, (1u << 30) + 256u, &buf, &size);
    if (fd >= 0)
        close(fd);
    if (s == KPC_OK)
        s = kpc_pack_add(c->w, buf, size); /* checked like any read; a bad one is logged */
    free(buf);
    if (s == KPC_OK) {
        c->added++;
        c->bytes += size;
    } else if (s == KPC_E_IO || s == KPC_E_NOMEM) {
        c->failed = s;
        return 1;
    } else
        c->skipped++; /* pruned meanwhile, or damaged: left out */
    return 0;
}

static int cmd_create(const char *out, const char *const *targets, size_t ntargets, const char *cache_dir, bool json)
{
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = cache_dir};
    kpc_settings set;
    if (kpc_config_resolve(&cfg, &set) != KPC_OK)
        return KPC_TOOL_USAGE;
    kpc_store *st;
    if (kpc_store_open(set.cache_dir, set.disk_max_bytes, &st) != KPC_OK) {
        fprintf(stderr, "kpc pack: cannot use cache directory %s\n", set.cache_dir);
        return KPC_TOOL_FAIL;
    }
    create_job c = {.targets = targets, .ntargets = ntargets};
    kpc_status s = kpc_pack_create(out, &c.w);
    if (s == KPC_OK)
        s = kpc_store_walk(st, false, add_record, &c);
    if (s == KPC_OK)
        s = c.failed;
    size_t kept = 0;
    if (s == KPC_OK)
        s = kpc_pack_finish(c.w, &kept);
    else
        kpc_pack_discard(c.w);
    kpc_store_close(st);
    if (s != KPC_OK) {
        fprintf(stderr, "kpc pack: cannot create %s: %s\n", out, kpc_status_str(s));
        return KPC_TOOL_FAIL;
    }
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "pack", out);
        cJSON_AddNumberToObject(o, "records", (double)kept);
        cJSON_AddNumberToObject(o, "bytes", (double)c.bytes);
        cJSON_AddNumberToObject(o, "skipped", (double)c.skipped);
        return kpc_tool_print_json(o);
    }
    char b[16];
    kpc_tool_human(b, sizeof b, c.bytes);
    printf("pack %s: %zu records (%s)%s\n", out, kept, b, c.skipped ? "; some records were damaged or gone: left out" : "");
    return KPC_TOOL_OK;
}

/* ---- verify and ls ---------------------------------------------------------------- */
static int cmd_read(const char *file, bool verify, bool json)
{
    kpc_pack *p;
    kpc_status s = kpc_pack_open(file, &p); /* a refusal is logged with the reason */
    if (s != KPC_OK) {
        fprintf(stderr, "kpc pack: %s: %s\n", file,
                s == KPC_E_CORRUPT ? "not a usable kpc pack (see the line above)" : kpc_status_str(s));
        return KPC_TOOL_FAIL;
    }
    size_t n = kpc_pack_count(p), bad = 0;
    cJSON *arr = json ? cJSON_CreateArray() : NULL;
    for (size_t i = 0; i < n; i++) {
        kpc_pack_entry e;
        kpc_record rec;
        kpc_pack_entry_get(p, i, &e);
        s = kpc_pack_read_at(p, i, &rec); /* every check of a record read; logged when bad */
        char hex[KPC_KEY_HEX], idhex[33];
        kpc_key_hex(&e.key, hex);
        if (s != KPC_OK)
            bad++;
        else
            kpc__hex(rec.compiler_id, 16, idhex);
        if (arr) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "key", hex);
            cJSON_AddStringToObject(o, "target", e.target);
            cJSON_AddNumberToObject(o, "size", (double)e.size);
            cJSON_AddStringToObject(o, "status", kpc_status_str(s));
            if (s == KPC_OK) {
                cJSON_AddStringToObject(o, "name", rec.source_name);
                cJSON_AddStringToObject(o, "compiler", idhex);
                cJSON_AddBoolToObject(o, "request", rec.request_size > 0);
            }
            cJSON_AddItemToArray(arr, o);
        } else if (!verify || s != KPC_OK) {
            char size[16];
            kpc_tool_human(size, sizeof size, e.size);
            printf("%s %-24s %7s %-8s %s\n", hex, e.target, size, s == KPC_OK ? "ok" : "DAMAGED",
                   s == KPC_OK ? (rec.source_name[0] ? rec.source_name : "(unnamed)") : kpc_status_str(s));
        }
        if (s == KPC_OK)
            kpc_record_free(&rec);
    }
    kpc_pack_close(p);
    if (arr) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "pack", file);
        cJSON_AddNumberToObject(o, "records", (double)n);
        cJSON_AddNumberToObject(o, "damaged", (double)bad);
        cJSON_AddItemToObject(o, "entries", arr);
        kpc_tool_print_json(o);
    } else if (verify)
        printf("pack %s: %zu records, %zu damaged\n", file, n, bad);
    return bad ? KPC_TOOL_FAIL : KPC_TOOL_OK;
}

int kpc_tool_pack(const char *verb, const char *file, const char *const *targets, size_t ntargets,
                  const char *cache_dir, bool json)
{
    if (strcmp(verb, "create") == 0)
        return cmd_create(file, targets, ntargets, cache_dir, json);
    if (ntargets || cache_dir)
        return usage("--target and --cache-dir go with create only");
    if (strcmp(verb, "verify") == 0 || strcmp(verb, "ls") == 0)
        return cmd_read(file, verb[0] == 'v', json);
    return usage("the verbs are create, verify and ls");
}
