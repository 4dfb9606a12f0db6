/*
 * remote.h - the cluster tier: records and build leases in a Redis server shared by the
 * hosts of a cluster (through hiredis), below the disk tree.
 *
 * On the storage seam it is the coordinating tier (kpc_remote_tier_open, in the table of
 * storage/tier.c), with begin, renew and finish and no read or write: only the process
 * holding a key's host claim calls begin for it (storage/claim.c), so Redis sees about
 * one request per key per host. The records are the disk record bytes
 * (storage/record.c's format, checked by its parser), with a keyed MAC appended when a
 * secret is configured. Protocol and guarantees: docs/cluster.md.
 *
 * Every call is bounded by the connect and command timeouts (on a Redis Cluster, plus
 * KPC_REMOTE_FAILOVER_MS while a dead primary's replica takes over: remote_slots.c);
 * after a failure the tier is off for this process for a back-off period (logged once
 * per period, counted), and
 * the caller goes on host-local. A build without hiredis compiles remote_stub.c instead
 * of remote.c and remote_tier.c: open answers KPC_E_UNAVAILABLE, the tier is absent, and
 * kpc_remote_built() is false.
 */
#ifndef KPC_STORAGE_REMOTE_H
#define KPC_STORAGE_REMOTE_H

#include "base/util.h"
#include "storage/record.h"
#include "storage/tier.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kpc_remote kpc_remote;
typedef struct kpc_remote_lease kpc_remote_lease;

/* One server's address: a name or an IP address (IPv6 without its brackets) and a port. */
typedef struct kpc_remote_addr {
    char host[256];
    int port;
} kpc_remote_addr;
#define KPC_REMOTE_SEEDS_MAX 16

/* redis://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/DB] or
 * redis+unix:///path/to/socket[?db=N]. Several addresses are seeds: any one of them that
 * answers serves (a standalone server, or a node of a Redis Cluster, whose other nodes
 * kpc then learns: remote_slots.c); host and port are the first's. */
typedef struct kpc_remote_url {
    char host[256];
    int port;
    kpc_remote_addr seed[KPC_REMOTE_SEEDS_MAX];
    int seeds;
    char unix_path[1024];
    char user[128];
    char password[256];
    int db;
} kpc_remote_url;
/* KPC_E_INVALID (logged, without the password) for a malformed URL. */
kpc_status kpc_remote_url_parse(const char *url, kpc_remote_url *out);
/* The same, its messages naming the URL's source `from` (kpc_remote_url_source). */
kpc_status kpc_remote_url_parse_from(const char *from, const char *url, kpc_remote_url *out);
/* The URL with the password replaced by "***": what logs and stats may show. */
void kpc_remote_url_redacted(const kpc_remote_url *u, char *out, size_t cap);

/* True when this build has the tier (hiredis and libsodium were found). */
bool kpc_remote_built(void);

/* Open the tier for url; reads KPC_REMOTE_TIMEOUT_MS (300), KPC_REMOTE_LEASE_MS (3000),
 * KPC_REMOTE_BACKOFF_MS (10000), KPC_REMOTE_SECRET_FILE (NEW[:OLD]), KPC_REMOTE_TRUST
 * (authenticated | unauthenticated), KPC_REMOTE_NAMESPACE (kpc), KPC_REMOTE_TTL_S (30 days;
 * 0: records never expire), KPC_BUILD_WAIT_MAX_MS, KPC_HOST_ID. Connects lazily.
 * KPC_E_INVALID (bad URL or value, or a secret file that cannot be read), KPC_E_UNAVAILABLE
 * (not built), KPC_E_NOMEM. */
kpc_status kpc_remote_open(const char *url, kpc_remote **out);
/* Flush this process's counters into the cluster-wide ones, disconnect, free. */
void kpc_remote_close(kpc_remote *r);
/* The redacted URL. */
const char *kpc_remote_describe(const kpc_remote *r);
/* This host's identity: KPC_HOST_ID, else hostname:boot id. */
const char *kpc_remote_host_id(const kpc_remote *r);
/* Whether records are authenticated, trusted without it, or not served: `kpc stats`. */
const char *kpc_remote_trust(const kpc_remote *r);
/* Without a secret and without KPC_REMOTE_TRUST=unauthenticated: say so (once per
 * process at the default log level), with the one line that makes a secret. */
void kpc_remote_say_unserved(kpc_remote *r);
/* "<namespace>:3:<group>:": every key of this group of hosts (those sharing its secret). */
const char *kpc_remote_prefix(const kpc_remote *r);
/* A new secret: 64 hex digits (cap >= 65). */
kpc_status kpc_remote_keygen(char *out, size_t cap);

enum kpc_remote_verdict {
    KPC_REMOTE_HIT = 1, /* rec: a checked code record */
    KPC_REMOTE_FAILED,  /* rec: a checked log record: the build failed on some host < 30 s ago */
    KPC_REMOTE_BUILD,   /* *lease is ours: compile, then kpc_remote_publish or _release */
    KPC_REMOTE_OFF,     /* the tier is off or just failed: go on host-local */
    KPC_REMOTE_BUSY,    /* kpc_remote_try_begin only: a live holder on another host has the
                         * lease; nothing is held */
};
/* Ask the cluster for key; waits while another host holds the lease (asking again now
 * and then, holding no connection meanwhile: remote.c), and takes the build over when
 * that lease expires or is released.
 * compiler_id (may be NULL: the key covers it) must match the record's; *waited (may be
 * NULL) tells whether it slept on another host's build. */
enum kpc_remote_verdict kpc_remote_begin(kpc_remote *r, const kpc_key *key, const char *target,
                                         const uint8_t *compiler_id, kpc_record *rec,
                                         kpc_remote_lease **lease, bool *waited);
/* The same without waiting: where another host's live lease holds the key it answers
 * KPC_REMOTE_BUSY at once (nothing held, no wait counted); a forged lease or one of a dead
 * process of this host is still taken over. For a caller with other keys to go on to. */
enum kpc_remote_verdict kpc_remote_try_begin(kpc_remote *r, const kpc_key *key, const char *target,
                                             const uint8_t *compiler_id, kpc_record *rec,
                                             kpc_remote_lease **lease);
/* Store the record bytes (storage/record.h: header, then payload) under the lease's key, a LOG record
 * for 30 s only, release the lease if still ours, wake the waiters; frees the lease.
 * The lease may be NULL (nothing held): the record is stored all the same. */
void kpc_remote_publish(kpc_remote *r, kpc_remote_lease *lease, const kpc_key *key, uint32_t kind,
                        const void *bytes, size_t size);
/* Renew the lease (compare-and-pexpire): KPC_OK (also while the tier is off: the lease
 * then expires by itself), KPC_E_NOT_FOUND when it was lost (expired and taken over),
 * KPC_E_UNAVAILABLE when Redis failed just now (logged). The holder must renew at least
 * every kpc_remote_renew_ns (a third of the lease) while it compiles. */
kpc_status kpc_remote_renew(kpc_remote *r, kpc_remote_lease *lease);
uint64_t kpc_remote_renew_ns(const kpc_remote *r);
/* Read a record without coordination (a process that holds no host claim): KPC_OK with
 * rec checked, KPC_E_NOT_FOUND, KPC_E_CORRUPT (refused, counted), KPC_E_UNAVAILABLE. */
kpc_status kpc_remote_read(kpc_remote *r, const kpc_key *key, const char *target,
                           const uint8_t *compiler_id, uint32_t kind, kpc_record *rec);
/* Give the lease up without a record (the compiler could not run); frees it. */
void kpc_remote_release(kpc_remote *r, kpc_remote_lease *lease);

typedef struct kpc_remote_counters {
    uint64_t hits, misses, builds, waits, takeovers, errors, refused;
    uint64_t wait_timeouts; /* waits on another host's lease cut at KPC_BUILD_WAIT_MAX_MS */
    uint64_t unserved;      /* requests the tier did not serve: no secret, no trust */
} kpc_remote_counters;
/* This process's counters. */
void kpc_remote_counters_get(kpc_remote *r, kpc_remote_counters *c);
/* The cluster-wide counters every process adds its own to when it closes the tier. */
kpc_status kpc_remote_cluster_counters(kpc_remote *r, kpc_remote_counters *c);

/* The URL a cache is configured with: kpc_config.remote, else KPC_REMOTE; NULL for none
 * ("" is none). */
const char *kpc_remote_url_configured(const kpc_config *cfg);
/* Where that URL comes from, for messages: "kpc_config.remote" or "KPC_REMOTE". */
const char *kpc_remote_url_source(const kpc_config *cfg);

/* The tier (storage/tier.h, remote_tier.c): KPC_E_NOT_FOUND when neither kpc_config.remote nor
 * KPC_REMOTE names a server (or this build has no hiredis: logged once). */
kpc_status kpc_remote_tier_open(const kpc_tier_env *env, kpc_tier **out);
/* The tier's remote, for the tests' view of its own counters; NULL for another tier or
 * NULL. Core never uses it: it reaches a tier only through the seam (storage/tier.h). */
kpc_remote *kpc_remote_tier_client(kpc_tier *t);

#define KPC_REMOTE_NAME_MAX 192 /* room for a Redis key name of the tier */
/* The Redis key of a kpc key: "<prefix>{<32 hex>}:<suffix>" (suffix co, log, lease, done). */
void kpc_remote_key_name(const kpc_remote *r, const kpc_key *key, const char *suffix, char *out, size_t cap);

/* `kpc remote` (remote_admin.c): the group's records, one call of fn each (name, size in
 * bytes, time to live in ms or -1 for none, seconds since last read); KPC_E_UNAVAILABLE
 * when Redis cannot be asked. */
typedef void (*kpc_remote_record_fn)(const char *name, uint64_t size, long long ttl_ms, long long idle_s, void *arg);
kpc_status kpc_remote_list(kpc_remote *r, kpc_remote_record_fn fn, void *arg);
/* Remove the group's records not read for max_idle_s seconds (and *removed of them). */
kpc_status kpc_remote_prune(kpc_remote *r, long long max_idle_s, uint64_t *removed);
/* Remove every key of the group: records, leases, counters. */
kpc_status kpc_remote_clear(kpc_remote *r, uint64_t *removed);
/* A server's figures for `kpc remote stats`: memory, its limit and policy, clients, and
 * the group's records on it. */
typedef struct kpc_remote_server {
    char node[280]; /* HOST:PORT, or the Unix socket's path */
    uint64_t used_memory, maxmemory, connected_clients, maxclients, keys;
    char policy[64], version[32];
} kpc_remote_server;
/* Those of the one server, or of every primary of a Redis Cluster (*out malloc'd, *count
 * of them). */
kpc_status kpc_remote_server_info(kpc_remote *r, kpc_remote_server **out, int *count);

#endif /* KPC_STORAGE_REMOTE_H */
