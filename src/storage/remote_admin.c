/*
 * remote_admin.c - what `kpc remote stats|ls|prune|clear` asks of Redis (remote.h): the
 * group's keys walked with SCAN (never KEYS: a big server must not stall), and the
 * server's own figures from INFO. Only the group's prefix is ever touched, so several
 * caches (namespaces, secrets) share one Redis safely.
 */
#define _GNU_SOURCE
#include "storage/remote_private.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef bool (*key_fn)(redisContext *c, kpc_remote *r, const char *name, void *arg);

/* Call fn for each key of the group matching pattern_suffix ("*" or "*:co"). */
static kpc_status scan(kpc_remote *r, const char *pattern_suffix, key_fn fn, void *arg)
{
    const char *why = NULL;
    redisContext *c = kpc_remote_connect(r, &why);
    if (c == NULL) {
        KPC_LOG(KPC_LOG_ERROR, "remote tier %s: %s", r->shown, why);
        return KPC_E_UNAVAILABLE;
    }
    char pattern[KPC_REMOTE_NAME_MAX], cursor[32] = "0";
    snprintf(pattern, sizeof pattern, "%s%s", r->prefix, pattern_suffix);
    kpc_status s = KPC_OK;
    do {
        const char *argv[6] = {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"};
        size_t lens[6] = {4, strlen(cursor), 5, strlen(pattern), 5, 4};
        redisReply *rep = kpc_remote_command(r, c, 6, argv, lens, &why);
        if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
            rep->element[0]->type != REDIS_REPLY_STRING || rep->element[1]->type != REDIS_REPLY_ARRAY) {
            KPC_LOG(KPC_LOG_ERROR, "remote tier %s: SCAN: %s", r->shown, why ? why : "unexpected reply");
            if (rep)
                freeReplyObject(rep);
            s = KPC_E_UNAVAILABLE;
            break;
        }
        snprintf(cursor, sizeof cursor, "%s", rep->element[0]->str);
        for (size_t i = 0; s == KPC_OK && i < rep->element[1]->elements; i++) {
            redisReply *k = rep->element[1]->element[i];
            if (k->type == REDIS_REPLY_STRING && !fn(c, r, k->str, arg))
                s = KPC_E_UNAVAILABLE;
        }
        freeReplyObject(rep);
    } while (s == KPC_OK && strcmp(cursor, "0") != 0);
    redisFree(c);
    return s;
}

static long long int_of(kpc_remote *r, redisContext *c, int argc, const char **argv)
{
    size_t lens[4];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    const char *why = NULL;
    redisReply *rep = kpc_remote_command(r, c, argc, argv, lens, &why);
    long long v = rep && rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1;
    if (rep)
        freeReplyObject(rep);
    return v;
}

typedef struct list_arg {
    kpc_remote_record_fn fn;
    void *arg;
    long long max_idle_s;
    uint64_t removed;
} list_arg;

static bool list_one(redisContext *c, kpc_remote *r, const char *name, void *arg)
{
    list_arg *a = arg;
    long long size = int_of(r, c, 2, (const char *[]){"STRLEN", name});
    long long ttl = int_of(r, c, 2, (const char *[]){"PTTL", name});
    long long idle = int_of(r, c, 3, (const char *[]){"OBJECT", "IDLETIME", name});
    if (size < 0)
        return true; /* gone meanwhile */
    a->fn(name, (uint64_t)size, ttl, idle, a->arg);
    return true;
}

kpc_status kpc_remote_list(kpc_remote *r, kpc_remote_record_fn fn, void *arg)
{
    list_arg a = {.fn = fn, .arg = arg};
    return scan(r, "*:co", list_one, &a);
}

static bool prune_one(redisContext *c, kpc_remote *r, const char *name, void *arg)
{
    list_arg *a = arg;
    long long idle = int_of(r, c, 3, (const char *[]){"OBJECT", "IDLETIME", name});
    if (idle >= a->max_idle_s && int_of(r, c, 2, (const char *[]){"UNLINK", name}) == 1)
        a->removed++;
    return true;
}

kpc_status kpc_remote_prune(kpc_remote *r, long long max_idle_s, uint64_t *removed)
{
    list_arg a = {.max_idle_s = max_idle_s};
    kpc_status s = scan(r, "*:co", prune_one, &a);
    *removed = a.removed;
    return s;
}

static bool clear_one(redisContext *c, kpc_remote *r, const char *name, void *arg)
{
    list_arg *a = arg;
    if (int_of(r, c, 2, (const char *[]){"UNLINK", name}) == 1)
        a->removed++;
    return true;
}

kpc_status kpc_remote_clear(kpc_remote *r, uint64_t *removed)
{
    list_arg a = {0};
    kpc_status s = scan(r, "*", clear_one, &a);
    *removed = a.removed;
    return s;
}

static uint64_t info_u64(const char *info, const char *field)
{
    const char *p = strstr(info, field);
    return p ? strtoull(p + strlen(field), NULL, 10) : 0;
}

static void info_str(const char *info, const char *field, char *out, size_t cap)
{
    const char *p = strstr(info, field);
    out[0] = '\0';
    if (p)
        snprintf(out, cap, "%.*s", (int)strcspn(p + strlen(field), "\r\n"), p + strlen(field));
}

typedef struct count_arg {
    uint64_t n;
} count_arg;

static bool count_one(redisContext *c, kpc_remote *r, const char *name, void *arg)
{
    (void)c, (void)r, (void)name;
    ((count_arg *)arg)->n++;
    return true;
}

kpc_status kpc_remote_server_info(kpc_remote *r, kpc_remote_server *out)
{
    memset(out, 0, sizeof *out);
    const char *why = NULL;
    redisContext *c = kpc_remote_connect(r, &why);
    if (c == NULL) {
        KPC_LOG(KPC_LOG_ERROR, "remote tier %s: %s", r->shown, why);
        return KPC_E_UNAVAILABLE;
    }
    const char *argv[1] = {"INFO"};
    size_t lens[1] = {4};
    redisReply *rep = kpc_remote_command(r, c, 1, argv, lens, &why);
    if (rep && rep->type == REDIS_REPLY_STRING) {
        out->used_memory = info_u64(rep->str, "\nused_memory:");
        out->maxmemory = info_u64(rep->str, "\nmaxmemory:");
        out->connected_clients = info_u64(rep->str, "\nconnected_clients:");
        out->maxclients = info_u64(rep->str, "\nmaxclients:");
        info_str(rep->str, "\nmaxmemory_policy:", out->policy, sizeof out->policy);
        info_str(rep->str, "redis_version:", out->version, sizeof out->version);
    }
    if (rep)
        freeReplyObject(rep);
    redisFree(c);
    count_arg n = {0};
    kpc_status s = scan(r, "*:co", count_one, &n);
    out->keys = n.n;
    return s;
}
