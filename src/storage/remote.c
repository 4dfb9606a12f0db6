/*
 * remote.c - the cluster tier's lease protocol on Redis (remote.h says what the tier is
 * for; remote_private.h lists its other parts).
 *
 * Redis keys of a kpc key K, under the group's prefix P = "<ns>:3:<group>:" (the hash
 * tag keeps them in one Redis Cluster slot):
 *   P{K}:co     the code record: disk record bytes [+ 16-byte nonce, 16-byte tag]; expires unless read
 *   P{K}:log    a failed build's log record, for 30 s (the host index's retry rule)
 *   P{K}:lease  "host=H pid=P start=T token=R [at=MS lease=L] [mac=M]", SET NX PX by the builder
 *
 * Invariants: a hit is one plain GET (GETEX when records expire): the record's bytes
 * never go through Lua. Every check-and-lease, publish, release and takeover is one Lua
 * script, atomic on the server; a lease is renewed (compare-and-pexpire, by claim.c's
 * keeper every lease/3) and deleted or replaced only by compare-and-delete or
 * compare-and-set, so a holder that lost its lease never touches the next holder's. A
 * record is trusted only after record.c's parser and, with a secret, its MAC accept it;
 * without a secret records are neither served nor stored unless KPC_REMOTE_TRUST says so.
 *
 * A lease lives long only once its holder has seen it. A script sent before a reply
 * deadline still runs when a stalled Redis resumes, after its client gave up: so the
 * claim (and a takeover) sets the lease for a claim period only (twice
 * KPC_REMOTE_TIMEOUT_MS, at most a lease), and the holder, having read the reply,
 * extends it to KPC_REMOTE_LEASE_MS (3 s) at once. Every extension (that one and the
 * keeper's renewals) is refused by the server when it runs later than its client's
 * deadline: the client sends, with it, the least time the lease may have left then
 * (what the last extension it saw set, less the time since that one was sent and a
 * reply deadline), and a later run finds less left. A lease no holder saw thus lives a
 * claim period; one held by a dead process or a holder cut off from Redis, a lease.
 * Each extension re-signs the value with Redis's time: waiters honour fresh ones only.
 *
 * Waiting on another host's lease holds no connection: the waiter asks again on a new
 * connection, first after about 20 ms, each wait a quarter longer than the one before up
 * to about 250 ms (each spread at random over half to one and a half of that), and never
 * later than just after the lease's expiry; the record appears, or the lease goes
 * (released or expired) and the waiter takes it. The wait is bounded three ways: the
 * lease's own expiry; a lease value that does not authenticate (forged) or that names
 * this host and a process that is dead is taken over at once (compare-and-set); and
 * KPC_BUILD_WAIT_MAX_MS caps the whole wait, as on one host: past it the host builds
 * for itself (counted).
 * kpc_remote_try_begin is begin without the wait: a live holder elsewhere is answered
 * BUSY at once, for a caller that has other keys to go on to (a batch).
 */
#define _GNU_SOURCE
#include "storage/remote_private.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LOG_TTL_MS 30000   /* a failure is shared for 30 s, as on the host */
#define POLL_FIRST_MS 20   /* a waiter asks again after this, */
#define POLL_MAX_MS 250    /* each wait a quarter longer, up to this */
#define MAX_VALUE (1u << 30)

/* A lease held: renewed through kpc_remote_renew by claim.c's keeper, used by one thread
 * at a time. set_ms and sent_ns: the expiry the last command that set or extended it
 * gave, and when this process sent that command (what the next extension's deadline is
 * counted from). */
struct kpc_remote_lease {
    char lease_name[KPC_REMOTE_NAME_MAX];
    char value[512];
    unsigned set_ms;
    uint64_t sent_ns;
    uint64_t redis_ms; /* Redis's TIME at the last reply about it: the next re-signing's "at" */
};

/* ---- scripts ------------------------------------------------------------------------------ */
/* Redis's TIME in ms, as Lua computes it (a double holds it exactly). */
#define NOW_MS_LUA                                                                                           \
    "local function now_ms() local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000) end\n"
/* KEYS co log lease; ARGV lease-value claim-ms skip (1: skip co, 2: skip log: refused).
 * {1, record} | {2, log record} | {3, now} the lease is ours | {4, holder, pttl, now} */
static const char BEGIN_LUA[] =
    NOW_MS_LUA
    "local skip = tonumber(ARGV[3])\n"
    "if skip % 2 == 0 then local v = redis.call('GET', KEYS[1]) if v then return {1, v} end end\n"
    "if skip < 2 then local l = redis.call('GET', KEYS[2]) if l then return {2, l} end end\n"
    "if redis.call('SET', KEYS[3], ARGV[1], 'NX', 'PX', ARGV[2]) then return {3, now_ms()} end\n"
    "return {4, redis.call('GET', KEYS[3]) or '', redis.call('PTTL', KEYS[3]), now_ms()}\n";
/* KEYS record lease; ARGV record value ttl-ms(0: none). 1 if the lease was still ours
 * (and is now released). */
static const char PUBLISH_LUA[] =
    "if ARGV[3] ~= '0' then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])\n"
    "else redis.call('SET', KEYS[1], ARGV[1]) end\n"
    "if ARGV[2] ~= '' and redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) return 1 end\n"
    "return 0\n";
/* KEYS lease; ARGV value: compare-and-delete. */
static const char RELEASE_LUA[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end\n"
    "return 0\n";
/* KEYS lease; ARGV value lease-ms least-pttl re-signed-value: compare-and-set for a lease,
 * refused when it runs so late that less than least-pttl is left (its client gave up on
 * it). now, or 0 when refused. */
static const char RENEW_LUA[] =
    NOW_MS_LUA
    "if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('PTTL', KEYS[1]) >= tonumber(ARGV[3]) then\n"
    "redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[2]) return now_ms() end\n"
    "return 0\n";
/* KEYS lease; ARGV old new claim-ms: compare-and-set (a forged, stale or dead holder's
 * lease). now, or 0 when it changed meanwhile. */
static const char TAKE_LUA[] =
    NOW_MS_LUA
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
    "redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return now_ms() end\n"
    "return 0\n";

/* ---- records ------------------------------------------------------------------------------ */
/* Check a value fetched from name (of the old group or the current one), taking *bytes
 * (malloc'd, len bytes; *bytes is NULL after): NULL when good (rec filled, holding the
 * same buffer: a large record is not copied once more), else why it is refused. */
static const char *check_value(kpc_remote *r, bool old, const char *name, char **bytes, size_t len,
                               const kpc_key *key, const char *target, const uint8_t *compiler_id, uint32_t kind,
                               kpc_record *rec)
{
    void *v = *bytes;
    *bytes = NULL;
    size_t size;
    const char *bad = kpc_remote_open_value(r, old, name, v, len, &size);
    if (bad) {
        free(v);
        return bad;
    }
    memset(rec, 0, sizeof *rec);
    const char *why = kpc_record_take(v, size, key, target, kind, rec); /* every check a file gets */
    if (why == NULL && compiler_id && memcmp(rec->compiler_id, compiler_id, 16) != 0) {
        kpc_record_free(rec);
        why = "another compiler's record";
    }
    return why;
}

enum got { GOT_NONE, GOT_RECORD, GOT_REFUSED, GOT_ERROR };

/* A plain GET of a record (GETEX: its expiry refreshed, when records expire). */
static enum got get_record(kpc_remote *r, struct kpc_remote_conn *cn, bool old, const kpc_key *key,
                           const char *target, const uint8_t *compiler_id, uint32_t kind, kpc_record *rec)
{
    char name[KPC_REMOTE_NAME_MAX], px[24];
    kpc_remote_name(r, old, key, kind == KPC_RECORD_LOG ? "log" : "co", name, sizeof name);
    snprintf(px, sizeof px, "%llu", r->ttl_ms);
    bool refresh = r->ttl_ms && kind == KPC_RECORD_CODE;
    const char *argv[4] = {refresh ? "GETEX" : "GET", name, "PX", px};
    size_t lens[4] = {strlen(argv[0]), strlen(name), 2, strlen(px)};
    const char *why = NULL;
    char *v = NULL;
    size_t len = 0;
    int got = kpc_remote_get_value(r, cn, refresh ? 4 : 2, argv, lens, MAX_VALUE, &v, &len, &why);
    if (got < 0) {
        kpc_remote_failed(r, "read", why);
        return GOT_ERROR;
    }
    if (got == 0)
        return GOT_NONE;
    const char *bad = check_value(r, old, name, &v, len, key, target, compiler_id, kind, rec);
    if (bad == NULL)
        return GOT_RECORD;
    kpc_remote_count(r, KPC_RC_REFUSED);
    kpc_remote_warn(r, KPC_RW_REFUSED, KPC_LOG_WARN, "remote tier: refused record %s for %s: %s", name, target, bad);
    return GOT_REFUSED;
}

/* ---- leases -------------------------------------------------------------------------------- */
/* How long a claim (or a takeover) sets the lease for, until its holder extends it: a
 * reply deadline and as much again for the extension to arrive. */
static unsigned claim_ms(const kpc_remote *r)
{
    unsigned ms = 2 * r->timeout_ms;
    return ms < r->lease_ms ? ms : r->lease_ms;
}

static kpc_remote_lease *lease_new(const char *lease_name, const char *value, unsigned set_ms, uint64_t sent_ns,
                                   uint64_t redis_ms)
{
    kpc_remote_lease *l = calloc(1, sizeof *l);
    if (l == NULL)
        return NULL;
    snprintf(l->lease_name, sizeof l->lease_name, "%s", lease_name);
    snprintf(l->value, sizeof l->value, "%s", value);
    l->set_ms = set_ms;
    l->sent_ns = sent_ns;
    l->redis_ms = redis_ms;
    return l;
}

/* Extend the lease to a full one, re-signed with Redis's time at the last reply about it
 * (compare-and-set, refused past this call's deadline): 1 extended, 0 not ours, -1 Redis
 * failed (said). */
static int extend(kpc_remote *r, struct kpc_remote_conn *cn, kpc_remote_lease *l)
{
    uint64_t now = kpc__now_ns();
    long long least = (long long)l->set_ms - (long long)((now - l->sent_ns) / 1000000u) - (long long)r->timeout_ms;
    char ms[16], least_s[24], value[sizeof l->value];
    snprintf(ms, sizeof ms, "%u", r->lease_ms);
    snprintf(least_s, sizeof least_s, "%lld", least);
    kpc_remote_lease_resign(r, l->lease_name, l->value, l->redis_ms, value, sizeof value);
    const char *keys[1] = {l->lease_name};
    const char *args[4] = {l->value, ms, least_s, value};
    const char *why = NULL;
    redisReply *rep = kpc_remote_eval(r, cn, RENEW_LUA, 1, keys, 4, args, NULL, &why);
    if (rep == NULL) {
        kpc_remote_failed(r, "renewing a lease", why);
        return -1;
    }
    bool held = rep->type == REDIS_REPLY_INTEGER && rep->integer > 0;
    if (held) {
        l->set_ms = r->lease_ms;
        l->sent_ns = now;
        l->redis_ms = (uint64_t)rep->integer;
        memcpy(l->value, value, sizeof value);
    }
    freeReplyObject(rep);
    return held;
}

/* The holder of a lease is a process of this host that is dead (pid and start time). */
static bool holder_dead_here(const kpc_remote *r, const char *holder)
{
    char host[320];
    int pid = 0;
    unsigned long long start = 0;
    if (sscanf(holder, "host=%319s pid=%d start=%llu", host, &pid, &start) != 3 || strcmp(host, r->host_id) != 0)
        return false;
    return pid > 0 && !kpc__proc_alive((pid_t)pid, start);
}

/* Replace the holder's lease value with ours (compare-and-set) for a claim period:
 * Redis's TIME in ms when taken, 0 changed meanwhile, -1 Redis failed (said). */
static long long take_lease(kpc_remote *r, struct kpc_remote_conn *cn, const char *lname, const char *holder,
                            const char *value)
{
    char ms[16];
    snprintf(ms, sizeof ms, "%u", claim_ms(r));
    const char *keys[1] = {lname};
    const char *args[3] = {holder, value, ms};
    const char *why = NULL;
    redisReply *rep = kpc_remote_eval(r, cn, TAKE_LUA, 1, keys, 3, args, NULL, &why);
    if (rep == NULL) {
        kpc_remote_failed(r, "taking a lease over", why);
        return -1;
    }
    long long taken = rep->type == REDIS_REPLY_INTEGER && rep->integer > 0 ? rep->integer : 0;
    freeReplyObject(rep);
    return taken;
}

/* ---- begin --------------------------------------------------------------------------------- */
typedef struct begin_state {
    kpc_remote *r;
    struct kpc_remote_conn *cn; /* NULL while it waits: a wait holds no connection */
    const kpc_key *key;
    char co[KPC_REMOTE_NAME_MAX], log[KPC_REMOTE_NAME_MAX], lname[KPC_REMOTE_NAME_MAX];
    char hex[KPC_KEY_HEX], value[512], holder[512];
    bool waited;
    bool nowait; /* kpc_remote_try_begin: answer BUSY instead of waiting on a live holder */
    uint64_t wait_from;
    uint64_t sent_ns;    /* when the last claim or takeover was sent */
    long long expires_ms; /* the awaited lease's expiry as last seen, on Redis's clock (0: none) */
    unsigned poll_ms;    /* the next wait's length, before its bounds */
    unsigned sleep_ms;   /* set by held_elsewhere: wait this long, then ask again */
} begin_state;

/* The claim or takeover just sent went through (its reply said Redis's TIME, redis_ms):
 * the lease is ours for a claim period; extend it to a full one now that its reply is
 * seen. The verdict, or 0 to ask again (lost meanwhile: a new token for the next claim). */
static int hold(begin_state *b, kpc_remote_lease **lease, uint64_t redis_ms)
{
    kpc_remote *r = b->r;
    kpc_remote_lease *l = lease_new(b->lname, b->value, claim_ms(r), b->sent_ns, redis_ms);
    if (l == NULL)
        return KPC_REMOTE_OFF; /* unknown to us: it lapses after the claim period */
    int held = l->set_ms < r->lease_ms ? extend(r, b->cn, l) : 1;
    if (held == 1) {
        kpc_remote_count(r, KPC_RC_MISSES);
        *lease = l;
        return KPC_REMOTE_BUILD;
    }
    free(l);
    if (held < 0)
        return KPC_REMOTE_OFF;
    kpc_remote_lease_value(r, b->lname, NULL, 0, b->value, sizeof b->value);
    return 0;
}

/* Another host's lease (reply 4): take it over when it is forged, stale or its holder
 * died here, else wait (b->sleep_ms). The verdict, or 0 to ask again. */
static int held_elsewhere(begin_state *b, redisReply *rep, kpc_remote_lease **lease)
{
    kpc_remote *r = b->r;
    redisReply **e = rep->element;
    long long pttl = rep->elements >= 3 && e[2]->type == REDIS_REPLY_INTEGER ? e[2]->integer : -1;
    long long now_ms = rep->elements >= 4 && e[3]->type == REDIS_REPLY_INTEGER ? e[3]->integer : 0;
    b->holder[0] = '\0';
    if (rep->elements >= 2 && e[1]->type == REDIS_REPLY_STRING)
        snprintf(b->holder, sizeof b->holder, "%s", e[1]->str);
    freeReplyObject(rep);
    bool forged = !kpc_remote_lease_authentic(r, b->lname, b->holder);
    bool dead = !forged && holder_dead_here(r, b->holder);
    bool stale = !forged && !dead && !kpc_remote_lease_fresh(r, b->holder, pttl, now_ms);
    if (forged || stale || dead) {
        if (forged || stale) {
            kpc_remote_count(r, KPC_RC_REFUSED);
            kpc_remote_warn(r, KPC_RW_LEASE, KPC_LOG_WARN, "remote tier: the lease on %s %s: ignoring it", b->hex,
                            forged ? "does not authenticate (written without the secret)"
                                   : "is stale: not re-signed by its holder for two leases (written back later?)");
        }
        b->sent_ns = kpc__now_ns();
        long long taken = take_lease(r, b->cn, b->lname, b->holder, b->value);
        if (taken <= 0)
            return taken < 0 ? KPC_REMOTE_OFF : 0;
        int verdict = hold(b, lease, (uint64_t)taken);
        if (verdict == KPC_REMOTE_BUILD && dead) {
            kpc_remote_count(r, KPC_RC_TAKEOVERS);
            KPC_LOG(KPC_LOG_INFO, "remote tier: the lease on %s names a dead process of this host (%s): "
                    "taking the build over", b->hex, b->holder);
        }
        return verdict;
    }
    if (b->nowait)
        return KPC_REMOTE_BUSY; /* a live holder: the caller goes on to other keys first */
    uint64_t now = kpc__now_ns();
    if (!b->waited) {
        kpc_remote_count(r, KPC_RC_WAITS);
        KPC_LOG(KPC_LOG_DEBUG, "remote tier: %s is being built by %s: waiting", b->hex, b->holder);
        b->wait_from = now;
        b->poll_ms = POLL_FIRST_MS;
    }
    b->waited = true;
    b->expires_ms = pttl >= 0 && now_ms > 0 ? now_ms + pttl : 0;
    uint64_t waited_ms = (now - b->wait_from) / 1000000u;
    if (waited_ms >= r->wait_max_ms) {
        kpc_remote_count(r, KPC_RC_WAIT_TIMEOUTS);
        kpc_remote_warn(r, KPC_RW_LEASE, KPC_LOG_WARN, "remote tier: %s has been leased by %s for %.1f s of "
                        "waiting (KPC_BUILD_WAIT_MAX_MS is %u): building it here", b->hex, b->holder,
                        (double)waited_ms / 1e3, r->wait_max_ms);
        return KPC_REMOTE_OFF;
    }
    /* spread over half to one and a half of it: waiters that began together (a storm)
     * must not all connect at the same moment again and again */
    uint64_t ms = b->poll_ms / 2 + (now / 1000u) % (b->poll_ms + 1);
    if (pttl >= 0 && (uint64_t)pttl + 5 < ms)
        ms = (uint64_t)pttl + 5; /* look again just after it expires */
    if (ms > r->wait_max_ms - waited_ms)
        ms = r->wait_max_ms - waited_ms + 1;
    b->sleep_ms = (unsigned)ms;
    b->poll_ms += b->poll_ms / 4;
    if (b->poll_ms > POLL_MAX_MS)
        b->poll_ms = POLL_MAX_MS;
    return 0;
}

static enum kpc_remote_verdict begin_key(kpc_remote *r, const kpc_key *key, const char *target,
                                         const uint8_t *compiler_id, kpc_record *rec,
                                         kpc_remote_lease **lease, bool *waited_out, bool nowait)
{
    *lease = NULL;
    if (waited_out)
        *waited_out = false;
    memset(rec, 0, sizeof *rec);
    if (!kpc_remote_on(r))
        return KPC_REMOTE_OFF;
    if (!r->serve) {
        kpc_remote_count(r, KPC_RC_UNSERVED);
        return KPC_REMOTE_OFF;
    }
    begin_state b = {.r = r, .key = key, .nowait = nowait};
    if ((b.cn = kpc_remote_conn_get(r)) == NULL)
        return KPC_REMOTE_OFF;
    unsigned skip = 0;
    int verdict = 0;
    /* a hit is one plain GET; then the group of the previous secret, while it rotates */
    switch (get_record(r, b.cn, false, key, target, compiler_id, KPC_RECORD_CODE, rec)) {
    case GOT_RECORD:
        verdict = KPC_REMOTE_HIT;
        break;
    case GOT_ERROR:
        kpc_remote_conn_put(b.cn, true);
        return KPC_REMOTE_OFF;
    case GOT_REFUSED:
        skip = 1;
        break;
    case GOT_NONE:
        break;
    }
    if (verdict == 0 && r->has_old) {
        enum got g = get_record(r, b.cn, true, key, target, compiler_id, KPC_RECORD_CODE, rec);
        if (g == GOT_ERROR) {
            kpc_remote_conn_put(b.cn, true);
            return KPC_REMOTE_OFF;
        }
        verdict = g == GOT_RECORD ? KPC_REMOTE_HIT : 0;
    }
    /* the claim's names and lease value (a random token and a MAC) only once a hit missed */
    if (verdict == 0) {
        kpc_remote_name(r, false, key, "co", b.co, sizeof b.co);
        kpc_remote_name(r, false, key, "log", b.log, sizeof b.log);
        kpc_remote_name(r, false, key, "lease", b.lname, sizeof b.lname);
        kpc__hex(key->bytes, sizeof key->bytes, b.hex);
        kpc_remote_lease_value(r, b.lname, NULL, 0, b.value, sizeof b.value);
    }
    char claim[16];
    snprintf(claim, sizeof claim, "%u", claim_ms(r));
    const char *keys[3] = {b.co, b.log, b.lname};
    while (verdict == 0) {
        if (b.cn == NULL && (b.cn = kpc_remote_conn_get(r)) == NULL) {
            verdict = KPC_REMOTE_OFF;
            break;
        }
        char skip_s[4];
        snprintf(skip_s, sizeof skip_s, "%u", skip);
        const char *args[3] = {b.value, claim, skip_s};
        const char *why = NULL;
        b.sent_ns = kpc__now_ns();
        redisReply *rep = kpc_remote_eval(r, b.cn, BEGIN_LUA, 3, keys, 3, args, NULL, &why);
        if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements < 1 ||
            rep->element[0]->type != REDIS_REPLY_INTEGER) {
            if (rep)
                freeReplyObject(rep);
            kpc_remote_failed(r, "lookup", why ? why : "unexpected reply");
            verdict = KPC_REMOTE_OFF;
            break;
        }
        long long what = rep->element[0]->integer;
        if (what == 1 || what == 2) {
            uint32_t kind = what == 1 ? KPC_RECORD_CODE : KPC_RECORD_LOG;
            redisReply *v = rep->elements < 2 ? NULL : rep->element[1];
            const char *bad = v == NULL ? "no value"
                              : v->type != REDIS_REPLY_STRING ? "not a string"
                              : check_value(r, false, kind == KPC_RECORD_CODE ? b.co : b.log, &v->str, v->len, key,
                                            target, compiler_id, kind, rec);
            freeReplyObject(rep);
            if (bad == NULL) {
                verdict = what == 1 ? KPC_REMOTE_HIT : KPC_REMOTE_FAILED;
                break;
            }
            kpc_remote_count(r, KPC_RC_REFUSED);
            kpc_remote_warn(r, KPC_RW_REFUSED, KPC_LOG_WARN, "remote tier: refused the %s record of %s for %s: "
                            "%s; building it again", kind == KPC_RECORD_CODE ? "code" : "log", b.hex, target, bad);
            skip |= what == 1 ? 1u : 2u;
            continue;
        }
        if (what == 3) {
            long long redis_ms = rep->elements >= 2 && rep->element[1]->type == REDIS_REPLY_INTEGER
                                     ? rep->element[1]->integer : 0;
            freeReplyObject(rep);
            /* a takeover if the awaited lease expired, on Redis's clock (ours lags it by a reply) */
            bool expired = b.waited && b.expires_ms > 0 && redis_ms + 2 >= b.expires_ms;
            verdict = hold(&b, lease, redis_ms > 0 ? (uint64_t)redis_ms : 0);
            if (verdict == KPC_REMOTE_BUILD && expired) {
                kpc_remote_count(r, KPC_RC_TAKEOVERS);
                KPC_LOG(KPC_LOG_INFO, "remote tier: the lease on %s (%s) expired: taking the build over", b.hex,
                        b.holder);
            }
            continue;
        }
        verdict = held_elsewhere(&b, rep, lease);
        if (verdict == 0)
            skip = 0; /* a new record may have replaced a refused one */
        if (verdict == 0 && b.sleep_ms) {
            kpc_remote_conn_put(b.cn, false);
            b.cn = NULL;
            kpc_remote_sleep_ms(b.sleep_ms);
            b.sleep_ms = 0;
        }
    }
    if (verdict == KPC_REMOTE_HIT)
        kpc_remote_count(r, KPC_RC_HITS);
    /* a failure said already: its connection may be mid-reply */
    kpc_remote_conn_put(b.cn, verdict == KPC_REMOTE_OFF && !kpc_remote_on(r));
    if (waited_out)
        *waited_out = b.waited;
    return (enum kpc_remote_verdict)verdict;
}

enum kpc_remote_verdict kpc_remote_begin(kpc_remote *r, const kpc_key *key, const char *target,
                                         const uint8_t *compiler_id, kpc_record *rec,
                                         kpc_remote_lease **lease, bool *waited_out)
{
    return begin_key(r, key, target, compiler_id, rec, lease, waited_out, false);
}

enum kpc_remote_verdict kpc_remote_try_begin(kpc_remote *r, const kpc_key *key, const char *target,
                                             const uint8_t *compiler_id, kpc_record *rec,
                                             kpc_remote_lease **lease)
{
    return begin_key(r, key, target, compiler_id, rec, lease, NULL, true);
}

/* ---- publish / release / renew / read ------------------------------------------------------------ */
/* Store a record and compare-and-delete the lease (PUBLISH_LUA), or only the latter
 * (RELEASE_LUA: bytes NULL). */
static void end_lease(kpc_remote *r, const char *value, const char *lname, const char *name, uint32_t kind,
                      const void *bytes, size_t size)
{
    if (!kpc_remote_on(r))
        return; /* the lease expires by itself: it is short */
    struct kpc_remote_conn *cn = kpc_remote_conn_get(r);
    if (cn == NULL)
        return;
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%llu", kind == KPC_RECORD_LOG ? (unsigned long long)LOG_TTL_MS : r->ttl_ms);
    const char *why = NULL;
    redisReply *rep;
    if (bytes) {
        size_t val_size;
        void *val = kpc_remote_seal(r, name, bytes, size, &val_size);
        if (val == NULL) {
            kpc_remote_conn_put(cn, false);
            return;
        }
        const char *keys[2] = {name, lname};
        const char *args[3] = {val, value, ttl};
        size_t lens[3] = {val_size, strlen(value), strlen(ttl)};
        rep = kpc_remote_eval(r, cn, PUBLISH_LUA, 2, keys, 3, args, lens, &why);
        if (val != bytes)
            free(val);
    } else {
        const char *keys[1] = {lname};
        const char *args[1] = {value};
        rep = kpc_remote_eval(r, cn, RELEASE_LUA, 1, keys, 1, args, NULL, &why);
    }
    if (rep == NULL) {
        kpc_remote_failed(r, bytes ? "publish" : "release", why);
        kpc_remote_conn_put(cn, true);
        return;
    }
    if (bytes && kind == KPC_RECORD_CODE)
        kpc_remote_count(r, KPC_RC_BUILDS);
    if (bytes && value[0] && rep->type == REDIS_REPLY_INTEGER && rep->integer == 0)
        KPC_LOG(KPC_LOG_INFO, "remote tier: published %s after its lease had expired", name);
    freeReplyObject(rep);
    kpc_remote_conn_put(cn, false);
}

void kpc_remote_publish(kpc_remote *r, kpc_remote_lease *lease, const kpc_key *key, uint32_t kind,
                        const void *bytes, size_t size)
{
    char value[512] = "", name[KPC_REMOTE_NAME_MAX], lname[KPC_REMOTE_NAME_MAX];
    kpc_remote_name(r, false, key, kind == KPC_RECORD_LOG ? "log" : "co", name, sizeof name);
    kpc_remote_name(r, false, key, "lease", lname, sizeof lname);
    if (lease)
        snprintf(value, sizeof value, "%s", lease->value);
    if (r->serve && size <= MAX_VALUE - KPC_REMOTE_TRAILER_BYTES)
        end_lease(r, value, lname, name, kind, bytes, size);
    else if (lease)
        end_lease(r, value, lname, NULL, kind, NULL, 0);
    free(lease);
}

void kpc_remote_release(kpc_remote *r, kpc_remote_lease *lease)
{
    if (lease == NULL)
        return;
    end_lease(r, lease->value, lease->lease_name, NULL, 0, NULL, 0);
    free(lease);
}

kpc_status kpc_remote_renew(kpc_remote *r, kpc_remote_lease *lease)
{
    if (!kpc_remote_on(r))
        return KPC_OK; /* said once already: the lease expires by itself, nothing to renew */
    struct kpc_remote_conn *cn = kpc_remote_conn_get(r);
    if (cn == NULL)
        return KPC_E_UNAVAILABLE;
    int held = extend(r, cn, lease);
    kpc_remote_conn_put(cn, held < 0);
    return held > 0 ? KPC_OK : held == 0 ? KPC_E_NOT_FOUND : KPC_E_UNAVAILABLE;
}

uint64_t kpc_remote_renew_ns(const kpc_remote *r)
{
    return (uint64_t)(r->lease_ms / 3 ? r->lease_ms / 3 : 1) * 1000000ull;
}

kpc_status kpc_remote_read(kpc_remote *r, const kpc_key *key, const char *target,
                           const uint8_t *compiler_id, uint32_t kind, kpc_record *rec)
{
    memset(rec, 0, sizeof *rec);
    if (!kpc_remote_on(r) || !r->serve)
        return KPC_E_UNAVAILABLE;
    struct kpc_remote_conn *cn = kpc_remote_conn_get(r);
    if (cn == NULL)
        return KPC_E_UNAVAILABLE;
    enum got g = get_record(r, cn, false, key, target, compiler_id, kind, rec);
    if (g == GOT_NONE && r->has_old)
        g = get_record(r, cn, true, key, target, compiler_id, kind, rec);
    kpc_remote_conn_put(cn, g == GOT_ERROR);
    switch (g) {
    case GOT_RECORD:
        kpc_remote_count(r, KPC_RC_HITS);
        return KPC_OK;
    case GOT_REFUSED:
        return KPC_E_CORRUPT;
    case GOT_ERROR:
        return KPC_E_UNAVAILABLE;
    default:
        return KPC_E_NOT_FOUND;
    }
}
