/*
 * remote_open.c - the cluster tier's settings, open and close, and its counters: this
 * process's, and the cluster-wide ones every process adds its own to as it closes (a
 * hash under the group's prefix). remote_private.h lists the other parts.
 *
 * Settings, read from the table (base/settings_table.h checks them; docs/cluster.md
 * says what they do): KPC_REMOTE_TIMEOUT_MS, KPC_REMOTE_LEASE_MS, KPC_REMOTE_BACKOFF_MS,
 * KPC_REMOTE_SECRET_FILE (remote_auth.c), KPC_REMOTE_TRUST, KPC_REMOTE_NAMESPACE,
 * KPC_REMOTE_TTL_S, KPC_REMOTE_FAILOVER_MS, KPC_BUILD_WAIT_MAX_MS (shared with the host
 * index), KPC_HOST_ID.
 */
#define _GNU_SOURCE
#include "storage/remote_private.h"
#include "base/log.h"
#include "base/settings.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const counter_names[KPC_RC_COUNT] = {"hits", "misses", "builds", "waits", "takeovers",
                                                        "errors", "refused", "wait_timeouts", "unserved"};

bool kpc_remote_built(void) { return true; }
const char *kpc_remote_describe(const kpc_remote *r) { return r ? r->shown : "off"; }
const char *kpc_remote_host_id(const kpc_remote *r) { return r->host_id; }

const char *kpc_remote_trust(const kpc_remote *r)
{
    if (r->has_secret)
        return r->has_old ? "authenticated (rotating: the old secret accepted)" : "authenticated";
    return r->serve ? "unauthenticated (KPC_REMOTE_TRUST=unauthenticated)"
                    : "unauthenticated: records not served (no KPC_REMOTE_SECRET_FILE)";
}

const char *kpc_remote_prefix(const kpc_remote *r) { return r->prefix; }

void kpc_remote_key_name(const kpc_remote *r, const kpc_key *key, const char *suffix, char *out, size_t cap)
{
    kpc_remote_name(r, false, key, suffix, out, cap);
}

static uint64_t *counter_fields(kpc_remote_counters *c, int i)
{
    uint64_t *f[KPC_RC_COUNT] = {&c->hits, &c->misses, &c->builds, &c->waits, &c->takeovers,
                                 &c->errors, &c->refused, &c->wait_timeouts, &c->unserved};
    return f[i];
}

void kpc_remote_counters_get(kpc_remote *r, kpc_remote_counters *c)
{
    memset(c, 0, sizeof *c);
    for (int i = 0; r && i < KPC_RC_COUNT; i++)
        *counter_fields(c, i) = atomic_load_explicit(&r->n[i], memory_order_relaxed);
}

static void stats_name(const kpc_remote *r, char *out, size_t cap)
{
    snprintf(out, cap, "%sstats", r->prefix);
}

/* A cluster-wide counter's value: a whole number, as HINCRBY of kpc's own counts leaves
 * it; anything else (written by hand or by another program; strtoull alone reads "-5" as
 * 2^64 - 5) is said and counted as 0. */
static void counter_value(const kpc_remote *r, const char *hash, const char *field, const redisReply *v,
                          uint64_t *out)
{
    const char *s = v->type == REDIS_REPLY_STRING ? v->str : "";
    char *end = NULL;
    errno = 0;
    unsigned long long n = s[0] >= '0' && s[0] <= '9' ? strtoull(s, &end, 10) : 0;
    if (end == NULL || *end != '\0' || errno != 0) {
        KPC_LOG(KPC_LOG_ERROR, "remote tier %s: the cluster-wide counter %s of %s is \"%.40s\", not a whole "
                "number (not written by kpc): counted as 0", r->shown, field, hash, s);
        n = 0;
    }
    *out = n;
}

kpc_status kpc_remote_cluster_counters(kpc_remote *r, kpc_remote_counters *c)
{
    memset(c, 0, sizeof *c);
    const char *why = NULL;
    struct kpc_remote_conn *cn = kpc_remote_conn_new(r, NULL, &why);
    char name[KPC_REMOTE_NAME_MAX];
    stats_name(r, name, sizeof name);
    const char *argv[2] = {"HGETALL", name};
    size_t lens[2] = {7, strlen(name)};
    redisReply *rep = cn ? kpc_remote_command(r, cn, 2, argv, lens, &why) : NULL;
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY) {
        if (rep)
            freeReplyObject(rep);
        kpc_remote_conn_put(cn, true);
        KPC_LOG(KPC_LOG_WARN, "remote tier %s: reading the cluster counters: %s", r->shown, why ? why : "bad reply");
        return KPC_E_UNAVAILABLE;
    }
    for (size_t i = 0; i + 1 < rep->elements; i += 2)
        for (int k = 0; k < KPC_RC_COUNT; k++)
            if (rep->element[i]->type == REDIS_REPLY_STRING && strcmp(rep->element[i]->str, counter_names[k]) == 0)
                counter_value(r, name, counter_names[k], rep->element[i + 1], counter_fields(c, k));
    freeReplyObject(rep);
    kpc_remote_conn_put(cn, false);
    return KPC_OK;
}

/* Add this process's counters to the cluster's (best effort: the tier may be off). */
static void flush_counters(kpc_remote *r)
{
    uint64_t v[KPC_RC_COUNT];
    bool any = false;
    for (int i = 0; i < KPC_RC_COUNT; i++)
        any |= (v[i] = atomic_load(&r->n[i])) != 0;
    if (!any || !kpc_remote_on(r))
        return; /* while the tier is off, a try could cost a timeout at exit */
    struct kpc_remote_conn *cn = kpc_remote_conn_get(r); /* through the host's slots: a whole
                                                          * job exiting at once is a storm too */
    if (cn == NULL)
        return;
    /* one script for every counter: one command per process on the hash's primary (a
     * whole job exits at once), not one per counter */
    static const char ADD_LUA[] = "for i = 1, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end\n"
                                  "return 1\n";
    const char *argv[4 + 2 * KPC_RC_COUNT] = {"EVAL", ADD_LUA, "1"};
    size_t lens[4 + 2 * KPC_RC_COUNT] = {4, strlen(ADD_LUA), 1};
    char name[KPC_REMOTE_NAME_MAX], num[KPC_RC_COUNT][24];
    stats_name(r, name, sizeof name);
    int n = 3;
    argv[n] = name, lens[n++] = strlen(name);
    for (int i = 0; i < KPC_RC_COUNT; i++) {
        if (v[i] == 0)
            continue;
        snprintf(num[i], sizeof num[i], "%llu", (unsigned long long)v[i]);
        argv[n] = counter_names[i], lens[n++] = strlen(counter_names[i]);
        argv[n] = num[i], lens[n++] = strlen(num[i]);
    }
    const char *why = NULL;
    redisReply *rep = kpc_remote_command(r, cn, n, argv, lens, &why);
    bool broken = rep == NULL;
    if (rep)
        freeReplyObject(rep);
    kpc_remote_conn_put(cn, broken);
}

/* ---- open / close ------------------------------------------------------------------------------- */
static unsigned ms_setting(kpc_setting_id id)
{
    return (unsigned)kpc__setting_number(id); /* every row's range fits an unsigned */
}

static void read_namespace(kpc_remote *r)
{
    const char *v = kpc__setting_text(KPC_SET_REMOTE_NAMESPACE);
    snprintf(r->ns, sizeof r->ns, "%s", v ? v : "kpc");
}

static void read_trust(kpc_remote *r)
{
    bool trusted = kpc__setting_number(KPC_SET_REMOTE_TRUST) == 1; /* "unauthenticated" */
    r->serve = r->has_secret || trusted;
}

static void host_identity(char *out, size_t cap)
{
    const char *v = kpc__setting_text(KPC_SET_HOST_ID);
    if (v) {
        snprintf(out, cap, "%s", v);
        return;
    }
    char host[256] = "unknown", boot[64];
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    kpc__boot_id(boot, sizeof boot);
    snprintf(out, cap, "%s:%s", host, boot);
    for (char *p = out; *p; p++)
        if (*p == ' ' || *p == '\n')
            *p = '_'; /* the lease value is space-separated */
}

kpc_status kpc_remote_open(const char *url, kpc_remote **out)
{
    *out = NULL;
    if (sodium_init() < 0) {
        KPC_LOG(KPC_LOG_ERROR, "remote tier: libsodium failed to initialize");
        return KPC_E_UNAVAILABLE;
    }
    kpc_remote *r = calloc(1, sizeof *r);
    if (r == NULL)
        return KPC_E_NOMEM;
    kpc_status s = kpc_remote_url_parse(url, &r->url);
    r->timeout_ms = ms_setting(KPC_SET_REMOTE_TIMEOUT_MS);
    r->lease_ms = ms_setting(KPC_SET_REMOTE_LEASE_MS);
    r->backoff_ms = ms_setting(KPC_SET_REMOTE_BACKOFF_MS);
    r->wait_max_ms = ms_setting(KPC_SET_BUILD_WAIT_MAX_MS);
    r->failover_ms = ms_setting(KPC_SET_REMOTE_FAILOVER_MS);
    r->ttl_ms = kpc__setting_number(KPC_SET_REMOTE_TTL_S) * 1000ull;
    read_namespace(r);
    if (s == KPC_OK)
        s = kpc_remote_auth_load(r, kpc__setting_raw(KPC_SET_REMOTE_SECRET_FILE));
    read_trust(r);
    if (s == KPC_OK)
        s = kpc_remote_slots_new(r);
    if (s != KPC_OK) {
        sodium_memzero(r, sizeof *r);
        free(r);
        return s;
    }
    kpc_remote_url_redacted(&r->url, r->shown, sizeof r->shown);
    host_identity(r->host_id, sizeof r->host_id);
    r->start_time = kpc__proc_start_time(getpid());
    KPC_LOG(KPC_LOG_DEBUG, "remote tier %s: host %s, keys %s*, lease %u ms, timeout %u ms, %s", r->shown,
            r->host_id, r->prefix, r->lease_ms, r->timeout_ms, kpc_remote_trust(r));
    *out = r;
    return KPC_OK;
}

void kpc_remote_say_unserved(kpc_remote *r)
{
    if (!r->serve)
        kpc_remote_warn(r, KPC_RW_UNAUTHENTICATED, KPC_LOG_DEBUG,
                        "remote tier %s: no KPC_REMOTE_SECRET_FILE: records are neither served nor stored "
                        "(anyone who can write to this Redis could plant code); builds stay host-local. "
                        "Make a secret once: kpc remote keygen > ~/.kpc-secret, and set "
                        "KPC_REMOTE_SECRET_FILE=~/.kpc-secret on every host (or KPC_REMOTE_TRUST="
                        "unauthenticated on a closed network)", r->shown);
}

void kpc_remote_close(kpc_remote *r)
{
    if (r == NULL)
        return;
    flush_counters(r);
    kpc_remote_slots_free(r);
    sodium_memzero(r, sizeof *r);
    free(r);
}

kpc_status kpc_remote_keygen(char *out, size_t cap)
{
    if (cap < 65 || sodium_init() < 0)
        return KPC_E_INVALID;
    uint8_t b[32];
    randombytes_buf(b, sizeof b);
    kpc__hex(b, sizeof b, out);
    sodium_memzero(b, sizeof b);
    return KPC_OK;
}
