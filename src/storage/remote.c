/*
 * remote.c - the cluster tier on Redis through hiredis (remote.h says what it is for).
 *
 * Redis keys of a kpc key K (the hash tag keeps them in one Redis Cluster slot):
 *   kpc:1:{K}:co     the code record: disk record bytes [+ 32-byte HMAC tag]
 *   kpc:1:{K}:log    a failed build's log record, for 30 s (the host index's retry rule)
 *   kpc:1:{K}:lease  "host=H pid=P start=T token=R", SET NX PX lease_ms by the builder
 *   kpc:1:{K}:done   a list the publisher pushes its lease value to (expires in 10 s):
 *                    waiters block on it with BLPOP and pass the value on to the next one
 *   kpc:1:stats      a hash of cluster-wide counters, added to as processes close
 *
 * Invariants: every read, check-and-lease, publish and release is one Lua script, so it
 * is atomic on the server; a lease is renewed (compare-and-pexpire, by claim.c's keeper
 * thread) and deleted only by compare-and-delete, so a holder that lost its lease never
 * deletes the next holder's. A record is trusted only after record.c's parser and, with
 * a secret, the MAC accept it. Every socket call has a timeout; SIGPIPE is blocked in
 * the calling thread around each call (a server gone mid-write must not kill the rank).
 * Locks: r->pool_lock guards the idle-connection list; each connection is used by one
 * thread at a time (taken from the list, given back after the call).
 *
 * Over 500 lines for one responsibility, the Redis side of the lease protocol: its
 * scripts, the bounded connections (timeouts, SIGPIPE, back-off), the MAC, and the
 * wait loop are one protocol and are read together. The URL (remote_url.c), the seam's
 * adapter (remote_tier.c) and the build without hiredis (remote_stub.c) are apart.
 */
#define _GNU_SOURCE
#include "storage/remote.h"
#include "base/log.h"
#include "base/settings.h"

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void kpc_remote_key_name(const kpc_key *key, const char *suffix, char *out, size_t cap)
{
    char hex[KPC_KEY_HEX];
    kpc__hex(key->bytes, sizeof key->bytes, hex);
    snprintf(out, cap, "kpc:1:{%s}:%s", hex, suffix);
}



#define TAG_BYTES crypto_auth_hmacsha512256_BYTES
#define LOG_TTL_MS 30000     /* a failure is shared for 30 s, as on the host */
#define DONE_TTL_MS 10000    /* the done list outlives every waiter's wake-up */
#define WAIT_SLICE_MS 1000   /* the polling fallback: re-check at least this often */
#define MAX_VALUE (1u << 30)

struct conn {
    redisContext *c;
    struct conn *next;
};

struct kpc_remote {
    kpc_remote_url url;
    char shown[1600]; /* redacted URL */
    char host_id[320];
    unsigned timeout_ms, lease_ms, backoff_ms;
    bool has_secret;
    uint8_t secret[crypto_auth_hmacsha512256_KEYBYTES];
    uint64_t start_time; /* of this process, for lease values */
    pthread_mutex_t pool_lock; /* guards idle */
    struct conn *idle;
    _Atomic uint64_t off_until_ns; /* CLOCK_MONOTONIC; the tier is off before it */
    _Atomic uint64_t n[7];         /* hits, misses, builds, waits, takeovers, errors, refused */
};
enum { C_HITS, C_MISSES, C_BUILDS, C_WAITS, C_TAKEOVERS, C_ERRORS, C_REFUSED };
static const char *const counter_names[7] = {"hits", "misses", "builds", "waits", "takeovers", "errors", "refused"};

/* A lease held: renewed by the caller (storage/claim.c's keeper) through
 * kpc_remote_renew every lease/3, and used by one thread at a time. */
struct kpc_remote_lease {
    kpc_remote *r;
    char lease_name[96], done_name[96];
    char value[512];
};

static void count(kpc_remote *r, int which) { atomic_fetch_add_explicit(&r->n[which], 1, memory_order_relaxed); }

bool kpc_remote_built(void) { return true; }
const char *kpc_remote_describe(const kpc_remote *r) { return r ? r->shown : "off"; }
const char *kpc_remote_host_id(const kpc_remote *r) { return r->host_id; }

/* ---- scripts ------------------------------------------------------------------------------ */
/* KEYS co log lease; ARGV lease-value lease-ms skip (1: skip co, 2: skip log: refused).
 * {1, record} | {2, log record} | {3} the lease is ours | {4, holder, pttl} */
static const char BEGIN_LUA[] =
    "local skip = tonumber(ARGV[3])\n"
    "if skip % 2 == 0 then local v = redis.call('GET', KEYS[1]) if v then return {1, v} end end\n"
    "if skip < 2 then local l = redis.call('GET', KEYS[2]) if l then return {2, l} end end\n"
    "if redis.call('SET', KEYS[3], ARGV[1], 'NX', 'PX', ARGV[2]) then return {3} end\n"
    "return {4, redis.call('GET', KEYS[3]) or '', redis.call('PTTL', KEYS[3])}\n";
/* KEYS record lease done; ARGV record value ttl-ms(0: none) done-ttl. 1 if the lease was
 * still ours (and is now released). */
static const char PUBLISH_LUA[] =
    "if ARGV[3] ~= '0' then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])\n"
    "else redis.call('SET', KEYS[1], ARGV[1]) end\n"
    "local held = 0\n"
    "if ARGV[2] ~= '' and redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) held = 1 end\n"
    "if ARGV[2] ~= '' then redis.call('RPUSH', KEYS[3], ARGV[2]) redis.call('PEXPIRE', KEYS[3], ARGV[4]) end\n"
    "return held\n";
/* KEYS lease done; ARGV value done-ttl: compare-and-delete, then wake the waiters. */
static const char RELEASE_LUA[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1])\n"
    "redis.call('RPUSH', KEYS[2], ARGV[1]) redis.call('PEXPIRE', KEYS[2], ARGV[2]) return 1 end\n"
    "return 0\n";
/* KEYS lease; ARGV value lease-ms: compare-and-pexpire. */
static const char RENEW_LUA[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end\n"
    "return 0\n";
/* KEYS done; ARGV value done-ttl: pass a wake-up on to the next waiter. */
static const char PASS_LUA[] =
    "redis.call('RPUSH', KEYS[1], ARGV[1]) redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1\n";

/* ---- connections ---------------------------------------------------------------------------- */
static struct timeval tv_ms(unsigned ms) { return (struct timeval){.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000}; }

/* SIGPIPE blocked in this thread around a socket call, and one it raised consumed: a
 * server that closed the connection must not kill the process (hiredis uses write()). */
typedef struct pipe_guard {
    sigset_t old;
    bool pending;
} pipe_guard;

static void pipe_block(pipe_guard *g)
{
    sigset_t set, pend;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &g->old);
    g->pending = sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE);
}

static void pipe_restore(pipe_guard *g)
{
    sigset_t set, pend;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    if (!g->pending && sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE)) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&set, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

/* The tier failed: off for the back-off period; logged once per period. */
static void tier_failed(kpc_remote *r, const char *what, const char *detail)
{
    count(r, C_ERRORS);
    uint64_t now = kpc__now_ns();
    uint64_t prev = atomic_load(&r->off_until_ns);
    uint64_t until = now + (uint64_t)r->backoff_ms * 1000000ull;
    bool was_on = prev <= now && atomic_compare_exchange_strong(&r->off_until_ns, &prev, until);
    if (was_on)
        KPC_LOG(KPC_LOG_WARN, "remote tier %s: %s: %s; off for %u ms, building host-local", r->shown,
                what, detail ? detail : "failed", r->backoff_ms);
    else
        KPC_LOG(KPC_LOG_DEBUG, "remote tier %s: %s: %s", r->shown, what, detail ? detail : "failed");
}

static bool tier_on(kpc_remote *r) { return atomic_load(&r->off_until_ns) <= kpc__now_ns(); }

/* One command on c; NULL (and *why) on a transport error or an error reply. */
static redisReply *command(redisContext *c, int argc, const char **argv, const size_t *lens, const char **why)
{
    pipe_guard g;
    pipe_block(&g);
    redisReply *rep = redisCommandArgv(c, argc, argv, lens);
    pipe_restore(&g);
    if (rep == NULL) {
        *why = c->errstr[0] ? c->errstr : "no reply";
        return NULL;
    }
    if (rep->type == REDIS_REPLY_ERROR) {
        static _Thread_local char err[160];
        snprintf(err, sizeof err, "%s", rep->str);
        *why = err;
        freeReplyObject(rep);
        return NULL;
    }
    return rep;
}

static redisContext *connect_one(kpc_remote *r, const char **why)
{
    struct timeval tv = tv_ms(r->timeout_ms);
    pipe_guard g;
    pipe_block(&g);
    redisContext *c = r->url.unix_path[0] ? redisConnectUnixWithTimeout(r->url.unix_path, tv)
                                          : redisConnectWithTimeout(r->url.host, r->url.port, tv);
    pipe_restore(&g);
    if (c == NULL || c->err) {
        static _Thread_local char err[160];
        snprintf(err, sizeof err, "connect: %s", c ? c->errstr : "out of memory");
        *why = err;
        if (c)
            redisFree(c);
        return NULL;
    }
    int fl = fcntl(c->fd, F_GETFD);
    if (fl >= 0)
        fcntl(c->fd, F_SETFD, fl | FD_CLOEXEC);
    if (redisSetTimeout(c, tv) != REDIS_OK) {
        *why = "setting the socket timeout failed";
        redisFree(c);
        return NULL;
    }
    redisReply *rep = NULL;
    if (r->url.password[0]) {
        const char *argv[3] = {"AUTH", r->url.user, r->url.password};
        size_t lens[3] = {4, strlen(r->url.user), strlen(r->url.password)};
        bool user = r->url.user[0] != '\0';
        const char *av[3] = {argv[0], user ? argv[1] : argv[2], argv[2]};
        size_t lv[3] = {lens[0], user ? lens[1] : lens[2], lens[2]};
        if ((rep = command(c, user ? 3 : 2, av, lv, why)) == NULL) {
            redisFree(c);
            return NULL;
        }
        freeReplyObject(rep);
    }
    if (r->url.db) {
        char db[16];
        snprintf(db, sizeof db, "%d", r->url.db);
        const char *av[2] = {"SELECT", db};
        size_t lv[2] = {6, strlen(db)};
        if ((rep = command(c, 2, av, lv, why)) == NULL) {
            redisFree(c);
            return NULL;
        }
        freeReplyObject(rep);
    }
    return c;
}

static struct conn *conn_get(kpc_remote *r)
{
    pthread_mutex_lock(&r->pool_lock);
    struct conn *cn = r->idle;
    if (cn)
        r->idle = cn->next;
    pthread_mutex_unlock(&r->pool_lock);
    if (cn)
        return cn;
    const char *why = NULL;
    redisContext *c = connect_one(r, &why);
    if (c == NULL) {
        tier_failed(r, "connect", why);
        return NULL;
    }
    if ((cn = calloc(1, sizeof *cn)) == NULL) {
        redisFree(c);
        return NULL;
    }
    cn->c = c;
    return cn;
}

/* Return a connection; a broken one is closed (its stream may be mid-reply). */
static void conn_put(kpc_remote *r, struct conn *cn, bool broken)
{
    if (cn == NULL)
        return;
    if (broken) {
        redisFree(cn->c);
        free(cn);
        return;
    }
    pthread_mutex_lock(&r->pool_lock);
    cn->next = r->idle;
    r->idle = cn;
    pthread_mutex_unlock(&r->pool_lock);
}

/* EVAL script with keys and args (strings; lens NULL: strlen). */
static redisReply *eval(redisContext *c, const char *script, int nkeys, const char *const *keys, int nargs,
                        const char *const *args, const size_t *arg_lens, const char **why)
{
    const char *argv[16];
    size_t lens[16];
    char nk[8];
    snprintf(nk, sizeof nk, "%d", nkeys);
    int n = 0;
    argv[n] = "EVAL", lens[n++] = 4;
    argv[n] = script, lens[n++] = strlen(script);
    argv[n] = nk, lens[n++] = strlen(nk);
    for (int i = 0; i < nkeys; i++)
        argv[n] = keys[i], lens[n++] = strlen(keys[i]);
    for (int i = 0; i < nargs; i++)
        argv[n] = args[i], lens[n++] = arg_lens ? arg_lens[i] : strlen(args[i]);
    return command(c, n, argv, lens, why);
}

/* ---- records: MAC and checks ------------------------------------------------------------------- */
static void mac(const kpc_remote *r, const char *name, const void *bytes, size_t size, uint8_t tag[TAG_BYTES])
{
    crypto_auth_hmacsha512256_state st;
    crypto_auth_hmacsha512256_init(&st, r->secret, sizeof r->secret);
    crypto_auth_hmacsha512256_update(&st, (const unsigned char *)name, strlen(name) + 1);
    crypto_auth_hmacsha512256_update(&st, bytes, size);
    crypto_auth_hmacsha512256_final(&st, tag);
}

/* Check a value fetched from name; NULL when good (rec filled), else why it is refused. */
static const char *check_value(kpc_remote *r, const char *name, const redisReply *v, const kpc_key *key,
                               const char *target, const uint8_t *compiler_id, uint32_t kind, kpc_record *rec)
{
    if (v->type != REDIS_REPLY_STRING)
        return "not a string";
    size_t size = v->len;
    if (r->has_secret) {
        uint8_t tag[TAG_BYTES];
        if (size < TAG_BYTES)
            return "no authentication tag";
        size -= TAG_BYTES;
        mac(r, name, v->str, size, tag);
        if (sodium_memcmp(tag, v->str + size, TAG_BYTES) != 0)
            return "authentication tag does not match (written without the secret, or altered)";
    }
    memset(rec, 0, sizeof *rec);
    void *copy = malloc(size ? size : 1);
    if (copy == NULL)
        return "out of memory";
    memcpy(copy, v->str, size);
    const char *why = kpc_record_take(copy, size, key, target, kind, rec); /* every check a file gets */
    if (why == NULL && compiler_id && memcmp(rec->compiler_id, compiler_id, 16) != 0) {
        kpc_record_free(rec);
        why = "another compiler's record";
    }
    return why;
}

/* ---- leases -------------------------------------------------------------------------------- */
static void lease_free(kpc_remote_lease *l)
{
    free(l);
}

static kpc_remote_lease *lease_new(kpc_remote *r, const kpc_key *key, const char *value)
{
    kpc_remote_lease *l = calloc(1, sizeof *l);
    if (l == NULL)
        return NULL;
    l->r = r;
    kpc_remote_key_name(key, "lease", l->lease_name, sizeof l->lease_name);
    kpc_remote_key_name(key, "done", l->done_name, sizeof l->done_name);
    snprintf(l->value, sizeof l->value, "%s", value);
    return l;
}

/* ---- begin / publish / release ----------------------------------------------------------------- */
enum kpc_remote_verdict kpc_remote_begin(kpc_remote *r, const kpc_key *key, const char *target,
                                         const uint8_t *compiler_id, kpc_record *rec,
                                         kpc_remote_lease **lease, bool *waited_out)
{
    *lease = NULL;
    if (waited_out)
        *waited_out = false;
    memset(rec, 0, sizeof *rec);
    if (!tier_on(r))
        return KPC_REMOTE_OFF;
    struct conn *cn = conn_get(r);
    if (cn == NULL)
        return KPC_REMOTE_OFF;
    char co[96], log[96], lname[96], done[96], hex[KPC_KEY_HEX];
    kpc_remote_key_name(key, "co", co, sizeof co);
    kpc_remote_key_name(key, "log", log, sizeof log);
    kpc_remote_key_name(key, "lease", lname, sizeof lname);
    kpc_remote_key_name(key, "done", done, sizeof done);
    kpc__hex(key->bytes, sizeof key->bytes, hex);
    uint8_t rnd[16];
    char token[33], value[512], lease_ms[16], slice[32], done_ttl[16];
    randombytes_buf(rnd, sizeof rnd);
    kpc__hex(rnd, sizeof rnd, token);
    snprintf(value, sizeof value, "host=%s pid=%d start=%llu token=%s", r->host_id, (int)getpid(),
             (unsigned long long)r->start_time, token);
    snprintf(lease_ms, sizeof lease_ms, "%u", r->lease_ms);
    snprintf(done_ttl, sizeof done_ttl, "%u", DONE_TTL_MS);
    const char *keys[3] = {co, log, lname};
    unsigned skip = 0;
    bool waited = false, timed_out = false;
    char holder[512] = "";
    const char *why = NULL;
    enum kpc_remote_verdict verdict = KPC_REMOTE_OFF;
    for (;;) {
        char skip_s[4];
        snprintf(skip_s, sizeof skip_s, "%u", skip);
        const char *args[3] = {value, lease_ms, skip_s};
        redisReply *rep = eval(cn->c, BEGIN_LUA, 3, keys, 3, args, NULL, &why);
        if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements < 1 ||
            rep->element[0]->type != REDIS_REPLY_INTEGER) {
            if (rep)
                freeReplyObject(rep);
            tier_failed(r, "lookup", why ? why : "unexpected reply");
            conn_put(r, cn, true);
            return KPC_REMOTE_OFF;
        }
        long long what = rep->element[0]->integer;
        if (what == 1 || what == 2) {
            uint32_t kind = what == 1 ? KPC_RECORD_CODE : KPC_RECORD_LOG;
            const char *bad = rep->elements < 2 ? "no value"
                              : check_value(r, kind == KPC_RECORD_CODE ? co : log, rep->element[1], key,
                                            target, compiler_id, kind, rec);
            freeReplyObject(rep);
            if (bad == NULL) {
                if (what == 1)
                    count(r, C_HITS);
                verdict = what == 1 ? KPC_REMOTE_HIT : KPC_REMOTE_FAILED;
                break;
            }
            count(r, C_REFUSED);
            KPC_LOG(KPC_LOG_WARN, "remote tier: refused the %s record of %s for %s: %s; building it again",
                    kind == KPC_RECORD_CODE ? "code" : "log", hex, target, bad);
            skip |= what == 1 ? 1u : 2u;
            continue;
        }
        if (what == 3) {
            freeReplyObject(rep);
            count(r, C_MISSES);
            if (waited && timed_out) {
                count(r, C_TAKEOVERS);
                KPC_LOG(KPC_LOG_INFO, "remote tier: the lease on %s (%s) expired: taking the build over",
                        hex, holder);
            }
            if ((*lease = lease_new(r, key, value)) == NULL) {
                conn_put(r, cn, false);
                return KPC_REMOTE_OFF; /* the lease expires by itself */
            }
            verdict = KPC_REMOTE_BUILD;
            break;
        }
        /* 4: another host builds it: block on the done list until it publishes, or
         * until its lease can have expired, and at most WAIT_SLICE_MS (the fallback) */
        long long pttl = rep->elements >= 3 && rep->element[2]->type == REDIS_REPLY_INTEGER ? rep->element[2]->integer : 0;
        if (rep->elements >= 2 && rep->element[1]->type == REDIS_REPLY_STRING)
            snprintf(holder, sizeof holder, "%s", rep->element[1]->str);
        freeReplyObject(rep);
        if (!waited) {
            count(r, C_WAITS);
            KPC_LOG(KPC_LOG_DEBUG, "remote tier: %s is being built by %s: waiting", hex, holder);
        }
        waited = true;
        long long ms = pttl > 0 ? pttl + 5 : 5;
        if (ms > WAIT_SLICE_MS)
            ms = WAIT_SLICE_MS;
        snprintf(slice, sizeof slice, "%lld.%03lld", ms / 1000, ms % 1000);
        redisSetTimeout(cn->c, tv_ms((unsigned)ms + r->timeout_ms));
        const char *bl[3] = {"BLPOP", done, slice};
        size_t bll[3] = {5, strlen(done), strlen(slice)};
        rep = command(cn->c, 3, bl, bll, &why);
        redisSetTimeout(cn->c, tv_ms(r->timeout_ms));
        if (rep == NULL) {
            tier_failed(r, "waiting", why);
            conn_put(r, cn, true);
            return KPC_REMOTE_OFF;
        }
        timed_out = rep->type == REDIS_REPLY_NIL;
        bool ours = rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
                    rep->element[1]->type == REDIS_REPLY_STRING && strcmp(rep->element[1]->str, holder) == 0;
        freeReplyObject(rep);
        skip = 0; /* a new record may have replaced a refused one */
        if (ours) { /* the wake-up for the build we waited on: pass it on to the next waiter */
            const char *pk[1] = {done};
            const char *pa[2] = {holder, done_ttl};
            if ((rep = eval(cn->c, PASS_LUA, 1, pk, 2, pa, NULL, &why)) == NULL) {
                tier_failed(r, "waking the next waiter", why);
                conn_put(r, cn, true);
                return KPC_REMOTE_OFF;
            }
            freeReplyObject(rep);
        }
    }
    conn_put(r, cn, false);
    if (waited_out)
        *waited_out = waited;
    return verdict;
}

void kpc_remote_publish(kpc_remote *r, kpc_remote_lease *lease, const kpc_key *key, uint32_t kind,
                        const void *bytes, size_t size)
{
    kpc_remote_lease *l = lease;
    char value[512] = "";
    if (l) {
        snprintf(value, sizeof value, "%s", l->value);
        lease_free(l);
    }
    if (!tier_on(r) || size > MAX_VALUE - TAG_BYTES)
        return;
    struct conn *cn = conn_get(r);
    if (cn == NULL)
        return;
    char name[96], lname[96], done[96], ttl[16], done_ttl[16];
    kpc_remote_key_name(key, kind == KPC_RECORD_LOG ? "log" : "co", name, sizeof name);
    kpc_remote_key_name(key, "lease", lname, sizeof lname);
    kpc_remote_key_name(key, "done", done, sizeof done);
    snprintf(ttl, sizeof ttl, "%u", kind == KPC_RECORD_LOG ? LOG_TTL_MS : 0);
    snprintf(done_ttl, sizeof done_ttl, "%u", DONE_TTL_MS);
    void *val = (void *)bytes;
    size_t val_size = size;
    if (r->has_secret) {
        if ((val = malloc(size + TAG_BYTES)) == NULL) {
            conn_put(r, cn, false);
            return;
        }
        memcpy(val, bytes, size);
        mac(r, name, bytes, size, (uint8_t *)val + size);
        val_size = size + TAG_BYTES;
    }
    const char *keys[3] = {name, lname, done};
    const char *args[4] = {val, value, ttl, done_ttl};
    size_t lens[4] = {val_size, strlen(value), strlen(ttl), strlen(done_ttl)};
    const char *why = NULL;
    redisReply *rep = eval(cn->c, PUBLISH_LUA, 3, keys, 4, args, lens, &why);
    if (val != bytes)
        free(val);
    if (rep == NULL) {
        tier_failed(r, "publish", why);
        conn_put(r, cn, true);
        return;
    }
    if (kind == KPC_RECORD_CODE)
        count(r, C_BUILDS);
    if (l && rep->type == REDIS_REPLY_INTEGER && rep->integer == 0)
        KPC_LOG(KPC_LOG_INFO, "remote tier: published %s after its lease had expired", name);
    freeReplyObject(rep);
    conn_put(r, cn, false);
}

void kpc_remote_release(kpc_remote *r, kpc_remote_lease *lease)
{
    if (lease == NULL)
        return;
    char lname[96], done[96], value[512], done_ttl[16];
    snprintf(lname, sizeof lname, "%s", lease->lease_name);
    snprintf(done, sizeof done, "%s", lease->done_name);
    snprintf(value, sizeof value, "%s", lease->value);
    lease_free(lease);
    if (!tier_on(r))
        return; /* the lease expires by itself */
    struct conn *cn = conn_get(r);
    if (cn == NULL)
        return;
    snprintf(done_ttl, sizeof done_ttl, "%u", DONE_TTL_MS);
    const char *keys[2] = {lname, done};
    const char *args[2] = {value, done_ttl};
    const char *why = NULL;
    redisReply *rep = eval(cn->c, RELEASE_LUA, 2, keys, 2, args, NULL, &why);
    if (rep == NULL) {
        tier_failed(r, "release", why);
        conn_put(r, cn, true);
        return;
    }
    freeReplyObject(rep);
    conn_put(r, cn, false);
}

kpc_status kpc_remote_renew(kpc_remote *r, kpc_remote_lease *lease)
{
    if (!tier_on(r))
        return KPC_OK; /* said once already: the lease expires by itself, nothing to renew */
    struct conn *cn = conn_get(r);
    if (cn == NULL)
        return KPC_E_UNAVAILABLE;
    char ms[16];
    snprintf(ms, sizeof ms, "%u", r->lease_ms);
    const char *keys[1] = {lease->lease_name};
    const char *args[2] = {lease->value, ms};
    const char *why = NULL;
    redisReply *rep = eval(cn->c, RENEW_LUA, 1, keys, 2, args, NULL, &why);
    if (rep == NULL) {
        tier_failed(r, "renew", why);
        conn_put(r, cn, true);
        return KPC_E_UNAVAILABLE;
    }
    bool held = rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
    freeReplyObject(rep);
    conn_put(r, cn, false);
    return held ? KPC_OK : KPC_E_NOT_FOUND;
}

kpc_status kpc_remote_read(kpc_remote *r, const kpc_key *key, const char *target,
                           const uint8_t *compiler_id, uint32_t kind, kpc_record *rec)
{
    memset(rec, 0, sizeof *rec);
    if (!tier_on(r))
        return KPC_E_UNAVAILABLE;
    struct conn *cn = conn_get(r);
    if (cn == NULL)
        return KPC_E_UNAVAILABLE;
    char name[96];
    kpc_remote_key_name(key, kind == KPC_RECORD_LOG ? "log" : "co", name, sizeof name);
    const char *argv[2] = {"GET", name};
    size_t lens[2] = {3, strlen(name)};
    const char *why = NULL;
    redisReply *rep = command(cn->c, 2, argv, lens, &why);
    if (rep == NULL) {
        tier_failed(r, "read", why);
        conn_put(r, cn, true);
        return KPC_E_UNAVAILABLE;
    }
    kpc_status s = KPC_E_NOT_FOUND;
    if (rep->type == REDIS_REPLY_STRING) {
        const char *bad = check_value(r, name, rep, key, target, compiler_id, kind, rec);
        if (bad == NULL) {
            count(r, C_HITS);
            s = KPC_OK;
        } else {
            count(r, C_REFUSED);
            KPC_LOG(KPC_LOG_WARN, "remote tier: refused record %s for %s: %s", name, target, bad);
            s = KPC_E_CORRUPT;
        }
    }
    freeReplyObject(rep);
    conn_put(r, cn, false);
    return s;
}

uint64_t kpc_remote_renew_ns(const kpc_remote *r)
{
    return (uint64_t)(r->lease_ms / 3 ? r->lease_ms / 3 : 1) * 1000000ull;
}

/* ---- counters ----------------------------------------------------------------------------------- */
void kpc_remote_counters_get(kpc_remote *r, kpc_remote_counters *c)
{
    uint64_t *f[7] = {&c->hits, &c->misses, &c->builds, &c->waits, &c->takeovers, &c->errors, &c->refused};
    for (int i = 0; i < 7; i++)
        *f[i] = r ? atomic_load_explicit(&r->n[i], memory_order_relaxed) : 0;
}

kpc_status kpc_remote_cluster_counters(kpc_remote *r, kpc_remote_counters *c)
{
    memset(c, 0, sizeof *c);
    struct conn *cn = conn_get(r);
    if (cn == NULL)
        return KPC_E_UNAVAILABLE;
    const char *argv[2] = {"HGETALL", "kpc:1:stats"};
    size_t lens[2] = {7, 11};
    const char *why = NULL;
    redisReply *rep = command(cn->c, 2, argv, lens, &why);
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY) {
        if (rep)
            freeReplyObject(rep);
        KPC_LOG(KPC_LOG_WARN, "remote tier %s: reading the cluster counters: %s", r->shown, why ? why : "bad reply");
        conn_put(r, cn, true);
        return KPC_E_UNAVAILABLE;
    }
    uint64_t *f[7] = {&c->hits, &c->misses, &c->builds, &c->waits, &c->takeovers, &c->errors, &c->refused};
    for (size_t i = 0; i + 1 < rep->elements; i += 2)
        for (int k = 0; k < 7; k++)
            if (rep->element[i]->type == REDIS_REPLY_STRING && strcmp(rep->element[i]->str, counter_names[k]) == 0)
                *f[k] = strtoull(rep->element[i + 1]->str ? rep->element[i + 1]->str : "0", NULL, 10);
    freeReplyObject(rep);
    conn_put(r, cn, false);
    return KPC_OK;
}

/* Add this process's counters to the cluster's (best effort: the tier may be off). */
static void flush_counters(kpc_remote *r)
{
    uint64_t v[7];
    bool any = false;
    for (int i = 0; i < 7; i++)
        any |= (v[i] = atomic_load(&r->n[i])) != 0;
    if (!any || !tier_on(r))
        return; /* while the tier is off, a try could cost a timeout at exit */
    redisContext *c = NULL;
    const char *why = NULL;
    if ((c = connect_one(r, &why)) == NULL)
        return;
    pipe_guard g;
    pipe_block(&g);
    int sent = 0;
    for (int i = 0; i < 7; i++) {
        if (v[i] == 0)
            continue;
        char num[24];
        snprintf(num, sizeof num, "%llu", (unsigned long long)v[i]);
        const char *argv[4] = {"HINCRBY", "kpc:1:stats", counter_names[i], num};
        size_t lens[4] = {7, 11, strlen(counter_names[i]), strlen(num)};
        if (redisAppendCommandArgv(c, 4, argv, lens) == REDIS_OK)
            sent++;
    }
    for (int i = 0; i < sent; i++) {
        void *rep = NULL;
        if (redisGetReply(c, &rep) != REDIS_OK)
            break;
        freeReplyObject(rep);
    }
    pipe_restore(&g);
    redisFree(c);
}

/* ---- open / close ------------------------------------------------------------------------------- */
static kpc_status load_secret(kpc_remote *r)
{
    void *buf = NULL;
    size_t size = 0;
    if (kpc__secret_file_read("KPC_REMOTE_SECRET_FILE", kpc__setting_raw(KPC_SET_REMOTE_SECRET_FILE), &buf,
                              &size) != KPC_OK) {
        KPC_LOG(KPC_LOG_WARN, "the cluster tier is off for this process: its secret cannot be read");
        return KPC_E_INVALID;
    }
    /* any length of secret: the MAC key is its hash */
    crypto_generichash(r->secret, sizeof r->secret, buf, size, NULL, 0);
    sodium_memzero(buf, size);
    free(buf);
    r->has_secret = true;
    return KPC_OK;
}

static void host_identity(char *out, size_t cap)
{
    const char *v = kpc__setting_text(KPC_SET_HOST_ID);
    if (v) {
        snprintf(out, cap, "%s", v);
        return;
    }
    char host[256] = "unknown", boot[64] = "";
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, boot, sizeof boot - 1);
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
    kpc_status s = kpc_remote_url_parse(url, &r->url);
    r->timeout_ms = (unsigned)kpc__setting_number(KPC_SET_REMOTE_TIMEOUT_MS);
    r->lease_ms = (unsigned)kpc__setting_number(KPC_SET_REMOTE_LEASE_MS);
    r->backoff_ms = (unsigned)kpc__setting_number(KPC_SET_REMOTE_BACKOFF_MS);
    if (s == KPC_OK && kpc__setting_raw(KPC_SET_REMOTE_SECRET_FILE) != NULL)
        s = load_secret(r);
    if (s != KPC_OK) {
        sodium_memzero(r, sizeof *r);
        free(r);
        return s;
    }
    kpc_remote_url_redacted(&r->url, r->shown, sizeof r->shown);
    host_identity(r->host_id, sizeof r->host_id);
    r->start_time = kpc__proc_start_time(getpid());
    pthread_mutex_init(&r->pool_lock, NULL);
    KPC_LOG(KPC_LOG_DEBUG, "remote tier %s: host %s, lease %u ms, timeout %u ms%s", r->shown, r->host_id,
            r->lease_ms, r->timeout_ms, r->has_secret ? ", records authenticated" : "");
    *out = r;
    return KPC_OK;
}

void kpc_remote_close(kpc_remote *r)
{
    if (r == NULL)
        return;
    flush_counters(r);
    while (r->idle) {
        struct conn *cn = r->idle;
        r->idle = cn->next;
        redisFree(cn->c);
        free(cn);
    }
    pthread_mutex_destroy(&r->pool_lock);
    sodium_memzero(r, sizeof *r);
    free(r);
}

