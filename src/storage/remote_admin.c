/*
 * remote_admin.c - what `kpc remote stats|ls|prune|clear` asks of Redis (remote.h): the
 * group's keys walked with SCAN (never KEYS: a big server must not stall), and the
 * server's own figures from INFO. Only the group's prefix is ever touched, so several
 * caches (namespaces, secrets) share one Redis safely. On a Redis Cluster each primary
 * holds its own slots' keys: every walk is a SCAN per primary (remote_slots.c names
 * them), each key then asked of the node that listed it.
 */
#define _GNU_SOURCE
#include "storage/remote_private.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef bool (*key_fn)(struct kpc_remote_conn *cn, kpc_remote *r, const char *name, void *arg);

/* Call fn for each key of the group on the node cn is pinned to matching pattern. */
static kpc_status scan_node(kpc_remote *r, struct kpc_remote_conn *cn, const char *pattern, key_fn fn, void *arg)
{
    char cursor[32] = "0";
    const char *why = NULL;
    kpc_status s = KPC_OK;
    do {
        const char *argv[6] = {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"};
        size_t lens[6] = {4, strlen(cursor), 5, strlen(pattern), 5, 4};
        redisReply *rep = kpc_remote_command(r, cn, 6, argv, lens, &why);
        if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
            rep->element[0]->type != REDIS_REPLY_STRING || rep->element[1]->type != REDIS_REPLY_ARRAY) {
            KPC_LOG(KPC_LOG_ERROR, "remote tier %s: SCAN on %s:%d: %s", r->shown, cn->at.host, cn->at.port,
                    why ? why : "unexpected reply");
            if (rep)
                freeReplyObject(rep);
            s = KPC_E_UNAVAILABLE;
            break;
        }
        snprintf(cursor, sizeof cursor, "%s", rep->element[0]->str);
        for (size_t i = 0; s == KPC_OK && i < rep->element[1]->elements; i++) {
            redisReply *k = rep->element[1]->element[i];
            if (k->type == REDIS_REPLY_STRING && !fn(cn, r, k->str, arg))
                s = KPC_E_UNAVAILABLE;
        }
        freeReplyObject(rep);
    } while (s == KPC_OK && strcmp(cursor, "0") != 0);
    return s;
}

/* Call fn for each key of the group matching pattern_suffix ("*" or "*:co"), on every
 * primary (or the one server). */
static kpc_status scan(kpc_remote *r, const char *pattern_suffix, key_fn fn, void *arg)
{
    kpc_remote_addr *node;
    int nodes;
    kpc_status s = kpc_remote_primaries(r, &node, &nodes);
    char pattern[KPC_REMOTE_NAME_MAX];
    snprintf(pattern, sizeof pattern, "%s%s", r->prefix, pattern_suffix);
    for (int i = 0; s == KPC_OK && i < nodes; i++) {
        const char *why = NULL;
        struct kpc_remote_conn *cn = kpc_remote_conn_new(r, &node[i], &why);
        if (cn == NULL) {
            KPC_LOG(KPC_LOG_ERROR, "remote tier %s: %s", r->shown, why);
            s = KPC_E_UNAVAILABLE;
            break;
        }
        s = scan_node(r, cn, pattern, fn, arg);
        kpc_remote_conn_put(cn, s != KPC_OK);
    }
    free(node);
    return s;
}

static long long int_of(kpc_remote *r, struct kpc_remote_conn *c, int argc, const char **argv)
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

static bool list_one(struct kpc_remote_conn *c, kpc_remote *r, const char *name, void *arg)
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

static bool prune_one(struct kpc_remote_conn *c, kpc_remote *r, const char *name, void *arg)
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

static bool clear_one(struct kpc_remote_conn *c, kpc_remote *r, const char *name, void *arg)
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

static bool count_one(struct kpc_remote_conn *c, kpc_remote *r, const char *name, void *arg)
{
    (void)c, (void)r, (void)name;
    ((count_arg *)arg)->n++;
    return true;
}

/* One node's figures: INFO, and its records of the group. */
static kpc_status node_info(kpc_remote *r, const kpc_remote_addr *a, kpc_remote_server *out)
{
    memset(out, 0, sizeof *out);
    if (a->port)
        snprintf(out->node, sizeof out->node, strchr(a->host, ':') ? "[%s]:%d" : "%s:%d", a->host, a->port);
    else
        snprintf(out->node, sizeof out->node, "%.270s", r->url.unix_path);
    const char *why = NULL;
    struct kpc_remote_conn *cn = kpc_remote_conn_new(r, a, &why);
    if (cn == NULL) {
        KPC_LOG(KPC_LOG_ERROR, "remote tier %s: %s", r->shown, why);
        return KPC_E_UNAVAILABLE;
    }
    const char *argv[1] = {"INFO"};
    size_t lens[1] = {4};
    redisReply *rep = kpc_remote_command(r, cn, 1, argv, lens, &why);
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
    char pattern[KPC_REMOTE_NAME_MAX];
    snprintf(pattern, sizeof pattern, "%s*:co", r->prefix);
    count_arg n = {0};
    kpc_status s = scan_node(r, cn, pattern, count_one, &n);
    out->keys = n.n;
    kpc_remote_conn_put(cn, s != KPC_OK);
    return s;
}

kpc_status kpc_remote_server_info(kpc_remote *r, kpc_remote_server **out, int *count)
{
    *out = NULL;
    *count = 0;
    kpc_remote_addr *node;
    int nodes;
    kpc_status s = kpc_remote_primaries(r, &node, &nodes);
    if (s != KPC_OK)
        return s;
    kpc_remote_server *sv = calloc((size_t)nodes, sizeof *sv);
    if (sv == NULL)
        s = KPC_E_NOMEM;
    for (int i = 0; s == KPC_OK && i < nodes; i++)
        s = node_info(r, &node[i], &sv[i]);
    free(node);
    if (s != KPC_OK) {
        free(sv);
        return s;
    }
    *out = sv;
    *count = nodes;
    return KPC_OK;
}
