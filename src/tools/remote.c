/*
 * remote.c - `kpc remote keygen|stats|ls|prune|clear`: the cluster tier's secret and its
 * Redis, for an administrator (docs/cluster.md, "Operations"). Only the keys of this
 * group (KPC_REMOTE_NAMESPACE and the secret of KPC_REMOTE_SECRET_FILE) are touched.
 */
#define _GNU_SOURCE
#include "base/settings.h"
#include "storage/remote.h"
#include "tools/tool.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kpc_tool_remote_option(kpc_tool *t, int c, const char *arg)
{
    if (c == KPC_TOOL_OPT_MAX_IDLE)
        t->max_idle = arg;
    return kpc_tool_prometheus_option(t, c, arg);
}

static int open_remote(kpc_tool *t, kpc_remote **r)
{
    const char *url = kpc__setting_text(KPC_SET_REMOTE);
    if (!kpc_remote_built()) {
        fprintf(stderr, "kpc remote: this kpc was built without hiredis: no cluster tier\n");
        return KPC_TOOL_FAIL;
    }
    if (url == NULL)
        return kpc_tool_usage_error(t, "KPC_REMOTE is not set (redis://HOST[:PORT][/DB])");
    if (kpc_remote_open(url, r) != KPC_OK)
        return kpc_tool_usage_error(t, "the cluster tier cannot be opened with these settings "
                                       "(see the message above)");
    return KPC_TOOL_OK;
}

static void ls_row(const char *name, uint64_t size, long long ttl_ms, long long idle_s, void *arg)
{
    cJSON *rows = arg;
    if (rows) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "key", name);
        cJSON_AddNumberToObject(o, "size", (double)size);
        cJSON_AddNumberToObject(o, "ttl_ms", (double)ttl_ms);
        cJSON_AddNumberToObject(o, "idle_s", (double)idle_s);
        cJSON_AddItemToArray(rows, o);
        return;
    }
    char hs[16], ttl[32];
    kpc_tool_human(hs, sizeof hs, size);
    if (ttl_ms < 0)
        snprintf(ttl, sizeof ttl, "never");
    else
        snprintf(ttl, sizeof ttl, "%.1fd", (double)ttl_ms / 86400e3);
    printf("%-6s %-8s %-8llds %s\n", hs, ttl, idle_s, name);
}

static int stats(kpc_tool *t, kpc_remote *r)
{
    kpc_remote_server *node = NULL;
    int nodes = 0;
    kpc_remote_counters c;
    if (kpc_remote_server_info(r, &node, &nodes) != KPC_OK || kpc_remote_cluster_counters(r, &c) != KPC_OK) {
        fprintf(stderr, "kpc remote stats: %s cannot be asked (see the message above)\n", kpc_remote_describe(r));
        free(node);
        return KPC_TOOL_FAIL;
    }
    /* the whole: sums over the primaries (one server: its own figures) */
    kpc_remote_server sv = node[0];
    for (int i = 1; i < nodes; i++) {
        sv.keys += node[i].keys, sv.used_memory += node[i].used_memory, sv.maxmemory += node[i].maxmemory;
        sv.connected_clients += node[i].connected_clients, sv.maxclients += node[i].maxclients;
    }
    /* allkeys-lru on every primary: every key kpc writes may go (a record is rebuilt once),
     * and a volatile-* policy cannot evict records that never expire (KPC_REMOTE_TTL_S=0) */
    bool advise = false;
    for (int i = 0; i < nodes; i++)
        advise |= !node[i].maxmemory || strncmp(node[i].policy, "allkeys-", 8) != 0;
    if (t->prometheus) {
        /* cluster-wide: one host's collector is enough (docs/manual.md, "Metrics") */
        const char *labels[] = {"remote", kpc_remote_describe(r), "prefix", kpc_remote_prefix(r), NULL};
        const kpc_tool_metric m[] = {
            {"kpc_remote_records", false, "Records of this group in the Redis (all primaries).", sv.keys},
            {"kpc_remote_memory_used_bytes", false, "Memory the Redis uses (all its keys, all primaries).", sv.used_memory},
            {"kpc_remote_memory_limit_bytes", false, "The Redis's maxmemory (0: no limit).", sv.maxmemory},
            {"kpc_remote_clients", false, "Clients connected to the Redis.", sv.connected_clients},
            {"kpc_remote_clients_limit", false, "The Redis's maxclients.", sv.maxclients},
            {"kpc_remote_hits_total", true, "Records read from the cluster tier, cluster-wide.", c.hits},
            {"kpc_remote_misses_total", true, "Lookups the cluster tier did not have, cluster-wide.", c.misses},
            {"kpc_remote_builds_total", true, "Builds published to the cluster tier, cluster-wide.", c.builds},
            {"kpc_remote_waits_total", true, "Waits for another host's build, cluster-wide.", c.waits},
            {"kpc_remote_takeovers_total", true, "Builds taken over from a dead host, cluster-wide.", c.takeovers},
            {"kpc_remote_errors_total", true, "Errors talking to the Redis, cluster-wide.", c.errors},
            {"kpc_remote_refused_total", true, "Records refused (failed authentication), cluster-wide.", c.refused},
            {"kpc_remote_wait_timeouts_total", true, "Waits that ran out of time, cluster-wide.", c.wait_timeouts},
            {"kpc_remote_unserved_total", true, "Requests the tier did not serve (no secret, no trust), cluster-wide.",
             c.unserved}};
        free(node);
        return kpc_tool_prometheus(labels, m, sizeof m / sizeof m[0]);
    }
    if (t->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "url", kpc_remote_describe(r));
        cJSON_AddStringToObject(o, "prefix", kpc_remote_prefix(r));
        cJSON_AddStringToObject(o, "records_trust", kpc_remote_trust(r));
        cJSON_AddStringToObject(o, "redis_version", sv.version);
        cJSON_AddStringToObject(o, "maxmemory_policy", sv.policy);
        const struct { const char *k; uint64_t v; } f[] = {
            {"records", sv.keys}, {"used_memory", sv.used_memory}, {"maxmemory", sv.maxmemory},
            {"connected_clients", sv.connected_clients}, {"maxclients", sv.maxclients},
            {"hits", c.hits}, {"misses", c.misses}, {"builds", c.builds}, {"waits", c.waits},
            {"takeovers", c.takeovers}, {"errors", c.errors}, {"refused", c.refused},
            {"wait_timeouts", c.wait_timeouts}, {"unserved", c.unserved}};
        for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
            cJSON_AddNumberToObject(o, f[i].k, (double)f[i].v);
        cJSON *list = cJSON_AddArrayToObject(o, "primaries");
        for (int i = 0; i < nodes; i++) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddStringToObject(p, "node", node[i].node);
            cJSON_AddNumberToObject(p, "records", (double)node[i].keys);
            cJSON_AddNumberToObject(p, "used_memory", (double)node[i].used_memory);
            cJSON_AddNumberToObject(p, "maxmemory", (double)node[i].maxmemory);
            cJSON_AddStringToObject(p, "maxmemory_policy", node[i].policy);
            cJSON_AddNumberToObject(p, "connected_clients", (double)node[i].connected_clients);
            cJSON_AddItemToArray(list, p);
        }
        free(node);
        return kpc_tool_print_json(o);
    }
    char used[16], max[16];
    kpc_tool_human(used, sizeof used, sv.used_memory);
    kpc_tool_human(max, sizeof max, sv.maxmemory);
    printf("redis          %s (version %s)\nkeys           %s*\nrecords        %llu (%s)\n"
           "memory         %s of %s (maxmemory-policy %s)\nclients        %llu of %llu\n",
           kpc_remote_describe(r), sv.version, kpc_remote_prefix(r), (unsigned long long)sv.keys,
           kpc_remote_trust(r), used, sv.maxmemory ? max : "no limit", sv.policy,
           (unsigned long long)sv.connected_clients, (unsigned long long)sv.maxclients);
    for (int i = 0; nodes > 1 && i < nodes; i++) {
        kpc_tool_human(used, sizeof used, node[i].used_memory);
        kpc_tool_human(max, sizeof max, node[i].maxmemory);
        printf("primary        %s: %llu records, memory %s of %s (maxmemory-policy %s), %llu clients\n",
               node[i].node, (unsigned long long)node[i].keys, used, node[i].maxmemory ? max : "no limit",
               node[i].policy, (unsigned long long)node[i].connected_clients);
    }
    printf("cluster-wide   hits %llu, misses %llu, builds %llu, waits %llu, takeovers %llu, errors %llu, "
           "refused %llu, wait timeouts %llu, unserved %llu\n",
           (unsigned long long)c.hits, (unsigned long long)c.misses, (unsigned long long)c.builds,
           (unsigned long long)c.waits, (unsigned long long)c.takeovers, (unsigned long long)c.errors,
           (unsigned long long)c.refused, (unsigned long long)c.wait_timeouts, (unsigned long long)c.unserved);
    if (advise)
        printf("note           set maxmemory and maxmemory-policy allkeys-lru "
               "(docs/cluster.md, Setting up the Redis server)\n");
    free(node);
    return KPC_TOOL_OK;
}

int kpc_tool_remote(kpc_tool *t)
{
    const char *verb = t->operands[0];
    if (t->num_operands != 1)
        return kpc_tool_usage_error(t, "remote takes one of keygen, stats, ls, prune, clear");
    if (t->prometheus && strcmp(verb, "stats") != 0)
        return kpc_tool_usage_error(t, "--prometheus is for remote stats, not remote %s", verb);
    int rc = kpc_tool_prometheus_checked(t);
    if (rc != KPC_TOOL_OK)
        return rc;
    if (strcmp(verb, "keygen") == 0) {
        char secret[80];
        if (kpc_remote_keygen(secret, sizeof secret) != KPC_OK) {
            fprintf(stderr, "kpc remote keygen: this kpc was built without libsodium\n");
            return KPC_TOOL_FAIL;
        }
        printf("%s\n", secret);
        return KPC_TOOL_OK;
    }
    bool known = strcmp(verb, "stats") == 0 || strcmp(verb, "ls") == 0 || strcmp(verb, "prune") == 0 ||
                 strcmp(verb, "clear") == 0;
    if (!known)
        return kpc_tool_usage_error(t, "unknown remote command \"%s\" (keygen, stats, ls, prune, clear)", verb);
    uint64_t max_idle = 0;
    if (strcmp(verb, "prune") == 0) {
        if (t->max_idle == NULL)
            return kpc_tool_usage_error(t, "prune needs --max-idle SECONDS (a whole number)");
        if (kpc_tool_number(t, "--max-idle", t->max_idle, KPC_SETTING_SECONDS, 0, LLONG_MAX, &max_idle) != KPC_TOOL_OK)
            return KPC_TOOL_USAGE;
    }
    kpc_remote *r = NULL;
    rc = open_remote(t, &r);
    if (rc != KPC_TOOL_OK)
        return rc;
    kpc_status s = KPC_OK;
    uint64_t removed = 0;
    if (strcmp(verb, "stats") == 0)
        rc = stats(t, r);
    else if (strcmp(verb, "ls") == 0) {
        cJSON *rows = t->json ? cJSON_CreateArray() : NULL;
        s = kpc_remote_list(r, ls_row, rows);
        if (rows)
            rc = s == KPC_OK ? kpc_tool_print_json(rows) : (cJSON_Delete(rows), KPC_TOOL_FAIL);
    } else if (strcmp(verb, "prune") == 0) {
        if ((s = kpc_remote_prune(r, (long long)max_idle, &removed)) == KPC_OK)
            printf("removed %llu %s not read for %llu s\n", (unsigned long long)removed,
                   kpc_tool_plural(removed, "record", "records"), (unsigned long long)max_idle);
    } else if ((s = kpc_remote_clear(r, &removed)) == KPC_OK)
        printf("removed %llu %s under %s\n", (unsigned long long)removed, kpc_tool_plural(removed, "key", "keys"),
               kpc_remote_prefix(r));
    kpc_remote_close(r);
    if (s != KPC_OK)
        rc = KPC_TOOL_FAIL;
    return rc;
}
