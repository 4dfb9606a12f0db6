/*
 * remote.c - the cluster tier's lease protocol on Redis (remote.h says what the tier is
 * for; remote_private.h lists its other parts).
 *
 * Redis keys of a kpc key K, under the group's prefix P = "<ns>:2:<group>:" (the hash
 * tag keeps them in one Redis Cluster slot):
 *   P{K}:co     the code record: disk record bytes [+ 32-byte MAC]; expires unless read
 *   P{K}:log    a failed build's log record, for 30 s (the host index's retry rule)
 *   P{K}:lease  "host=H pid=P start=T token=R [mac=M]", SET NX PX lease_ms by the builder
 *   P{K}:done   a list the publisher pushes its lease value to (expires in 10 s):
 *               waiters block on it with BLPOP and pass the value on to the next one
 *
 * Invariants: a hit is one plain GET (GETEX when records expire): the record's bytes
 * never go through Lua. Every check-and-lease, publish, release and takeover is one Lua
 * script, atomic on the server; a lease is renewed (compare-and-pexpire, by claim.c's
 * keeper every lease/3) and deleted or replaced only by compare-and-delete or
 * compare-and-set, so a holder that lost its lease never touches the next holder's. A
 * lease is short (KPC_REMOTE_LEASE_MS, 3 s): one taken in a reply its holder never saw
 * (a timeout) or held by a dead process blocks its key at most that long. A record is
 * trusted only after record.c's parser and, with a secret, its MAC accept it; without
 * a secret records are neither served nor stored unless KPC_REMOTE_TRUST says so.
 *
 * Waiting on another host's lease is bounded three ways: the lease's own expiry; a
 * lease value that does not authenticate (forged) or that names this host and a process
 * that is dead is taken over at once (compare-and-set); and KPC_BUILD_WAIT_MAX_MS caps
 * the whole wait, as on one host: past it the host builds for itself (counted).
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
#define DONE_TTL_MS 10000  /* the done list outlives every waiter's wake-up */
#define WAIT_SLICE_MS 1000 /* the polling fallback: re-check at least this often */
#define MAX_VALUE (1u << 30)

/* A lease held: renewed through kpc_remote_renew by claim.c's keeper, used by one thread
 * at a time. While any is held the process keeps one connection for the renewals. */
struct kpc_remote_lease {
    kpc_remote *r;
    char lease_name[KPC_REMOTE_NAME_MAX], done_name[KPC_REMOTE_NAME_MAX];
    char value[512];
};

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
/* KEYS lease; ARGV old new lease-ms: compare-and-set (a forged or a dead holder's lease). */
static const char TAKE_LUA[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return 1 end\n"
    "return 0\n";
/* KEYS done; ARGV value done-ttl: pass a wake-up on to the next waiter. */
static const char PASS_LUA[] =
    "redis.call('RPUSH', KEYS[1], ARGV[1]) redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1\n";

/* ---- records ------------------------------------------------------------------------------ */
/* Check a value fetched from name (of the old group or the current one); NULL when good
 * (rec filled), else why it is refused. */
static const char *check_value(kpc_remote *r, bool old, const char *name, redisReply *v, const kpc_key *key,
                               const char *target, const uint8_t *compiler_id, uint32_t kind, kpc_record *rec)
{
    if (v->type != REDIS_REPLY_STRING)
        return "not a string";
    size_t size;
    const char *bad = kpc_remote_open_value(r, old, name, v->str, v->len, &size);
    if (bad)
        return bad;
    memset(rec, 0, sizeof *rec);
    /* the record takes the reply's own buffer (malloc'd by hiredis, which frees a NULL
     * str as nothing): a large record is not copied once more */
    void *bytes = v->str;
    v->str = NULL;
    v->len = 0;
    const char *why = kpc_record_take(bytes, size, key, target, kind, rec); /* every check a file gets */
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
    redisReply *rep = kpc_remote_command(r, cn->c, refresh ? 4 : 2, argv, lens, 0, &why);
    if (rep == NULL) {
        kpc_remote_failed(r, "read", why);
        return GOT_ERROR;
    }
    enum got g = GOT_NONE;
    if (rep->type == REDIS_REPLY_STRING) {
        const char *bad = check_value(r, old, name, rep, key, target, compiler_id, kind, rec);
        if (bad == NULL)
            g = GOT_RECORD;
        else {
            g = GOT_REFUSED;
            kpc_remote_count(r, KPC_RC_REFUSED);
            kpc_remote_warn(r, KPC_RW_REFUSED, KPC_LOG_WARN, "remote tier: refused record %s for %s: %s", name,
                            target, bad);
        }
    }
    freeReplyObject(rep);
    return g;
}

/* ---- leases -------------------------------------------------------------------------------- */
static void lease_free(kpc_remote_lease *l)
{
    kpc_remote *r = l->r;
    free(l);
    if (atomic_fetch_sub(&r->leases, 1) == 1)
        kpc_remote_conn_close_idle(r);
}

static kpc_remote_lease *lease_new(kpc_remote *r, const char *lease_name, const char *done_name, const char *value)
{
    kpc_remote_lease *l = calloc(1, sizeof *l);
    if (l == NULL)
        return NULL;
    l->r = r;
    snprintf(l->lease_name, sizeof l->lease_name, "%s", lease_name);
    snprintf(l->done_name, sizeof l->done_name, "%s", done_name);
    snprintf(l->value, sizeof l->value, "%s", value);
    atomic_fetch_add(&r->leases, 1);
    return l;
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

/* Replace the holder's lease value with ours (compare-and-set): 1 taken, 0 changed
 * meanwhile, -1 Redis failed (said). */
static int take_lease(kpc_remote *r, struct kpc_remote_conn *cn, const char *lname, const char *holder,
                      const char *value)
{
    char ms[16];
    snprintf(ms, sizeof ms, "%u", r->lease_ms);
    const char *keys[1] = {lname};
    const char *args[3] = {holder, value, ms};
    const char *why = NULL;
    redisReply *rep = kpc_remote_eval(r, cn->c, TAKE_LUA, 1, keys, 3, args, NULL, &why);
    if (rep == NULL) {
        kpc_remote_failed(r, "taking a lease over", why);
        return -1;
    }
    int taken = rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
    freeReplyObject(rep);
    return taken;
}

/* ---- begin --------------------------------------------------------------------------------- */
typedef struct begin_state {
    kpc_remote *r;
    struct kpc_remote_conn *cn;
    const kpc_key *key;
    char co[KPC_REMOTE_NAME_MAX], log[KPC_REMOTE_NAME_MAX], lname[KPC_REMOTE_NAME_MAX], done[KPC_REMOTE_NAME_MAX];
    char hex[KPC_KEY_HEX], value[512], holder[512];
    bool waited, timed_out;
    bool nowait; /* kpc_remote_try_begin: answer BUSY instead of waiting on a live holder */
    uint64_t wait_from;
} begin_state;

/* Block on the done list while another host builds: until it publishes, its lease can
 * have expired, or the slice ends. false: Redis failed (said). */
static bool wait_done(begin_state *b, long long pttl, uint64_t left_ms)
{
    kpc_remote *r = b->r;
    long long ms = pttl > 0 ? pttl + 5 : WAIT_SLICE_MS;
    if (ms > WAIT_SLICE_MS)
        ms = WAIT_SLICE_MS;
    if ((uint64_t)ms > left_ms)
        ms = (long long)left_ms + 1;
    char slice[32], done_ttl[16];
    snprintf(slice, sizeof slice, "%lld.%03lld", ms / 1000, ms % 1000);
    const char *bl[3] = {"BLPOP", b->done, slice};
    size_t bll[3] = {5, strlen(b->done), strlen(slice)};
    const char *why = NULL;
    redisReply *rep = kpc_remote_command(r, b->cn->c, 3, bl, bll, (unsigned)ms, &why);
    if (rep == NULL) {
        kpc_remote_failed(r, "waiting", why);
        return false;
    }
    b->timed_out = rep->type == REDIS_REPLY_NIL;
    bool ours = rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 && rep->element[1]->type == REDIS_REPLY_STRING &&
                strcmp(rep->element[1]->str, b->holder) == 0;
    freeReplyObject(rep);
    if (ours) { /* the wake-up for the build we waited on: pass it on to the next waiter */
        snprintf(done_ttl, sizeof done_ttl, "%u", DONE_TTL_MS);
        const char *pk[1] = {b->done};
        const char *pa[2] = {b->holder, done_ttl};
        if ((rep = kpc_remote_eval(r, b->cn->c, PASS_LUA, 1, pk, 2, pa, NULL, &why)) == NULL) {
            kpc_remote_failed(r, "waking the next waiter", why);
            return false;
        }
        freeReplyObject(rep);
    }
    return true;
}

/* Another host's lease (reply 4): take it over when it is forged or its holder died
 * here, else wait. The verdict, or 0 to ask again. */
static int held_elsewhere(begin_state *b, redisReply *rep, kpc_remote_lease **lease)
{
    kpc_remote *r = b->r;
    long long pttl = rep->elements >= 3 && rep->element[2]->type == REDIS_REPLY_INTEGER ? rep->element[2]->integer : -1;
    b->holder[0] = '\0';
    if (rep->elements >= 2 && rep->element[1]->type == REDIS_REPLY_STRING)
        snprintf(b->holder, sizeof b->holder, "%s", rep->element[1]->str);
    freeReplyObject(rep);
    bool forged = !kpc_remote_lease_authentic(r, b->lname, b->holder);
    if (forged || holder_dead_here(r, b->holder)) {
        if (forged) {
            kpc_remote_count(r, KPC_RC_REFUSED);
            kpc_remote_warn(r, KPC_RW_LEASE, KPC_LOG_WARN, "remote tier: the lease on %s does not authenticate "
                            "(written without the secret): ignoring it", b->hex);
        }
        int taken = take_lease(r, b->cn, b->lname, b->holder, b->value);
        if (taken < 0)
            return KPC_REMOTE_OFF;
        if (taken == 0)
            return 0;
        if (!forged) {
            kpc_remote_count(r, KPC_RC_TAKEOVERS);
            KPC_LOG(KPC_LOG_INFO, "remote tier: the lease on %s names a dead process of this host (%s): "
                    "taking the build over", b->hex, b->holder);
        }
        kpc_remote_count(r, KPC_RC_MISSES);
        return (*lease = lease_new(r, b->lname, b->done, b->value)) ? KPC_REMOTE_BUILD : KPC_REMOTE_OFF;
    }
    if (b->nowait)
        return KPC_REMOTE_BUSY; /* a live holder: the caller goes on to other keys first */
    uint64_t now = kpc__now_ns();
    if (!b->waited) {
        kpc_remote_count(r, KPC_RC_WAITS);
        KPC_LOG(KPC_LOG_DEBUG, "remote tier: %s is being built by %s: waiting", b->hex, b->holder);
        b->wait_from = now;
    }
    b->waited = true;
    uint64_t waited_ms = (now - b->wait_from) / 1000000u;
    if (waited_ms >= r->wait_max_ms) {
        kpc_remote_count(r, KPC_RC_WAIT_TIMEOUTS);
        kpc_remote_warn(r, KPC_RW_LEASE, KPC_LOG_WARN, "remote tier: %s has been leased by %s for %.1f s of "
                        "waiting (KPC_BUILD_WAIT_MAX_MS is %u): building it here", b->hex, b->holder,
                        (double)waited_ms / 1e3, r->wait_max_ms);
        return KPC_REMOTE_OFF;
    }
    return wait_done(b, pttl, r->wait_max_ms - waited_ms) ? 0 : KPC_REMOTE_OFF;
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
        kpc_remote_conn_put(r, b.cn, true);
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
            kpc_remote_conn_put(r, b.cn, true);
            return KPC_REMOTE_OFF;
        }
        verdict = g == GOT_RECORD ? KPC_REMOTE_HIT : 0;
    }
    kpc_remote_name(r, false, key, "co", b.co, sizeof b.co);
    kpc_remote_name(r, false, key, "log", b.log, sizeof b.log);
    kpc_remote_name(r, false, key, "lease", b.lname, sizeof b.lname);
    kpc_remote_name(r, false, key, "done", b.done, sizeof b.done);
    kpc__hex(key->bytes, sizeof key->bytes, b.hex);
    kpc_remote_lease_value(r, b.lname, b.value, sizeof b.value);
    char lease_ms[16];
    snprintf(lease_ms, sizeof lease_ms, "%u", r->lease_ms);
    const char *keys[3] = {b.co, b.log, b.lname};
    while (verdict == 0) {
        char skip_s[4];
        snprintf(skip_s, sizeof skip_s, "%u", skip);
        const char *args[3] = {b.value, lease_ms, skip_s};
        const char *why = NULL;
        redisReply *rep = kpc_remote_eval(r, b.cn->c, BEGIN_LUA, 3, keys, 3, args, NULL, &why);
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
            const char *bad = rep->elements < 2 ? "no value"
                              : check_value(r, false, kind == KPC_RECORD_CODE ? b.co : b.log, rep->element[1], key,
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
            freeReplyObject(rep);
            kpc_remote_count(r, KPC_RC_MISSES);
            if (b.waited && b.timed_out) {
                kpc_remote_count(r, KPC_RC_TAKEOVERS);
                KPC_LOG(KPC_LOG_INFO, "remote tier: the lease on %s (%s) expired: taking the build over", b.hex,
                        b.holder);
            }
            verdict = (*lease = lease_new(r, b.lname, b.done, b.value)) ? KPC_REMOTE_BUILD : KPC_REMOTE_OFF;
            break;
        }
        verdict = held_elsewhere(&b, rep, lease);
        if (verdict == 0)
            skip = 0; /* a new record may have replaced a refused one */
    }
    if (verdict == KPC_REMOTE_HIT)
        kpc_remote_count(r, KPC_RC_HITS);
    /* a failure said already: its connection may be mid-reply */
    kpc_remote_conn_put(r, b.cn, verdict == KPC_REMOTE_OFF && !kpc_remote_on(r));
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
/* Compare-and-delete the lease and wake its waiters (PUBLISH_LUA, with a record, or
 * RELEASE_LUA). */
static void end_lease(kpc_remote *r, const char *value, const char *lname, const char *done, const char *name,
                      uint32_t kind, const void *bytes, size_t size)
{
    if (!kpc_remote_on(r))
        return; /* the lease expires by itself: it is short */
    struct kpc_remote_conn *cn = kpc_remote_conn_get(r);
    if (cn == NULL)
        return;
    char ttl[24], done_ttl[16];
    snprintf(ttl, sizeof ttl, "%llu", kind == KPC_RECORD_LOG ? (unsigned long long)LOG_TTL_MS : r->ttl_ms);
    snprintf(done_ttl, sizeof done_ttl, "%u", DONE_TTL_MS);
    const char *why = NULL;
    redisReply *rep;
    if (bytes) {
        size_t val_size;
        void *val = kpc_remote_seal(r, name, bytes, size, &val_size);
        if (val == NULL) {
            kpc_remote_conn_put(r, cn, false);
            return;
        }
        const char *keys[3] = {name, lname, done};
        const char *args[4] = {val, value, ttl, done_ttl};
        size_t lens[4] = {val_size, strlen(value), strlen(ttl), strlen(done_ttl)};
        rep = kpc_remote_eval(r, cn->c, PUBLISH_LUA, 3, keys, 4, args, lens, &why);
        if (val != bytes)
            free(val);
    } else {
        const char *keys[2] = {lname, done};
        const char *args[2] = {value, done_ttl};
        rep = kpc_remote_eval(r, cn->c, RELEASE_LUA, 2, keys, 2, args, NULL, &why);
    }
    if (rep == NULL) {
        kpc_remote_failed(r, bytes ? "publish" : "release", why);
        kpc_remote_conn_put(r, cn, true);
        return;
    }
    if (bytes && kind == KPC_RECORD_CODE)
        kpc_remote_count(r, KPC_RC_BUILDS);
    if (bytes && value[0] && rep->type == REDIS_REPLY_INTEGER && rep->integer == 0)
        KPC_LOG(KPC_LOG_INFO, "remote tier: published %s after its lease had expired", name);
    freeReplyObject(rep);
    kpc_remote_conn_put(r, cn, false);
}

void kpc_remote_publish(kpc_remote *r, kpc_remote_lease *lease, const kpc_key *key, uint32_t kind,
                        const void *bytes, size_t size)
{
    char value[512] = "", name[KPC_REMOTE_NAME_MAX], lname[KPC_REMOTE_NAME_MAX], done[KPC_REMOTE_NAME_MAX];
    kpc_remote_name(r, false, key, kind == KPC_RECORD_LOG ? "log" : "co", name, sizeof name);
    kpc_remote_name(r, false, key, "lease", lname, sizeof lname);
    kpc_remote_name(r, false, key, "done", done, sizeof done);
    if (lease)
        snprintf(value, sizeof value, "%s", lease->value);
    /* the connection kept for the lease serves the publish; then it goes */
    if (r->serve && size <= MAX_VALUE - KPC_REMOTE_TAG_BYTES)
        end_lease(r, value, lname, done, name, kind, bytes, size);
    else if (lease)
        end_lease(r, value, lname, done, NULL, kind, NULL, 0);
    if (lease)
        lease_free(lease);
}

void kpc_remote_release(kpc_remote *r, kpc_remote_lease *lease)
{
    if (lease == NULL)
        return;
    end_lease(r, lease->value, lease->lease_name, lease->done_name, NULL, 0, NULL, 0);
    lease_free(lease);
}

kpc_status kpc_remote_renew(kpc_remote *r, kpc_remote_lease *lease)
{
    if (!kpc_remote_on(r))
        return KPC_OK; /* said once already: the lease expires by itself, nothing to renew */
    struct kpc_remote_conn *cn = kpc_remote_conn_get(r);
    if (cn == NULL)
        return KPC_E_UNAVAILABLE;
    char ms[16];
    snprintf(ms, sizeof ms, "%u", r->lease_ms);
    const char *keys[1] = {lease->lease_name};
    const char *args[2] = {lease->value, ms};
    const char *why = NULL;
    redisReply *rep = kpc_remote_eval(r, cn->c, RENEW_LUA, 1, keys, 2, args, NULL, &why);
    if (rep == NULL) {
        kpc_remote_failed(r, "renew", why);
        kpc_remote_conn_put(r, cn, true);
        return KPC_E_UNAVAILABLE;
    }
    bool held = rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
    freeReplyObject(rep);
    kpc_remote_conn_put(r, cn, false);
    return held ? KPC_OK : KPC_E_NOT_FOUND;
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
    kpc_remote_conn_put(r, cn, g == GOT_ERROR);
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
