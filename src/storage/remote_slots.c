/*
 * remote_slots.c - where each command of the cluster tier goes: to the one server of
 * KPC_REMOTE, or, on a Redis Cluster, to the primary of its key's hash slot
 * (remote_private.h lists the tier's other parts).
 *
 * The Redis Cluster specification: a key's slot is CRC16 (XMODEM) of its hash tag (the
 * bytes between its first '{' and the next '}', when not empty; else the whole key)
 * modulo 16384, and each slot is served by one primary. kpc's names of a key all carry
 * the same tag ({K}), so every command and every script of the lease protocol touches
 * one slot, and no command ever spans two.
 *
 * The slot map lives in the process (one per kpc_remote), learned from the first seed
 * that answers, on the process's first connection (CLUSTER SLOTS, which every version
 * from 3.0 answers, Valkey's too; a server whose cluster support is off says so, and the
 * tier talks to it alone), and learned again only when a node says it moved (MOVED) or
 * a node fails: a storm asks for it once per process, not once per call
 * (docs/design.md says why not per host). Redirects: MOVED updates the map and the
 * command goes again to the new owner (at most MAX_HOPS times); ASK sends ASKING and
 * the command once to the node importing the slot, leaving the map as it is; TRYAGAIN
 * (a multi-key script on a slot half migrated) waits a moment and goes again.
 *
 * Failover: when a node does not answer (connect or reply timeout, a closed
 * connection, CLUSTERDOWN), the command waits for the cluster to promote a replica:
 * every FAILOVER_POLL_MS it asks the other nodes for the map, and goes again once the
 * slot has another primary, for at most KPC_REMOTE_FAILOVER_MS; when no node answers
 * at all, or that time passes, the call fails as on a single server (the tier backs
 * off, host-local). A command that failed in flight may have run: every script of the
 * lease protocol is safe to run again (a claim finds its own lease and waits for it
 * to lapse, a publish or a release compares its lease value first).
 *
 * Locks: the map is guarded by its mutex, held only to read or swap entries, never
 * across a network call; a refresh builds a new table outside it.
 */
#define _GNU_SOURCE
#include "storage/remote_private.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SLOTS 16384
#define NO_NODE 0xffff
#define MAX_HOPS 5            /* MOVED followed at most this often for one command */
#define TRYAGAIN_MS 2000      /* how long a command waits out a slot being migrated */
#define FAILOVER_POLL_MS 200  /* how often a call waiting on a failover asks for the map */

struct kpc_remote_slots {
    pthread_mutex_t lock;
    enum { MAP_UNKNOWN, MAP_SERVER, MAP_CLUSTER } kind;
    int good_seed;            /* the seed that answered last (a server, or the way in) */
    int nodes, cap;
    kpc_remote_addr *node;    /* the primaries the map names (and the redirects' targets) */
    uint16_t owner[SLOTS];    /* index into node, or NO_NODE */
};

/* ---- the hash slot ---------------------------------------------------------------------------- */
static uint16_t crc16(const unsigned char *p, size_t n)
{
    uint16_t crc = 0;
    while (n--) {
        crc ^= (uint16_t)(*p++ << 8);
        for (int i = 0; i < 8; i++)
            crc = crc & 0x8000 ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned kpc_remote_slot(const char *name, size_t len)
{
    const char *open = memchr(name, '{', len);
    if (open) {
        const char *close = memchr(open + 1, '}', len - (size_t)(open + 1 - name));
        if (close && close > open + 1)
            return crc16((const unsigned char *)open + 1, (size_t)(close - open - 1)) % SLOTS;
    }
    return crc16((const unsigned char *)name, len) % SLOTS;
}

/* The slot of a command's key (-1: it names none). The tier's commands name their key
 * first (GET, GETEX, HINCRBY, HGETALL, STRLEN, PTTL, UNLINK), but for EVAL (after the
 * script and the key count) and OBJECT (after the subcommand). */
static int command_slot(int argc, const char **argv, const size_t *lens)
{
    int at = 1;
    if (strcasecmp(argv[0], "EVAL") == 0)
        at = argc > 3 && strcmp(argv[2], "0") != 0 ? 3 : -1;
    else if (strcasecmp(argv[0], "OBJECT") == 0)
        at = 2;
    if (at < 0 || at >= argc)
        return -1;
    return (int)kpc_remote_slot(argv[at], lens ? lens[at] : strlen(argv[at]));
}

/* ---- the map ---------------------------------------------------------------------------------- */
kpc_status kpc_remote_slots_new(kpc_remote *r)
{
    struct kpc_remote_slots *m = calloc(1, sizeof *m);
    if (m == NULL)
        return KPC_E_NOMEM;
    pthread_mutex_init(&m->lock, NULL);
    memset(m->owner, 0xff, sizeof m->owner);
    r->slots = m;
    return KPC_OK;
}

void kpc_remote_slots_free(kpc_remote *r)
{
    if (r->slots == NULL)
        return;
    pthread_mutex_destroy(&r->slots->lock);
    free(r->slots->node);
    free(r->slots);
    r->slots = NULL;
}

static bool same_addr(const kpc_remote_addr *a, const kpc_remote_addr *b)
{
    return a->port == b->port && strcmp(a->host, b->host) == 0;
}

/* The index of addr in a list of nodes, added when new: -1 when out of memory. */
static int node_index(kpc_remote_addr **node, int *nodes, int *cap, const kpc_remote_addr *addr)
{
    for (int i = 0; i < *nodes; i++)
        if (same_addr(&(*node)[i], addr))
            return i;
    if (*nodes == *cap) {
        int grown = *cap ? 2 * *cap : 8;
        kpc_remote_addr *n = grown < NO_NODE ? realloc(*node, (size_t)grown * sizeof *n) : NULL;
        if (n == NULL)
            return -1;
        *node = n;
        *cap = grown;
    }
    (*node)[*nodes] = *addr;
    return (*nodes)++;
}

bool kpc_remote_is_cluster(kpc_remote *r)
{
    pthread_mutex_lock(&r->slots->lock);
    bool yes = r->slots->kind == MAP_CLUSTER;
    pthread_mutex_unlock(&r->slots->lock);
    return yes;
}

/* Read a CLUSTER SLOTS reply into the map (from, the node it came from, names a
 * node with no known endpoint). False when it is not one. */
static bool take_map(kpc_remote *r, const redisReply *rep, const kpc_remote_addr *from)
{
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements == 0)
        return false;
    struct kpc_remote_slots *m = r->slots;
    uint16_t *owner = malloc(sizeof m->owner);
    kpc_remote_addr *node = NULL;
    int nodes = 0, cap = 0;
    bool ok = owner != NULL;
    if (ok)
        memset(owner, 0xff, sizeof m->owner);
    for (size_t i = 0; ok && i < rep->elements; i++) {
        const redisReply *e = rep->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY ||
            e->element[2]->elements < 2 || e->element[2]->element[1]->type != REDIS_REPLY_INTEGER) {
            ok = false;
            break;
        }
        long long lo = e->element[0]->integer, hi = e->element[1]->integer;
        const redisReply *ep = e->element[2]->element[0];
        kpc_remote_addr a = {.port = (int)e->element[2]->element[1]->integer};
        /* no endpoint ("", "?" or nil): the host the map was asked of, with this port */
        bool known = ep->type == REDIS_REPLY_STRING && ep->len > 0 && strcmp(ep->str, "?") != 0;
        snprintf(a.host, sizeof a.host, "%s", known ? ep->str : from->host);
        int n = node_index(&node, &nodes, &cap, &a);
        if (lo < 0 || hi >= SLOTS || lo > hi || n < 0)
            ok = false;
        for (long long s = lo; ok && s <= hi; s++)
            owner[s] = (uint16_t)n;
    }
    if (ok) {
        pthread_mutex_lock(&m->lock);
        memcpy(m->owner, owner, sizeof m->owner);
        kpc_remote_addr *old = m->node;
        m->node = node, m->nodes = nodes, m->cap = cap;
        node = old;
        m->kind = MAP_CLUSTER;
        pthread_mutex_unlock(&m->lock);
    }
    free(node);
    free(owner);
    return ok;
}

/* Ask c (connected to from) for the map: 1 when it is a cluster's and was taken, 0 when
 * it is not one (a server whose cluster support is off, or that refuses the command, is
 * a server), -1 when no reply came. */
static int ask_map(kpc_remote *r, redisContext *c, const kpc_remote_addr *from)
{
    const char *argv[2] = {"CLUSTER", "SLOTS"};
    size_t lens[2] = {7, 5};
    redisReply *rep = kpc_remote_raw_command(c, 2, argv, lens);
    if (rep == NULL)
        return -1;
    int got = take_map(r, rep, from);
    struct kpc_remote_slots *m = r->slots;
    if (rep->type == REDIS_REPLY_ERROR) {
        pthread_mutex_lock(&m->lock);
        if (m->kind == MAP_UNKNOWN)
            m->kind = MAP_SERVER;
        pthread_mutex_unlock(&m->lock);
        KPC_LOG(KPC_LOG_DEBUG, "remote tier %s: CLUSTER SLOTS: %s: talking to one server", r->shown, rep->str);
    }
    freeReplyObject(rep);
    return got;
}

/* Learn the map again from any node that answers but `failed`: the known nodes, then
 * the seeds. False when none did. */
static bool refresh(kpc_remote *r, const kpc_remote_addr *failed)
{
    struct kpc_remote_slots *m = r->slots;
    int n = 0;
    pthread_mutex_lock(&m->lock);
    kpc_remote_addr *try = malloc(((size_t)m->nodes + KPC_REMOTE_SEEDS_MAX) * sizeof *try);
    for (int i = 0; try && i < m->nodes; i++)
        try[n++] = m->node[i];
    pthread_mutex_unlock(&m->lock);
    if (try == NULL)
        return false;
    for (int i = 0; i < r->url.seeds; i++)
        try[n++] = r->url.seed[i];
    bool got = false;
    for (int i = 0; !got && i < n; i++) {
        if (failed && same_addr(&try[i], failed))
            continue;
        const char *why = NULL;
        redisContext *c = kpc_remote_connect_to(r, &try[i], &why);
        if (c == NULL)
            continue;
        got = ask_map(r, c, &try[i]) == 1;
        kpc_remote_close_context(c, true);
    }
    free(try);
    return got;
}

/* ---- routing ---------------------------------------------------------------------------------- */
void kpc_remote_route_begin(kpc_route *rt, int argc, const char **argv, const size_t *lens)
{
    memset(rt, 0, sizeof *rt);
    rt->slot = command_slot(argc, argv, lens);
}

/* Where a command of slot goes: its primary in a cluster's map, else the server. */
static void target_of(kpc_remote *r, int slot, kpc_remote_addr *out)
{
    struct kpc_remote_slots *m = r->slots;
    pthread_mutex_lock(&m->lock);
    if (m->kind == MAP_CLUSTER && slot >= 0 && m->owner[slot] != NO_NODE)
        *out = m->node[m->owner[slot]];
    else if (r->url.seeds)
        *out = r->url.seed[m->good_seed];
    else
        *out = (kpc_remote_addr){.port = 0}; /* the Unix socket */
    pthread_mutex_unlock(&m->lock);
}

/* Connect cn to a seed, the last one that answered first; on the process's first
 * connection, learn whether it is a cluster. */
static bool connect_seed(kpc_remote *r, struct kpc_remote_conn *cn, const char **why)
{
    struct kpc_remote_slots *m = r->slots;
    int seeds = r->url.seeds ? r->url.seeds : 1;
    pthread_mutex_lock(&m->lock);
    int first = m->good_seed;
    pthread_mutex_unlock(&m->lock);
    for (int i = 0; i < seeds; i++) {
        int s = (first + i) % seeds;
        kpc_remote_addr a = r->url.seeds ? r->url.seed[s] : (kpc_remote_addr){.port = 0};
        redisContext *c = kpc_remote_connect_to(r, &a, why);
        if (c == NULL)
            continue;
        pthread_mutex_lock(&m->lock);
        m->good_seed = s;
        bool learn = m->kind == MAP_UNKNOWN;
        pthread_mutex_unlock(&m->lock);
        if (learn && r->url.seeds && ask_map(r, c, &a) < 0) {
            kpc_remote_close_context(c, false); /* it went away meanwhile: the next seed */
            static _Thread_local char err[320];
            snprintf(err, sizeof err, "%.64s:%d: no reply to CLUSTER SLOTS within %u ms (KPC_REMOTE_TIMEOUT_MS)",
                     a.host, a.port, r->timeout_ms);
            *why = err;
            continue;
        }
        cn->c = c;
        cn->at = a;
        return true;
    }
    return false;
}

bool kpc_remote_route_conn(kpc_remote *r, struct kpc_remote_conn *cn, kpc_route *rt, const char **why)
{
    if (cn->pinned)
        return cn->c != NULL;
    if (cn->c == NULL && !rt->ask && !kpc_remote_is_cluster(r) && !connect_seed(r, cn, why))
        return false;
    kpc_remote_addr to;
    if (rt->ask)
        to = rt->ask_to;
    else
        target_of(r, rt->slot, &to);
    if (cn->c && !same_addr(&cn->at, &to)) {
        kpc_remote_close_context(cn->c, true); /* every reply read: a reset, no TIME_WAIT */
        cn->c = NULL;
    }
    if (cn->c == NULL) {
        if ((cn->c = kpc_remote_connect_to(r, &to, why)) == NULL)
            return false;
        cn->at = to;
    }
    if (rt->ask) { /* the importing node serves this one command */
        rt->ask = false;
        const char *argv[1] = {"ASKING"};
        size_t lens[1] = {6};
        redisReply *rep = kpc_remote_raw_command(cn->c, 1, argv, lens);
        bool ok = rep && rep->type == REDIS_REPLY_STATUS;
        if (rep)
            freeReplyObject(rep);
        if (!ok) {
            *why = "ASKING failed";
            return false;
        }
    }
    return true;
}

/* "MOVED 3999 host:port" or "ASK 3999 host:port": the slot and the node. */
static bool redirect_of(const char *err, int *slot, kpc_remote_addr *to)
{
    const char *sp = strchr(err, ' ');
    char *end;
    long s = sp ? strtol(sp + 1, &end, 10) : -1;
    if (sp == NULL || s < 0 || s >= SLOTS || *end != ' ')
        return false;
    const char *colon = strrchr(end + 1, ':');
    if (colon == NULL || colon == end + 1)
        return false;
    size_t hn = (size_t)(colon - end - 1);
    if (hn >= sizeof to->host)
        return false;
    memcpy(to->host, end + 1, hn);
    to->host[hn] = '\0';
    if (to->host[0] == '[' && hn > 2 && to->host[hn - 1] == ']') { /* [IPv6] */
        memmove(to->host, to->host + 1, hn - 2);
        to->host[hn - 2] = '\0';
    }
    to->port = atoi(colon + 1);
    *slot = (int)s;
    return to->port > 0 && to->port < 65536;
}

/* The slot moved to `to` for good: the map says so now, and the rest of it is learned
 * again from that node. */
static void moved(kpc_remote *r, int slot, const kpc_remote_addr *to)
{
    const char *why = NULL;
    redisContext *c = kpc_remote_connect_to(r, to, &why);
    if (c) {
        ask_map(r, c, to);
        kpc_remote_close_context(c, true);
    }
    struct kpc_remote_slots *m = r->slots;
    pthread_mutex_lock(&m->lock);
    int n = node_index(&m->node, &m->nodes, &m->cap, to);
    if (n >= 0) { /* the node's word over a map some other node has not caught up with */
        m->owner[slot] = (uint16_t)n;
        m->kind = MAP_CLUSTER;
    }
    pthread_mutex_unlock(&m->lock);
}

/* A cluster node did not answer (down: it answered CLUSTERDOWN, the cluster has a slot
 * nobody serves, until a replica takes it): wait until the map names another primary for
 * the slot (a replica promoted; down: a moment, then the command goes again), for at most
 * KPC_REMOTE_FAILOVER_MS from the first failure of this command. */
static bool await_failover(kpc_remote *r, struct kpc_remote_conn *cn, kpc_route *rt, bool down, const char **why)
{
    static _Thread_local char err[640];
    kpc_remote_addr failed = cn->at;
    if (cn->c) {
        kpc_remote_close_context(cn->c, down); /* no reply: it may be mid-reply */
        cn->c = NULL;
    }
    if (rt->slot < 0 || !kpc_remote_is_cluster(r) || cn->pinned)
        return false;
    uint64_t now = kpc__now_ns();
    if (rt->failover_until == 0)
        rt->failover_until = now + (uint64_t)r->failover_ms * 1000000ull;
    for (;;) {
        if (now >= rt->failover_until) {
            snprintf(err, sizeof err, "%.300s; slot %d has no primary that answers after %u ms (KPC_REMOTE_FAILOVER_MS)",
                     *why ? *why : "no reply", rt->slot, r->failover_ms);
            *why = err;
            return false;
        }
        if (down) /* the node is up: ask it again after a moment (the map may change too) */
            kpc_remote_sleep_ms(FAILOVER_POLL_MS / 2 + (unsigned)(now / 1000u) % FAILOVER_POLL_MS);
        if (!refresh(r, down ? NULL : &failed)) {
            snprintf(err, sizeof err, "%.300s; no other node of the cluster answers", *why ? *why : "no reply");
            *why = err;
            return false;
        }
        kpc_remote_addr to;
        target_of(r, rt->slot, &to);
        if (!same_addr(&to, &failed)) {
            KPC_LOG(KPC_LOG_INFO, "remote tier %s: slot %d moved from %s:%d to %s:%d (a failover)", r->shown,
                    rt->slot, failed.host, failed.port, to.host, to.port);
            return true;
        }
        if (down)
            return true;
        now = kpc__now_ns();
        unsigned ms = FAILOVER_POLL_MS / 2 + (unsigned)(now / 1000u) % FAILOVER_POLL_MS;
        uint64_t left_ms = now < rt->failover_until ? (rt->failover_until - now) / 1000000u + 1 : 0;
        kpc_remote_sleep_ms(ms < left_ms ? ms : (unsigned)left_ms);
        now = kpc__now_ns();
    }
}

bool kpc_remote_reroute(kpc_remote *r, struct kpc_remote_conn *cn, kpc_route *rt, const char *err,
                        const char **why)
{
    if (err == NULL || strncmp(err, "CLUSTERDOWN", 11) == 0)
        return await_failover(r, cn, rt, err != NULL, why);
    if (cn->pinned || rt->slot < 0)
        return false;
    int slot;
    kpc_remote_addr to;
    if (strncmp(err, "MOVED ", 6) == 0 && rt->hops < MAX_HOPS && redirect_of(err, &slot, &to)) {
        rt->hops++;
        moved(r, slot, &to);
        return true;
    }
    if (strncmp(err, "ASK ", 4) == 0 && !rt->asked && redirect_of(err, &slot, &to)) {
        rt->asked = rt->ask = true;
        rt->ask_to = to;
        return true;
    }
    if (strncmp(err, "TRYAGAIN", 8) == 0) {
        uint64_t now = kpc__now_ns();
        if (rt->retry_until == 0)
            rt->retry_until = now + TRYAGAIN_MS * 1000000ull;
        if (now < rt->retry_until) {
            kpc_remote_sleep_ms(10 + (unsigned)(now / 1000u) % 20);
            return true;
        }
    }
    return false;
}

/* ---- the nodes, for `kpc remote` ---------------------------------------------------------------- */
kpc_status kpc_remote_primaries(kpc_remote *r, kpc_remote_addr **out, int *count)
{
    *out = NULL;
    *count = 0;
    struct kpc_remote_conn probe = {.slot = -1};
    const char *why = NULL;
    if (!kpc_remote_is_cluster(r)) { /* the first connection learns which */
        if (!connect_seed(r, &probe, &why)) {
            KPC_LOG(KPC_LOG_ERROR, "remote tier %s: %s", r->shown, why ? why : "no seed answers");
            return KPC_E_UNAVAILABLE;
        }
        kpc_remote_close_context(probe.c, true);
    }
    struct kpc_remote_slots *m = r->slots;
    pthread_mutex_lock(&m->lock);
    int n = m->kind == MAP_CLUSTER ? m->nodes : 1;
    kpc_remote_addr *a = calloc((size_t)n, sizeof *a);
    if (a && m->kind == MAP_CLUSTER) {
        n = 0; /* only the nodes that own a slot now: a node the map no longer names is gone */
        bool *owns = calloc((size_t)m->nodes, sizeof *owns);
        for (int s = 0; owns && s < SLOTS; s++)
            if (m->owner[s] != NO_NODE)
                owns[m->owner[s]] = true;
        for (int i = 0; owns && i < m->nodes; i++)
            if (owns[i])
                a[n++] = m->node[i];
        free(owns);
    } else if (a)
        a[0] = probe.at;
    pthread_mutex_unlock(&m->lock);
    if (a == NULL)
        return KPC_E_NOMEM;
    *out = a;
    *count = n;
    return KPC_OK;
}
