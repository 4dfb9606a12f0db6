/*
 * remote_open.c - the cluster tier's settings, open and close, and its counters: this
 * process's, and the cluster-wide ones every process adds its own to as it closes (a
 * hash under the group's prefix). remote_private.h lists the other parts.
 *
 * Settings (read here the way config.c reads the others; docs/cluster.md documents
 * them): KPC_REMOTE_TIMEOUT_MS, KPC_REMOTE_LEASE_MS, KPC_REMOTE_BACKOFF_MS,
 * KPC_REMOTE_SECRET_FILE, KPC_REMOTE_TRUST, KPC_REMOTE_NAMESPACE, KPC_REMOTE_TTL_S,
 * KPC_BUILD_WAIT_MAX_MS (shared with the host index), KPC_HOST_ID.
 */
#define _GNU_SOURCE
#include "storage/remote_private.h"
#include "base/fault.h"
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_LEASE_MS 3000
#define DEFAULT_TTL_S (30u * 24 * 3600)
#define DEFAULT_WAIT_MAX_MS 600000

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

kpc_status kpc_remote_cluster_counters(kpc_remote *r, kpc_remote_counters *c)
{
    memset(c, 0, sizeof *c);
    const char *why = NULL;
    redisContext *rc = kpc_remote_connect(r, &why);
    char name[KPC_REMOTE_NAME_MAX];
    stats_name(r, name, sizeof name);
    const char *argv[2] = {"HGETALL", name};
    size_t lens[2] = {7, strlen(name)};
    redisReply *rep = rc ? kpc_remote_command(r, rc, 2, argv, lens, 0, &why) : NULL;
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY) {
        if (rep)
            freeReplyObject(rep);
        if (rc)
            redisFree(rc);
        KPC_LOG(KPC_LOG_WARN, "remote tier %s: reading the cluster counters: %s", r->shown, why ? why : "bad reply");
        return KPC_E_UNAVAILABLE;
    }
    for (size_t i = 0; i + 1 < rep->elements; i += 2)
        for (int k = 0; k < KPC_RC_COUNT; k++)
            if (rep->element[i]->type == REDIS_REPLY_STRING && strcmp(rep->element[i]->str, counter_names[k]) == 0)
                *counter_fields(c, k) = strtoull(rep->element[i + 1]->str ? rep->element[i + 1]->str : "0", NULL, 10);
    freeReplyObject(rep);
    redisFree(rc);
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
    const char *why = NULL;
    redisContext *c = kpc_remote_connect(r, &why);
    if (c == NULL)
        return;
    char name[KPC_REMOTE_NAME_MAX];
    stats_name(r, name, sizeof name);
    for (int i = 0; i < KPC_RC_COUNT; i++) {
        if (v[i] == 0)
            continue;
        char num[24];
        snprintf(num, sizeof num, "%llu", (unsigned long long)v[i]);
        const char *argv[4] = {"HINCRBY", name, counter_names[i], num};
        size_t lens[4] = {7, strlen(name), strlen(counter_names[i]), strlen(num)};
        redisReply *rep = kpc_remote_command(r, c, 4, argv, lens, 0, &why);
        if (rep == NULL)
            break;
        freeReplyObject(rep);
    }
    redisFree(c);
}

/* ---- open / close ------------------------------------------------------------------------------- */
static kpc_status env_ms(const char *var, unsigned def, unsigned min, unsigned long max, unsigned *out)
{
    const char *v = getenv(var);
    *out = def;
    if (v == NULL || *v == '\0')
        return KPC_OK;
    char *end;
    errno = 0;
    unsigned long n = strtoul(v, &end, 10);
    if (errno || *end || v[0] == '-' || n < min || n > max) {
        KPC_LOG(KPC_LOG_ERROR, "%s=\"%s\" is not a whole number from %u to %lu", var, v, min, max);
        return KPC_E_INVALID;
    }
    *out = (unsigned)n;
    return KPC_OK;
}

static kpc_status read_namespace(kpc_remote *r)
{
    const char *v = getenv("KPC_REMOTE_NAMESPACE");
    if (v == NULL || *v == '\0')
        v = "kpc";
    size_t n = strlen(v);
    if (n >= 64 || strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") != n) {
        KPC_LOG(KPC_LOG_ERROR, "KPC_REMOTE_NAMESPACE=\"%s\" is not 1 to 63 letters, digits, '_', '-' or '.'", v);
        return KPC_E_INVALID;
    }
    snprintf(r->ns, sizeof r->ns, "%s", v);
    return KPC_OK;
}

static kpc_status read_trust(kpc_remote *r)
{
    const char *v = getenv("KPC_REMOTE_TRUST");
    bool trusted = false;
    if (v && *v) {
        if (strcmp(v, "unauthenticated") == 0)
            trusted = true;
        else if (strcmp(v, "authenticated") != 0) {
            KPC_LOG(KPC_LOG_ERROR, "KPC_REMOTE_TRUST=\"%s\" is neither \"authenticated\" (the default) nor "
                    "\"unauthenticated\"", v);
            return KPC_E_INVALID;
        }
    }
    r->serve = r->has_secret || trusted;
    return KPC_OK;
}

static void host_identity(char *out, size_t cap)
{
    const char *v = getenv("KPC_HOST_ID");
    if (v && *v) {
        snprintf(out, cap, "%s", v);
        return;
    }
    char host[256] = "unknown", boot[64] = "";
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    int fd = kpc__sys_fault(KPC_SYS_OPENR) ? -1 : open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = kpc__sys_fault(KPC_SYS_READ) ? -1 : read(fd, boot, sizeof boot - 1);
        boot[n > 0 ? n : 0] = '\0';
        boot[strcspn(boot, "\n")] = '\0';
        close(fd);
    }
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
    unsigned ttl_s = 0;
    kpc_status s = kpc_remote_url_parse(url, &r->url);
    if (s == KPC_OK)
        s = env_ms("KPC_REMOTE_TIMEOUT_MS", 300, 1, 86400000, &r->timeout_ms);
    if (s == KPC_OK)
        s = env_ms("KPC_REMOTE_LEASE_MS", DEFAULT_LEASE_MS, 10, 86400000, &r->lease_ms);
    if (s == KPC_OK)
        s = env_ms("KPC_REMOTE_BACKOFF_MS", 10000, 1, 86400000, &r->backoff_ms);
    if (s == KPC_OK)
        s = env_ms("KPC_BUILD_WAIT_MAX_MS", DEFAULT_WAIT_MAX_MS, 1, 86400000, &r->wait_max_ms);
    if (s == KPC_OK)
        s = env_ms("KPC_REMOTE_TTL_S", DEFAULT_TTL_S, 0, 10ul * 365 * 86400, &ttl_s);
    if (s == KPC_OK)
        s = read_namespace(r);
    if (s == KPC_OK)
        s = kpc_remote_auth_load(r, getenv("KPC_REMOTE_SECRET_FILE"));
    if (s == KPC_OK)
        s = read_trust(r);
    if (s != KPC_OK) {
        sodium_memzero(r, sizeof *r);
        free(r);
        return s;
    }
    r->ttl_ms = (unsigned long long)ttl_s * 1000ull;
    kpc_remote_url_redacted(&r->url, r->shown, sizeof r->shown);
    host_identity(r->host_id, sizeof r->host_id);
    r->start_time = kpc__proc_start_time(getpid());
    pthread_mutex_init(&r->pool_lock, NULL);
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
    kpc_remote_conn_close_idle(r);
    pthread_mutex_destroy(&r->pool_lock);
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
