/*
 * remote_stub.c - the cluster tier in a build without hiredis or libsodium: absent.
 * kpc_remote_built() is false (`kpc stats` says "not built"), the tier's open answers
 * KPC_E_NOT_FOUND (logged once when KPC_REMOTE asks for it), and every call is a no-op.
 */
#include "storage/remote.h"
#include "base/log.h"

#include <stdatomic.h>
#include <string.h>

bool kpc_remote_built(void) { return false; }
kpc_status kpc_remote_open(const char *url, kpc_remote **out)
{
    (void)url;
    *out = NULL;
    return KPC_E_UNAVAILABLE;
}
void kpc_remote_close(kpc_remote *r) { (void)r; }
const char *kpc_remote_describe(const kpc_remote *r) { (void)r; return "not built"; }
const char *kpc_remote_host_id(const kpc_remote *r) { (void)r; return ""; }
enum kpc_remote_verdict kpc_remote_begin(kpc_remote *r, const kpc_key *key, const char *target,
                                         const uint8_t *compiler_id, kpc_record *rec,
                                         kpc_remote_lease **lease, bool *waited_out)
{
    (void)r, (void)key, (void)target, (void)compiler_id, (void)rec;
    *lease = NULL;
    if (waited_out)
        *waited_out = false;
    return KPC_REMOTE_OFF;
}
enum kpc_remote_verdict kpc_remote_try_begin(kpc_remote *r, const kpc_key *key, const char *target,
                                             const uint8_t *compiler_id, kpc_record *rec,
                                             kpc_remote_lease **lease)
{
    return kpc_remote_begin(r, key, target, compiler_id, rec, lease, NULL);
}
void kpc_remote_publish(kpc_remote *r, kpc_remote_lease *lease, const kpc_key *key, uint32_t kind,
                        const void *bytes, size_t size)
{
    (void)r, (void)lease, (void)key, (void)kind, (void)bytes, (void)size;
}
void kpc_remote_release(kpc_remote *r, kpc_remote_lease *lease) { (void)r, (void)lease; }
kpc_status kpc_remote_renew(kpc_remote *r, kpc_remote_lease *lease)
{
    (void)r, (void)lease;
    return KPC_E_UNAVAILABLE;
}
uint64_t kpc_remote_renew_ns(const kpc_remote *r)
{
    (void)r;
    return 0;
}
kpc_status kpc_remote_read(kpc_remote *r, const kpc_key *key, const char *target,
                           const uint8_t *compiler_id, uint32_t kind, kpc_record *rec)
{
    (void)r, (void)key, (void)target, (void)compiler_id, (void)kind;
    memset(rec, 0, sizeof *rec);
    return KPC_E_UNAVAILABLE;
}
void kpc_remote_counters_get(kpc_remote *r, kpc_remote_counters *c) { (void)r; memset(c, 0, sizeof *c); }
kpc_status kpc_remote_cluster_counters(kpc_remote *r, kpc_remote_counters *c)
{
    (void)r;
    memset(c, 0, sizeof *c);
    return KPC_E_UNAVAILABLE;
}
kpc_status kpc_remote_tier_open(const kpc_tier_env *env, kpc_tier **out)
{
    *out = NULL;
    static atomic_flag said = ATOMIC_FLAG_INIT;
    if (kpc_remote_url_configured(env->cfg) != NULL && !atomic_flag_test_and_set(&said))
        KPC_LOG(KPC_LOG_WARN, "KPC_REMOTE is set but this kpc was built without hiredis: no remote tier");
    return KPC_E_NOT_FOUND;
}
kpc_remote *kpc_remote_tier_client(kpc_tier *t)
{
    (void)t;
    return NULL;
}
const char *kpc_remote_trust(const kpc_remote *r)
{
    (void)r;
    return "not built";
}
void kpc_remote_say_unserved(kpc_remote *r) { (void)r; }
const char *kpc_remote_prefix(const kpc_remote *r)
{
    (void)r;
    return "";
}
kpc_status kpc_remote_keygen(char *out, size_t cap)
{
    (void)out, (void)cap;
    return KPC_E_UNAVAILABLE;
}
void kpc_remote_key_name(const kpc_remote *r, const kpc_key *key, const char *suffix, char *out, size_t cap)
{
    (void)r, (void)key, (void)suffix;
    if (cap)
        out[0] = '\0';
}
kpc_status kpc_remote_list(kpc_remote *r, kpc_remote_record_fn fn, void *arg)
{
    (void)r, (void)fn, (void)arg;
    return KPC_E_UNAVAILABLE;
}
kpc_status kpc_remote_prune(kpc_remote *r, long long max_idle_s, uint64_t *removed)
{
    (void)r, (void)max_idle_s;
    *removed = 0;
    return KPC_E_UNAVAILABLE;
}
kpc_status kpc_remote_clear(kpc_remote *r, uint64_t *removed)
{
    (void)r;
    *removed = 0;
    return KPC_E_UNAVAILABLE;
}
kpc_status kpc_remote_server_info(kpc_remote *r, kpc_remote_server **out, int *count)
{
    (void)r;
    *out = NULL;
    *count = 0;
    return KPC_E_UNAVAILABLE;
}
