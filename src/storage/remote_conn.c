/*
 * remote_conn.c - the cluster tier's connections to Redis (remote_private.h).
 *
 * Every connect and every reply has a deadline: hiredis's connect timeout (per address
 * the name resolves to), then the socket's send and receive timeouts, set before the
 * AUTH and SELECT of a new connection: KPC_REMOTE_TIMEOUT_MS each (a blocking command
 * would add its own wait; the tier sends none). SIGPIPE is
 * blocked in the calling thread around each call, and one it raised is consumed: a
 * server that closed the connection must not kill a rank (hiredis uses write()).
 * Connecting goes through the fault seam (base/fault.h), so the fault test can fail it.
 * Replies are hiredis's, but for a record's value, which is read by hand straight into a
 * buffer of its size (kpc_remote_get_value, below).
 *
 * Connections: a process connects only when it needs Redis (the host's claimant of a
 * key, a waiter's check, a renewal, a read), and closes the connection as soon as the
 * call is done: nothing is kept while idle, not even while a lease is held (its keeper
 * connects for each renewal, once a third of a lease) or while another host's lease is
 * waited on (remote.c checks it again now and then on a new connection). So a storm of
 * H hosts x P ranks holds only as many connections as there are processes in a Redis
 * call at that moment, and those are bounded per host: a connection is made only with one
 * of the host's HOST_SLOTS slots held (below), so a host's ranks asking at once (a storm
 * whose ranks start at different keys) queue for a moment on their host instead of
 * connecting all together. A connection is closed with a reset (SO_LINGER 0) once its
 * replies are read: connecting this often must not leave a TIME_WAIT entry per call on
 * the host, which would use up its ports at thousands of calls per minute.
 *
 * Where a command goes is remote_slots.c's: the server (the first seed that answers), or
 * on a Redis Cluster its key's primary; a connection moves to another node when a
 * command of its call goes elsewhere (a redirect), closed with a reset like any other.
 * After a failure the tier is off for this process for KPC_REMOTE_BACKOFF_MS (on a
 * cluster, only once the failover wait of remote_slots.c is over); the first failure of
 * the process is said at the default log level (error), later ones at warning (once per
 * back-off period) or debug.
 */
#define _GNU_SOURCE
#include "storage/remote_private.h"
#include "base/fault.h"
#include "base/log.h"
#include "base/hash.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static struct timeval tv_ms(unsigned ms) { return (struct timeval){.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000}; }

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

void kpc_remote_warn(kpc_remote *r, int kind, int later, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    static atomic_flag said[KPC_RW_COUNT];
    (void)r;
    int level = atomic_flag_test_and_set(&said[kind]) ? later : KPC_LOG_ERROR;
    KPC_LOG(level, "%s", msg);
}

void kpc_remote_failed(kpc_remote *r, const char *what, const char *detail)
{
    kpc_remote_count(r, KPC_RC_ERRORS);
    uint64_t now = kpc__now_ns();
    uint64_t prev = atomic_load(&r->off_until_ns);
    uint64_t until = now + (uint64_t)r->backoff_ms * 1000000ull;
    bool was_on = prev <= now && atomic_compare_exchange_strong(&r->off_until_ns, &prev, until);
    kpc_remote_warn(r, KPC_RW_DOWN, was_on ? KPC_LOG_WARN : KPC_LOG_DEBUG,
                    "remote tier %s: %s: %s; off for %u ms, building host-local", r->shown, what,
                    detail ? detail : "failed", r->backoff_ms);
}

bool kpc_remote_on(kpc_remote *r) { return atomic_load(&r->off_until_ns) <= kpc__now_ns(); }

/* An error reply, said so that the administrator knows what to change. */
static const char *explain(const char *err)
{
    if (strncmp(err, "MOVED ", 6) == 0 || strncmp(err, "ASK ", 4) == 0)
        return " (a Redis Cluster node redirected the request again and again, or to a node that "
               "does not serve it: the cluster's slots are moving or its map is inconsistent)";
    if (strncmp(err, "CLUSTERDOWN", 11) == 0)
        return " (the Redis Cluster serves no node for this key: a primary died without a replica)";
    if (strncmp(err, "READONLY", 8) == 0)
        return " (this Redis is a read-only replica: point KPC_REMOTE at the primary)";
    if (strncmp(err, "NOAUTH", 6) == 0 || strncmp(err, "WRONGPASS", 9) == 0)
        return " (the password in KPC_REMOTE is missing or wrong)";
    if (strncmp(err, "NOPERM", 6) == 0)
        return " (the Redis ACL user may not run this: see the ACL line in docs/cluster.md)";
    if (strncmp(err, "OOM", 3) == 0)
        return " (Redis is at maxmemory with a policy that evicts nothing: see docs/cluster.md)";
    return "";
}

/* A command's reply (NULL: none came; saved: the errno of the call), said plainly; an
 * error reply's own text also in raw (when not NULL, "" for none). */
static redisReply *said(kpc_remote *r, redisContext *c, redisReply *rep, int saved, const char **why, char *raw,
                        size_t raw_cap)
{
    if (raw)
        raw[0] = '\0';
    if (rep == NULL) {
        static _Thread_local char err[160];
        if (c->err == REDIS_ERR_IO && (saved == EAGAIN || saved == EWOULDBLOCK))
            snprintf(err, sizeof err, "no reply within %u ms (KPC_REMOTE_TIMEOUT_MS)", r->timeout_ms);
        else
            snprintf(err, sizeof err, "%s", c->errstr[0] ? c->errstr : "no reply");
        *why = err;
        return NULL;
    }
    if (rep->type == REDIS_REPLY_ERROR) {
        static _Thread_local char err[512];
        snprintf(err, sizeof err, "%.160s%s", rep->str, explain(rep->str));
        *why = err;
        if (raw)
            snprintf(raw, raw_cap, "%s", rep->str);
        freeReplyObject(rep);
        return NULL;
    }
    return rep;
}

redisReply *kpc_remote_raw_command(redisContext *c, int argc, const char **argv, const size_t *lens)
{
    pipe_guard g;
    pipe_block(&g);
    redisReply *rep = redisCommandArgv(c, argc, argv, lens);
    pipe_restore(&g);
    return rep;
}

redisReply *kpc_remote_command(kpc_remote *r, struct kpc_remote_conn *cn, int argc, const char **argv,
                               const size_t *lens, const char **why)
{
    kpc_route rt;
    kpc_remote_route_begin(&rt, argc, argv, lens);
    for (;;) {
        char raw[256] = "";
        *why = NULL;
        if (kpc_remote_route_conn(r, cn, &rt, why)) {
            pipe_guard g;
            pipe_block(&g);
            redisReply *rep = redisCommandArgv(cn->c, argc, argv, lens);
            int saved = errno;
            pipe_restore(&g);
            if ((rep = said(r, cn->c, rep, saved, why, raw, sizeof raw)) != NULL)
                return rep;
        }
        if (!kpc_remote_reroute(r, cn, &rt, raw[0] ? raw : NULL, why))
            return NULL;
    }
}

/* ---- a bulk string read straight into its own buffer ---------------------------------------- */
/* hiredis's reader reads a reply 16 KB at a time into a buffer that grows, then copies the
 * string out of it: for a 590 KB code object 37 reads, two copies more than the socket's
 * own and the page faults of two more buffers of that size. A record is read here
 * instead: its header ("$<length>\r\n", at most BULK_HEAD bytes) alone, then the string
 * straight into a buffer of its size. Any other reply (an error, nil) goes to hiredis's
 * reader with the bytes already read. The socket's receive timeout bounds each read, as
 * it bounds hiredis's. Reading the socket itself assumes plain TCP or a Unix socket, the
 * only kinds this kpc connects (hiredis's TLS, from 1.0, would have to read for it). */
#define BULK_HEAD 24

static const char *read_failed(kpc_remote *r, ssize_t got)
{
    static _Thread_local char err[160];
    if (got == 0)
        snprintf(err, sizeof err, "the server closed the connection");
    else if (errno == EAGAIN || errno == EWOULDBLOCK)
        snprintf(err, sizeof err, "no reply within %u ms (KPC_REMOTE_TIMEOUT_MS)", r->timeout_ms);
    else
        snprintf(err, sizeof err, "read: %s", strerror(errno));
    return err;
}

/* Read n bytes into buf: NULL, or why not. */
static const char *read_full(kpc_remote *r, int fd, char *buf, size_t n)
{
    while (n) {
        ssize_t got = read(fd, buf, n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return read_failed(r, got);
        buf += got;
        n -= (size_t)got;
    }
    return NULL;
}

/* The length of a bulk string's header line "$<digits>\r\n" (-1: nil), or -2 when it is
 * not one. */
static long long bulk_length(const char *head, const char *eol)
{
    if (head[0] != '$' || eol[-1] != '\r')
        return -2;
    if (eol - head == 4 && memcmp(head, "$-1", 3) == 0)
        return -1;
    long long n = 0;
    for (const char *p = head + 1; p < eol - 1; p++) {
        if (*p < '0' || *p > '9' || n > (1ll << 40))
            return -2;
        n = n * 10 + (*p - '0');
    }
    return eol - head > 2 ? n : -2;
}

/* One try of kpc_remote_get_value on c; an error reply's text in raw. */
static int get_value_once(kpc_remote *r, redisContext *c, int argc, const char **argv, const size_t *lens,
                          size_t max, char **out, size_t *len, const char **why, char *raw, size_t raw_cap,
                          bool *transport)
{
    raw[0] = '\0';
    *transport = true; /* until a reply's first bytes arrive */
    *out = NULL;
    *len = 0;
    pipe_guard g;
    pipe_block(&g);
    int done = 0;
    bool ok = redisAppendCommandArgv(c, argc, argv, lens) == REDIS_OK;
    while (ok && !done)
        ok = redisBufferWrite(c, &done) == REDIS_OK;
    int saved = errno;
    pipe_restore(&g);
    if (!ok) {
        said(r, c, NULL, saved, why, NULL, 0);
        return -1;
    }
    char head[BULK_HEAD];
    size_t have = 0;
    const char *eol = NULL;
    /* by hand only when hiredis holds no byte of a reply already (it never does: one
     * command at a time, and Redis sends nothing unasked) */
    if (c->reader->pos == c->reader->len) {
        while (eol == NULL && have < sizeof head && (have == 0 || head[0] == '$')) {
            ssize_t got = read(c->fd, head + have, sizeof head - have);
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0) {
                *why = read_failed(r, got);
                return -1;
            }
            have += (size_t)got;
            eol = memchr(head, '\n', have);
        }
    }
    *transport = false;
    long long n = eol ? bulk_length(head, eol) : -2;
    if (n == -1)
        return 0;
    if (n >= 0) {
        size_t body = have - (size_t)(eol + 1 - head); /* the string's bytes read with the header */
        if ((unsigned long long)n > max || body > (size_t)n + 2) {
            *why = body > (size_t)n + 2 ? "a malformed reply" : "a value larger than any record";
            return -1;
        }
        char *buf = malloc((size_t)n + 2); /* and its CRLF */
        if (buf == NULL) {
            *why = "out of memory";
            return -1;
        }
        memcpy(buf, eol + 1, body);
        const char *bad = read_full(r, c->fd, buf + body, (size_t)n + 2 - body);
        *transport = bad != NULL; /* cut short mid-value */
        if (bad == NULL && memcmp(buf + n, "\r\n", 2) != 0)
            bad = "a malformed reply";
        if (bad) {
            free(buf);
            *why = bad;
            return -1;
        }
        *out = buf;
        *len = (size_t)n;
        return 1;
    }
    /* anything else: hiredis's reader, with what was read */
    void *reply = NULL;
    if (have && redisReaderFeed(c->reader, head, have) != REDIS_OK) {
        *why = "a malformed reply";
        return -1;
    }
    pipe_block(&g);
    int rc = redisGetReply(c, &reply);
    saved = errno;
    pipe_restore(&g);
    redisReply *rep = said(r, c, rc == REDIS_OK ? reply : NULL, saved, why, raw, raw_cap);
    *transport = rc != REDIS_OK;
    if (rep == NULL)
        return -1;
    int got = 0;
    if (rep->type == REDIS_REPLY_STRING && rep->len <= max) {
        *out = rep->str; /* malloc'd by hiredis, which frees a NULL str as nothing */
        *len = rep->len;
        rep->str = NULL;
        got = 1;
    } else if (rep->type != REDIS_REPLY_NIL) {
        *why = "unexpected reply";
        got = -1;
    }
    freeReplyObject(rep);
    return got;
}

int kpc_remote_get_value(kpc_remote *r, struct kpc_remote_conn *cn, int argc, const char **argv,
                         const size_t *lens, size_t max, char **out, size_t *len, const char **why)
{
    kpc_route rt;
    kpc_remote_route_begin(&rt, argc, argv, lens);
    for (;;) {
        char raw[256] = "";
        *why = NULL;
        if (kpc_remote_route_conn(r, cn, &rt, why)) {
            bool transport;
            int got = get_value_once(r, cn->c, argc, argv, lens, max, out, len, why, raw, sizeof raw, &transport);
            if (got >= 0 || (!transport && raw[0] == '\0'))
                return got; /* a value, nil, or an answer no other node would change */
        }
        if (!kpc_remote_reroute(r, cn, &rt, raw[0] ? raw : NULL, why))
            return -1;
    }
}

redisReply *kpc_remote_eval(kpc_remote *r, struct kpc_remote_conn *cn, const char *script, int nkeys,
                            const char *const *keys, int nargs, const char *const *args, const size_t *arg_lens,
                            const char **why)
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
    return kpc_remote_command(r, cn, n, argv, lens, why);
}

/* AUTH and SELECT on a new connection. */
static bool introduce(kpc_remote *r, redisContext *c, const char **why)
{
    redisReply *rep;
    if (r->url.password[0]) {
        bool user = r->url.user[0] != '\0';
        const char *av[3] = {"AUTH", user ? r->url.user : r->url.password, r->url.password};
        size_t lv[3] = {4, strlen(av[1]), strlen(av[2])};
        if ((rep = said(r, c, kpc_remote_raw_command(c, user ? 3 : 2, av, lv), errno, why, NULL, 0)) == NULL)
            return false;
        freeReplyObject(rep);
    }
    if (r->url.db) {
        char db[16];
        snprintf(db, sizeof db, "%d", r->url.db);
        const char *av[2] = {"SELECT", db};
        size_t lv[2] = {6, strlen(db)};
        if ((rep = said(r, c, kpc_remote_raw_command(c, 2, av, lv), errno, why, NULL, 0)) == NULL)
            return false;
        freeReplyObject(rep);
    }
    return true;
}

redisContext *kpc_remote_connect_to(kpc_remote *r, const kpc_remote_addr *a, const char **why)
{
    static _Thread_local char err[200];
    if (kpc__sys_fault(KPC_SYS_CONNECT) != 0) {
        snprintf(err, sizeof err, "connect: %s", strerror(errno));
        *why = err;
        return NULL;
    }
    struct timeval tv = tv_ms(r->timeout_ms);
    pipe_guard g;
    pipe_block(&g);
    redisContext *c = a->port == 0 ? redisConnectUnixWithTimeout(r->url.unix_path, tv)
                                   : redisConnectWithTimeout(a->host, a->port, tv);
    pipe_restore(&g);
    if (c == NULL || c->err) {
        if (r->url.seeds > 1 || a->port != r->url.port || strcmp(a->host, r->url.host) != 0)
            snprintf(err, sizeof err, "connect to %.64s:%d: %.100s", a->host, a->port, c ? c->errstr : "out of memory");
        else
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
    if (!introduce(r, c, why)) {
        redisFree(c);
        return NULL;
    }
    return c;
}

void kpc_remote_sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* The host's connection slots to this server: abstract Unix socket names (Linux), which
 * one socket of the host (network namespace) at a time can be bound to, and which the
 * kernel frees when that socket is closed or its process dies: a killed process never
 * holds one. A name per host id and server, so that hosts sharing a network namespace
 * (containers with their own KPC_HOST_ID) have slots of their own. */
#define HOST_SLOTS 2
#define SLOT_WAIT_MS 250 /* past this the call goes ahead without a slot: never stuck on
                          * a stopped process that holds one */

/* A socket holding one of the host's slots, or -1 (none free within SLOT_WAIT_MS). */
static int slot_take(kpc_remote *r)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    char who[sizeof r->host_id + sizeof r->shown + 2];
    int len = snprintf(who, sizeof who, "%s\n%s", r->host_id, r->shown);
    unsigned long long h = XXH3_64bits(who, len > 0 ? (size_t)len : 0);
    uint64_t until = kpc__now_ns() + SLOT_WAIT_MS * 1000000ull;
    for (;;) {
        for (int i = 0; i < HOST_SLOTS; i++) {
            struct sockaddr_un a = {.sun_family = AF_UNIX};
            int n = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "kpc-remote-%016llx-%d", h, i);
            if (bind(fd, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)) == 0)
                return fd;
            if (errno != EADDRINUSE)
                break; /* no abstract sockets here: no slots */
        }
        if (errno != EADDRINUSE || kpc__now_ns() >= until) {
            close(fd);
            return -1;
        }
        kpc_remote_sleep_ms(1);
    }
}

/* A connection holding the host slot `slot` (or -1), pinned to one node or routed. */
static struct kpc_remote_conn *conn_open(kpc_remote *r, int slot, const kpc_remote_addr *pin, const char **why)
{
    struct kpc_remote_conn *cn = calloc(1, sizeof *cn);
    if (cn == NULL) {
        if (slot >= 0)
            close(slot);
        *why = "out of memory";
        return NULL;
    }
    cn->slot = slot;
    bool ok;
    if (pin) {
        cn->pinned = true;
        cn->at = *pin;
        ok = (cn->c = kpc_remote_connect_to(r, pin, why)) != NULL;
    } else { /* a server (or a cluster not known yet) is connected now, a cluster's node
              * when a command names its key */
        kpc_route none = {.slot = -1};
        ok = kpc_remote_is_cluster(r) || kpc_remote_route_conn(r, cn, &none, why);
    }
    if (!ok) {
        kpc_remote_conn_put(cn, true);
        return NULL;
    }
    return cn;
}

struct kpc_remote_conn *kpc_remote_conn_get(kpc_remote *r)
{
    const char *why = NULL;
    struct kpc_remote_conn *cn = conn_open(r, slot_take(r), NULL, &why);
    if (cn == NULL)
        kpc_remote_failed(r, "connect", why);
    return cn;
}

struct kpc_remote_conn *kpc_remote_conn_new(kpc_remote *r, const kpc_remote_addr *pin, const char **why)
{
    return conn_open(r, -1, pin, why);
}

void kpc_remote_close_context(redisContext *c, bool reset)
{
    if (c == NULL)
        return;
    if (reset && c->fd >= 0) { /* every reply read: nothing is lost by a reset */
        struct linger now = {.l_onoff = 1, .l_linger = 0};
        setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &now, sizeof now);
    }
    pipe_guard g;
    pipe_block(&g);
    redisFree(c);
    pipe_restore(&g);
}

void kpc_remote_conn_put(struct kpc_remote_conn *cn, bool broken)
{
    if (cn == NULL)
        return;
    kpc_remote_close_context(cn->c, !broken);
    if (cn->slot >= 0)
        close(cn->slot); /* after the connection: the next one may connect now */
    free(cn);
}
