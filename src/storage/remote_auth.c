/*
 * remote_auth.c - the cluster tier's secrets (remote_private.h): what makes a value in
 * Redis trustworthy, and whose keys are whose.
 *
 * A secret is a file of any length (`kpc remote keygen` writes one); the MAC key is its
 * hash. A record's value is its bytes, a random 16-byte nonce and a 16-byte Poly1305 tag
 * (libsodium crypto_onetimeauth) over the Redis key name, its NUL and the bytes, under a
 * one-time key: keyed BLAKE2b (crypto_generichash) of the nonce under the MAC key. A
 * record moved to another key, or altered, fails. Why not one MAC over the whole record
 * under the MAC key: HMAC-SHA-512-256 costs about 2.5 ns a byte (1.5 ms for a 590 KB
 * code object, most of a remote hit), keyed BLAKE2b about half that, Poly1305 about a
 * tenth; and Poly1305 is safe only when a key tags one message, which the nonce gives
 * (a nonce of 128 random bits repeats with no practical chance). Lease values are a few
 * dozen bytes: they carry a truncated HMAC-SHA-512-256 of the MAC key over the whole
 * value, the time its holder last heard from Redis included (remote.c: a lease's
 * freshness), so a lease written without the secret is ignored instead of waited on,
 * and an honest one written back later is honoured only while that time is recent.
 *
 * The group: hosts that share a secret share keys, and no others do. Every key starts
 * with "<namespace>:3:<group>:" (3: this value format; keys of another format are never
 * read) where the group is a hash of the MAC key (8 hex digits)
 * or "open" without a secret: two groups with different secrets on one Redis never
 * see each other's leases or records, so they never fight over a key.
 *
 * Freshness. A lease is honoured only while it is fresh, so that an honest value written back
 * later (a replay, with any expiry) cannot hold other hosts for KPC_BUILD_WAIT_MAX_MS.
 * Every extension re-signs the value with " at=MS lease=L": MS is Redis's own TIME as
 * the holder last heard it (in the reply to its claim, takeover or previous extension),
 * L its lease. The scripts that extend a lease and that answer a waiter read TIME on the
 * server that holds the key, so a waiter compares two readings of one clock, never its
 * own: it honours the value while Redis's TIME is at most 2 L past MS (an extension
 * runs before its lease lapses and re-signs with the time of the one before, so an
 * honest lease is never older than that). A value without "at" (a claim not yet
 * extended, or one written by a kpc from before this rule) is honoured only while its
 * expiry is at most a lease (the waiter's) away, as every such honest value is. Any
 * other is taken over (compare-and-set, counted in refused). A replay thus costs at most
 * about two lease periods.
 *
 * Rotation: KPC_REMOTE_SECRET_FILE=NEW:OLD writes and leases in NEW's group and also
 * reads records of OLD's group (checked with OLD), while hosts move over.
 *
 * The secret files are read by base/settings.c (kpc__secret_file_read: through the
 * fault seam, without blocking, regular files only, yours or root's, written by no one
 * else: docs/trust.md). One that cannot be used turns the tier off for the process, said
 * at error level: never serving unauthenticated records instead.
 */
#define _GNU_SOURCE
#include "storage/remote_private.h"
#include "base/fault.h"
#include "base/log.h"
#include "base/settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LEASE_MAC_BYTES 16

/* The MAC key of one secret file: its hash (a secret may be of any length). */
static kpc_status load_one(const char *path, uint8_t key[KPC_REMOTE_KEY_BYTES])
{
    void *buf = NULL;
    size_t size = 0;
    if (kpc__secret_file_read("KPC_REMOTE_SECRET_FILE", path, &buf, &size) != KPC_OK) {
        KPC_LOG(KPC_LOG_ERROR, "the cluster tier is off for this process: its secret cannot be used");
        return KPC_E_INVALID;
    }
    crypto_generichash(key, KPC_REMOTE_KEY_BYTES, buf, size, NULL, 0);
    sodium_memzero(buf, size);
    free(buf);
    return KPC_OK;
}

/* "<ns>:3:<group>:" of a MAC key (NULL: the open group). */
static void group_prefix(const char *ns, const uint8_t *key, char *out, size_t cap)
{
    char group[16] = "open";
    if (key) {
        uint8_t id[4];
        crypto_generichash(id, sizeof id, (const unsigned char *)"kpc key group", 13, key, KPC_REMOTE_KEY_BYTES);
        kpc__hex(id, sizeof id, group);
    }
    snprintf(out, cap, "%s:3:%s:", ns, group);
}

kpc_status kpc_remote_auth_load(kpc_remote *r, const char *files)
{
    r->has_secret = r->has_old = false;
    if (files && *files) {
        char paths[4096];
        snprintf(paths, sizeof paths, "%s", files);
        char *old = strchr(paths, ':');
        if (old)
            *old++ = '\0';
        /* each part named: "NEW:" or ":OLD" is a slip (an unset variable in "$NEW:$OLD"),
         * never a rotation that silently reads no old group */
        if (paths[0] == '\0' || (old && (*old == '\0' || strchr(old, ':')))) {
            KPC_LOG(KPC_LOG_ERROR, "KPC_REMOTE_SECRET_FILE=\"%.200s\" is not NEW or NEW:OLD (%s): the cluster "
                    "tier is off for this process", files, paths[0] == '\0' ? "no NEW secret before the colon"
                    : *old == '\0' ? "no OLD secret after the colon" : "more than one colon");
            return KPC_E_INVALID;
        }
        kpc_status s = load_one(paths, r->secret);
        if (s == KPC_OK && old)
            s = load_one(old, r->old_secret);
        if (s != KPC_OK)
            return s;
        r->has_secret = true;
        r->has_old = old != NULL;
    }
    group_prefix(r->ns, r->has_secret ? r->secret : NULL, r->prefix, sizeof r->prefix);
    if (r->has_old)
        group_prefix(r->ns, r->old_secret, r->old_prefix, sizeof r->old_prefix);
    return KPC_OK;
}

void kpc_remote_name(const kpc_remote *r, bool old, const kpc_key *key, const char *suffix, char *out, size_t cap)
{
    char hex[KPC_KEY_HEX];
    kpc__hex(key->bytes, sizeof key->bytes, hex);
    snprintf(out, cap, "%s{%s}:%s", old ? r->old_prefix : r->prefix, hex, suffix);
}

/* A record's tag: Poly1305 under the one-time key of its nonce. */
static void record_tag(const uint8_t key[KPC_REMOTE_KEY_BYTES], const uint8_t nonce[KPC_REMOTE_NONCE_BYTES],
                       const char *name, const void *bytes, size_t size, uint8_t tag[crypto_onetimeauth_BYTES])
{
    static const char label[] = "kpc record one-time key";
    uint8_t in[sizeof label + KPC_REMOTE_NONCE_BYTES], otk[crypto_onetimeauth_KEYBYTES];
    memcpy(in, label, sizeof label);
    memcpy(in + sizeof label, nonce, KPC_REMOTE_NONCE_BYTES);
    crypto_generichash(otk, sizeof otk, in, sizeof in, key, KPC_REMOTE_KEY_BYTES);
    crypto_onetimeauth_state st;
    crypto_onetimeauth_init(&st, otk);
    crypto_onetimeauth_update(&st, (const unsigned char *)name, strlen(name) + 1);
    crypto_onetimeauth_update(&st, bytes, size);
    crypto_onetimeauth_final(&st, tag);
    sodium_memzero(otk, sizeof otk);
    sodium_memzero(&st, sizeof st);
}

void *kpc_remote_seal(kpc_remote *r, const char *name, const void *bytes, size_t size, size_t *out_size)
{
    *out_size = size;
    if (!r->has_secret)
        return (void *)bytes;
    uint8_t *val = malloc(size + KPC_REMOTE_TRAILER_BYTES);
    if (val == NULL)
        return NULL;
    memcpy(val, bytes, size);
    uint8_t *nonce = val + size;
    randombytes_buf(nonce, KPC_REMOTE_NONCE_BYTES);
    record_tag(r->secret, nonce, name, bytes, size, nonce + KPC_REMOTE_NONCE_BYTES);
    *out_size = size + KPC_REMOTE_TRAILER_BYTES;
    return val;
}

const char *kpc_remote_open_value(kpc_remote *r, bool old, const char *name, const char *v, size_t len,
                                  size_t *size)
{
    *size = len;
    if (!r->has_secret)
        return NULL;
    if (len < KPC_REMOTE_TRAILER_BYTES)
        return "no authentication tag";
    size_t n = len - KPC_REMOTE_TRAILER_BYTES;
    const uint8_t *nonce = (const uint8_t *)v + n;
    uint8_t tag[crypto_onetimeauth_BYTES];
    record_tag(old ? r->old_secret : r->secret, nonce, name, v, n, tag);
    if (crypto_verify_16(tag, nonce + KPC_REMOTE_NONCE_BYTES) != 0)
        return "authentication tag does not match (written without the secret, or altered)";
    *size = n;
    return NULL;
}

static void lease_mac(const kpc_remote *r, const char *lease_name, const char *body, size_t n, char hex[2 * LEASE_MAC_BYTES + 1])
{
    uint8_t tag[crypto_auth_hmacsha512256_BYTES];
    crypto_auth_hmacsha512256_state st;
    crypto_auth_hmacsha512256_init(&st, r->secret, KPC_REMOTE_KEY_BYTES);
    crypto_auth_hmacsha512256_update(&st, (const unsigned char *)lease_name, strlen(lease_name) + 1);
    crypto_auth_hmacsha512256_update(&st, (const unsigned char *)body, n);
    crypto_auth_hmacsha512256_final(&st, tag);
    kpc__hex(tag, LEASE_MAC_BYTES, hex);
}

void kpc_remote_lease_value(kpc_remote *r, const char *lease_name, const char *token, uint64_t at_ms, char *out,
                            size_t cap)
{
    char fresh[33];
    if (token == NULL) {
        uint8_t rnd[16];
        randombytes_buf(rnd, sizeof rnd);
        kpc__hex(rnd, sizeof rnd, fresh);
        token = fresh;
    }
    int n = snprintf(out, cap, "host=%s pid=%d start=%llu token=%s", r->host_id, (int)getpid(),
                     (unsigned long long)r->start_time, token);
    if (at_ms && n > 0 && (size_t)n < cap)
        n += snprintf(out + n, cap - (size_t)n, " at=%llu lease=%u", (unsigned long long)at_ms, r->lease_ms);
    if (r->has_secret && n > 0 && (size_t)n < cap) {
        char mac[2 * LEASE_MAC_BYTES + 1];
        lease_mac(r, lease_name, out, (size_t)n, mac);
        snprintf(out + n, cap - (size_t)n, " mac=%s", mac);
    }
}

bool kpc_remote_lease_authentic(kpc_remote *r, const char *lease_name, const char *value)
{
    if (!r->has_secret)
        return true;
    const char *m = strstr(value, " mac=");
    if (m == NULL || strlen(m + 5) != 2 * LEASE_MAC_BYTES)
        return false;
    char want[2 * LEASE_MAC_BYTES + 1];
    lease_mac(r, lease_name, value, (size_t)(m - value), want);
    return sodium_memcmp(want, m + 5, 2 * LEASE_MAC_BYTES) == 0;
}

void kpc_remote_lease_resign(kpc_remote *r, const char *lease_name, const char *value, uint64_t at_ms, char *out,
                             size_t cap)
{
    char token[33] = "";
    const char *t = strstr(value, " token=");
    if (t)
        snprintf(token, sizeof token, "%.*s", (int)strcspn(t + 7, " "), t + 7);
    kpc_remote_lease_value(r, lease_name, token, at_ms, out, cap);
}

bool kpc_remote_lease_fresh(const kpc_remote *r, const char *value, long long pttl, long long now_ms)
{
    unsigned long long at = 0;
    unsigned lease = 0;
    const char *a = strstr(value, " at=");
    if (a && sscanf(a, " at=%llu lease=%u", &at, &lease) == 2 && at > 0)
        return now_ms <= 0 || (unsigned long long)now_ms <= at + 2ull * lease;
    return pttl >= 0 && pttl <= (long long)r->lease_ms;
}
