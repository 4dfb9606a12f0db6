/*
 * remote_private.h - what the files of the cluster tier share (remote.h says what the
 * tier is): the handle, its counters, and the calls between its parts.
 *
 *   remote_slots.c  where a command goes: the server, or a Redis Cluster's slot map,
 *                   redirects (MOVED, ASK) and failovers
 *   remote_conn.c   connections: bounded connect and reply (hiredis timeouts), SIGPIPE,
 *                   the back-off, error replies said plainly, none kept while idle;
 *                   a record's value read straight into its own buffer
 *   remote_auth.c   the secrets: loading, the group's key prefix, record and lease MACs
 *   remote.c        the lease protocol: begin, publish, release, renew, read
 *   remote_open.c   settings, open and close, the counters (process and cluster-wide)
 *   remote_admin.c  what `kpc remote` does: list, prune and clear the group's keys
 *
 * Locks: none. A connection is its caller's alone, for one call (remote_conn.c);
 * everything else is set at open and read only, or atomic.
 */
#ifndef KPC_STORAGE_REMOTE_PRIVATE_H
#define KPC_STORAGE_REMOTE_PRIVATE_H

#include "storage/remote.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>

/* What follows a record's bytes in its value with a secret: its nonce and its tag. */
#define KPC_REMOTE_NONCE_BYTES 16
#define KPC_REMOTE_TRAILER_BYTES (KPC_REMOTE_NONCE_BYTES + crypto_onetimeauth_BYTES)
#define KPC_REMOTE_KEY_BYTES crypto_auth_hmacsha512256_KEYBYTES

/* This process's counters, in the order of kpc_remote_counters and of the cluster-wide
 * hash's field names (remote_open.c). */
enum { KPC_RC_HITS, KPC_RC_MISSES, KPC_RC_BUILDS, KPC_RC_WAITS, KPC_RC_TAKEOVERS, KPC_RC_ERRORS,
       KPC_RC_REFUSED, KPC_RC_WAIT_TIMEOUTS, KPC_RC_UNSERVED, KPC_RC_COUNT };

/* The warnings said at the default log level once per process (then at a lower one). */
enum { KPC_RW_DOWN, KPC_RW_REFUSED, KPC_RW_UNAUTHENTICATED, KPC_RW_LEASE, KPC_RW_COUNT };

struct kpc_remote_conn {
    redisContext *c;    /* NULL until a command needs it (on a cluster: its key's node) */
    int slot;           /* the host slot held while connected (remote_conn.c), or -1 */
    kpc_remote_addr at; /* the node c is connected to (host "": the Unix socket) */
    bool pinned;        /* one node's connection (`kpc remote`): commands go there */
};

/* One command's way to its node (remote_slots.c): its key's slot, the redirects it
 * followed, and how long it may still wait for a slot to settle or a failover. */
typedef struct kpc_route {
    int slot; /* -1: the command names no key */
    int hops;
    bool ask, asked;
    kpc_remote_addr ask_to;
    uint64_t retry_until, failover_until; /* CLOCK_MONOTONIC ns; 0: not yet */
} kpc_route;

struct kpc_remote {
    kpc_remote_url url;
    char shown[1600]; /* redacted URL */
    char host_id[320];
    unsigned timeout_ms, lease_ms, backoff_ms, wait_max_ms;
    unsigned failover_ms;          /* KPC_REMOTE_FAILOVER_MS: a cluster's replica promoted */
    struct kpc_remote_slots *slots; /* where commands go (remote_slots.c) */
    unsigned long long ttl_ms;   /* records expire unless used (0: never) */
    char ns[72];                 /* KPC_REMOTE_NAMESPACE */
    char prefix[160];            /* "<ns>:3:<group>:": every key of this group of hosts */
    char old_prefix[160];        /* the previous secret's group, while a rotation runs */
    bool has_secret, has_old, serve; /* serve: records are served (authenticated or trusted) */
    uint8_t secret[KPC_REMOTE_KEY_BYTES], old_secret[KPC_REMOTE_KEY_BYTES];
    uint64_t start_time; /* of this process, for lease values */
    _Atomic uint64_t off_until_ns; /* CLOCK_MONOTONIC; the tier is off before it */
    _Atomic uint64_t n[KPC_RC_COUNT];
};

static inline void kpc_remote_count(kpc_remote *r, int which)
{
    atomic_fetch_add_explicit(&r->n[which], 1, memory_order_relaxed);
}

/* ---- remote_conn.c ---- */
/* A warning at the default log level the first time of its kind in this process (not
 * per handle: a process that opens many caches says it once), at `later` after that. */
void kpc_remote_warn(kpc_remote *r, int kind, int later, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The tier failed: counted, said, and off for the back-off period. */
void kpc_remote_failed(kpc_remote *r, const char *what, const char *detail);
bool kpc_remote_on(kpc_remote *r);
void kpc_remote_sleep_ms(unsigned ms);
/* A connection for one call, made with one of the host's slots to this server (or
 * cluster) held (waiting a moment for one when all are taken); NULL after
 * kpc_remote_failed. Its commands go to their key's node (remote_slots.c). put closes
 * it (broken: it may be mid-reply) and frees the slot. */
struct kpc_remote_conn *kpc_remote_conn_get(kpc_remote *r);
void kpc_remote_conn_put(struct kpc_remote_conn *cn, bool broken);
/* The same without a host slot, for `kpc stats`'s cluster counters and `kpc remote`:
 * routed (pin NULL), or to the one node pin (connected now: NULL and *why when it
 * cannot be). */
struct kpc_remote_conn *kpc_remote_conn_new(kpc_remote *r, const kpc_remote_addr *pin, const char **why);
/* A new connection to one node (port 0: the URL's Unix socket), AUTH and SELECT sent;
 * NULL and *why on failure. close_context: reset (every reply read) or plain close. */
redisContext *kpc_remote_connect_to(kpc_remote *r, const kpc_remote_addr *a, const char **why);
void kpc_remote_close_context(redisContext *c, bool reset);
/* One command on c as it is: the reply (errors included) or NULL. */
redisReply *kpc_remote_raw_command(redisContext *c, int argc, const char **argv, const size_t *lens);
/* One command; NULL and *why on a transport error or an error reply (said plainly:
 * a redirect that could not be followed, a replica, a refused password). No command
 * blocks on the server: the socket's timeout (KPC_REMOTE_TIMEOUT_MS) is every reply's
 * deadline (on a cluster, a failover may add up to KPC_REMOTE_FAILOVER_MS). */
redisReply *kpc_remote_command(kpc_remote *r, struct kpc_remote_conn *cn, int argc, const char **argv,
                               const size_t *lens, const char **why);
/* One command whose reply is a string or nil (GET, GETEX): 1 and the string in *out
 * (malloc'd, *len bytes; read straight into it: remote_conn.c), 0 for nil, -1 and *why on
 * a transport error, an error reply or a string over max bytes. */
int kpc_remote_get_value(kpc_remote *r, struct kpc_remote_conn *cn, int argc, const char **argv,
                         const size_t *lens, size_t max, char **out, size_t *len, const char **why);
/* EVAL script with keys and args (strings; lens NULL: strlen). */
redisReply *kpc_remote_eval(kpc_remote *r, struct kpc_remote_conn *cn, const char *script, int nkeys,
                            const char *const *keys, int nargs, const char *const *args, const size_t *arg_lens,
                            const char **why);

/* ---- remote_slots.c ---- */
kpc_status kpc_remote_slots_new(kpc_remote *r);
void kpc_remote_slots_free(kpc_remote *r);
/* A key's hash slot (CRC16 of its hash tag, modulo 16384). */
unsigned kpc_remote_slot(const char *name, size_t len);
/* Whether the tier has learned that it talks to a Redis Cluster. */
bool kpc_remote_is_cluster(kpc_remote *r);
/* A command's route, before its first try. */
void kpc_remote_route_begin(kpc_route *rt, int argc, const char **argv, const size_t *lens);
/* cn connected to the node the command goes to now: false and *why when it cannot be. */
bool kpc_remote_route_conn(kpc_remote *r, struct kpc_remote_conn *cn, kpc_route *rt, const char **why);
/* The command failed with the error reply err (NULL: no reply, or no connection): true
 * when it should go again (a redirect followed, a slot settled, a failover done). */
bool kpc_remote_reroute(kpc_remote *r, struct kpc_remote_conn *cn, kpc_route *rt, const char *err,
                        const char **why);
/* The primaries (every node that serves a slot), or the one server: malloc'd. */
kpc_status kpc_remote_primaries(kpc_remote *r, kpc_remote_addr **out, int *count);

/* ---- remote_auth.c ---- */
/* Load KPC_REMOTE_SECRET_FILE ("NEW" or "NEW:OLD", each a file of any length of
 * secret); set the key prefixes of the group. */
kpc_status kpc_remote_auth_load(kpc_remote *r, const char *files);
/* The value as stored under name: bytes with a nonce and their tag appended (malloc'd)
 * when there is a secret, else bytes themselves; NULL when out of memory. */
void *kpc_remote_seal(kpc_remote *r, const char *name, const void *bytes, size_t size, size_t *out_size);
/* The bytes of a value read from name under prefix (the current or the old group): NULL
 * and *why when it does not authenticate (a group with a secret). */
const char *kpc_remote_open_value(kpc_remote *r, bool old, const char *name, const char *v, size_t len,
                                  size_t *size);
/* A lease value: "host=H pid=P start=T token=R" (token NULL: a new random one), then
 * " at=MS lease=L" when at_ms is not 0 (Redis's TIME in ms as its holder last heard it,
 * and the holder's KPC_REMOTE_LEASE_MS: remote.c, a lease's freshness), then, with a
 * secret, " mac=M" over all of it and the lease's name. */
void kpc_remote_lease_value(kpc_remote *r, const char *lease_name, const char *token, uint64_t at_ms, char *out,
                            size_t cap);
/* value (a lease value of this process) with the same token, re-signed at at_ms. */
void kpc_remote_lease_resign(kpc_remote *r, const char *lease_name, const char *value, uint64_t at_ms, char *out,
                             size_t cap);
/* Whether a waiter honours an authentic lease value (the freshness rule of
 * remote_auth.c): pttl its remaining time and now_ms Redis's TIME, read with it (0: not
 * known, an older server's reply). */
bool kpc_remote_lease_fresh(const kpc_remote *r, const char *value, long long pttl, long long now_ms);
/* True when a lease value found under lease_name was written by a member of the group
 * (always, without a secret: nothing to check). */
bool kpc_remote_lease_authentic(kpc_remote *r, const char *lease_name, const char *value);

/* The key of kpc key `key` with suffix under the current (old: previous) group. */
void kpc_remote_name(const kpc_remote *r, bool old, const kpc_key *key, const char *suffix, char *out, size_t cap);

#endif /* KPC_STORAGE_REMOTE_PRIVATE_H */
