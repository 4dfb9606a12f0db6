/*
 * cluster_redis.c - a Redis Cluster of TC_NODES nodes on loopback ports for the cluster
 * tier's tests and benchmarks (cluster_support.h): made with redis-cli --cluster create,
 * probed, stopped pass or fail.
 */
#define _GNU_SOURCE
#include "cluster_support.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static tc_cluster *atexit_cluster;
static pid_t atexit_cluster_owner;

static void stop_cluster_at_exit(void)
{
    if (atexit_cluster && getpid() == atexit_cluster_owner)
        tc_cluster_stop(atexit_cluster);
}

/* One cluster node on a free port (and a free bus port), in dir; false when it did not
 * answer PING. */
static bool start_node(tc_redis *n, const char *dir)
{
    memset(n, 0, sizeof *n);
    snprintf(n->dir, sizeof n->dir, "%s", dir);
    n->port = tc_free_port();
    char busport[16], conf[320];
    snprintf(busport, sizeof busport, "%d", tc_free_port());
    snprintf(conf, sizeof conf, "%s/nodes-%d.conf", dir, n->port);
    const char *extra[] = {"--cluster-enabled", "yes", "--cluster-config-file", conf, "--cluster-port", busport,
                           "--cluster-node-timeout", "1000", "--repl-diskless-sync-delay", "0", NULL};
    return tc_redis_spawn(n, extra);
}

int tc_redis_cli(const char *const *args)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
            dup2(null, 2);
        }
        const char *argv[64] = {"redis-cli"};
        for (int i = 0; args[i] && i < 62; i++)
            argv[i + 1] = args[i];
        execvp("redis-cli", (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 255;
}

bool tc_cluster_start(tc_cluster *c, char *why, size_t cap)
{
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, "/tmp/kpc-rcluster-XXXXXX");
    if (mkdtemp(c->dir) == NULL) {
        snprintf(why, cap, "mkdtemp: %s", strerror(errno));
        return false;
    }
    atexit_cluster = c;
    atexit_cluster_owner = getpid();
    static bool registered;
    if (!registered)
        atexit(stop_cluster_at_exit), registered = true;
    for (int i = 0; i < TC_NODES; i++)
        if (!start_node(&c->node[i], c->dir)) {
            snprintf(why, cap, "redis-server did not start with --cluster-enabled yes --cluster-port "
                     "(no cluster mode, or older than Redis 7)");
            tc_cluster_stop(c);
            return false;
        }
    char addr[TC_NODES][32];
    const char *args[TC_NODES + 8] = {"--cluster", "create"};
    int n = 2;
    for (int i = 0; i < TC_NODES; i++) {
        snprintf(addr[i], sizeof addr[i], "127.0.0.1:%d", c->node[i].port);
        args[n++] = addr[i];
    }
    args[n++] = "--cluster-replicas";
    args[n++] = "1";
    args[n++] = "--cluster-yes";
    args[n] = NULL;
    int rc = tc_redis_cli(args);
    if (rc != 0 || !tc_cluster_await_ok(c, 30000)) {
        snprintf(why, cap, "redis-cli --cluster create failed (exit %d) or the cluster did not settle", rc);
        tc_cluster_stop(c);
        return false;
    }
    snprintf(c->url, sizeof c->url, "redis://127.0.0.1:%d", c->node[0].port);
    int at = snprintf(c->seeds, sizeof c->seeds, "redis://");
    for (int i = 0; i < TC_NODES; i++)
        at += snprintf(c->seeds + at, sizeof c->seeds - (size_t)at, "%s127.0.0.1:%d", i ? "," : "", c->node[i].port);
    return true;
}

void tc_cluster_stop(tc_cluster *c)
{
    for (int i = 0; i < TC_NODES; i++)
        if (c->node[i].pid > 0) {
            kill(c->node[i].pid, SIGKILL);
            while (waitpid(c->node[i].pid, NULL, 0) < 0 && errno == EINTR)
                ;
            c->node[i].pid = 0;
        }
    if (c->dir[0]) { /* the nodes' files, and a replica's copy of its primary's data */
        DIR *d = opendir(c->dir);
        for (struct dirent *e; d && (e = readdir(d)) != NULL;)
            if (e->d_name[0] != '.')
                unlinkat(dirfd(d), e->d_name, 0);
        if (d)
            closedir(d);
        rmdir(c->dir);
        c->dir[0] = '\0';
    }
    if (atexit_cluster == c)
        atexit_cluster = NULL;
}

/* A node's reply to a command (NULL when it does not answer). */
static redisReply *node_ask(const tc_redis *n, const char *cmd)
{
    if (n->pid <= 0)
        return NULL;
    redisContext *c = tc_redis_connect(n);
    redisReply *rep = c ? redisCommand(c, cmd) : NULL;
    if (c)
        redisFree(c);
    return rep;
}

/* Who serves each slot, as node i says: a text to compare (NULL: no answer). */
static char *slot_owners(const tc_cluster *c, int i)
{
    redisReply *rep = node_ask(&c->node[i], "CLUSTER SLOTS");
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY) {
        if (rep)
            freeReplyObject(rep);
        return NULL;
    }
    static const int most = 16384;
    int *owner = calloc(most, sizeof *owner);
    for (size_t e = 0; e < rep->elements; e++) {
        redisReply *r = rep->element[e];
        if (r->elements >= 3)
            for (long long s = r->element[0]->integer; s <= r->element[1]->integer && s < most; s++)
                owner[s] = (int)r->element[2]->element[1]->integer;
    }
    freeReplyObject(rep);
    char *text = malloc(most * 8 + 1);
    size_t at = 0;
    for (int s = 0; s < most; s++)
        at += (size_t)sprintf(text + at, "%d,", owner[s]);
    free(owner);
    return text;
}

bool tc_cluster_await_ok(const tc_cluster *c, int timeout_ms)
{
    int bad = -1;
    for (int waited = 0; waited < timeout_ms; waited += 50) {
        bool ok = true;
        int answering = 0;
        char *first = NULL;
        for (int i = 0; ok && i < TC_NODES; i++) {
            bad = i;
            if (c->node[i].pid <= 0)
                continue;
            redisReply *rep = node_ask(&c->node[i], "CLUSTER INFO");
            if (rep == NULL && waited > 0)
                continue; /* killed by a test (in another process, which reaped it) */
            answering++;
            ok = rep && rep->type == REDIS_REPLY_STRING && strstr(rep->str, "cluster_state:ok") != NULL;
            if (rep)
                freeReplyObject(rep);
            /* a replica that never synced cannot take over (its data is too old) */
            rep = ok ? node_ask(&c->node[i], "INFO replication") : NULL;
            ok = ok && rep && rep->type == REDIS_REPLY_STRING &&
                 (strstr(rep->str, "role:master") != NULL || strstr(rep->str, "master_link_status:up") != NULL);
            if (rep)
                freeReplyObject(rep);
            char *owners = ok ? slot_owners(c, i) : NULL;
            ok = owners != NULL && (first == NULL || strcmp(first, owners) == 0) &&
                 strstr(owners, ",0,") == NULL && strncmp(owners, "0,", 2) != 0;
            if (first == NULL)
                first = owners;
            else
                free(owners);
        }
        free(first);
        if (ok && answering >= TC_NODES / 2)
            return true;
        tc_sleep_ms(50);
    }
    redisReply *rep = bad >= 0 ? node_ask(&c->node[bad], "CLUSTER NODES") : NULL;
    fprintf(stderr, "the cluster did not settle: node %d (port %d) says:\n%s\n", bad, bad >= 0 ? c->node[bad].port : 0,
            rep && rep->type == REDIS_REPLY_STRING ? rep->str : "nothing");
    if (rep)
        freeReplyObject(rep);
    return false;
}

int tc_cluster_primaries(const tc_cluster *c, int *idx)
{
    int n = 0;
    for (int i = 0; i < TC_NODES; i++) {
        redisReply *rep = node_ask(&c->node[i], "ROLE");
        if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements > 0 && rep->element[0]->type == REDIS_REPLY_STRING &&
            strcmp(rep->element[0]->str, "master") == 0)
            idx[n++] = i;
        if (rep)
            freeReplyObject(rep);
    }
    return n;
}

int tc_cluster_owner(const tc_cluster *c, unsigned slot)
{
    for (int i = 0; i < TC_NODES; i++) {
        redisReply *rep = node_ask(&c->node[i], "CLUSTER SLOTS");
        if (rep == NULL)
            continue;
        int port = -1;
        for (size_t e = 0; rep->type == REDIS_REPLY_ARRAY && e < rep->elements; e++) {
            redisReply *r = rep->element[e];
            if (r->elements >= 3 && (long long)slot >= r->element[0]->integer && (long long)slot <= r->element[1]->integer)
                port = (int)r->element[2]->element[1]->integer;
        }
        freeReplyObject(rep);
        for (int j = 0; j < TC_NODES; j++)
            if (c->node[j].port == port)
                return j;
        return -1;
    }
    return -1;
}

/* Over the slot ranges node i serves, as the first live node says: their count, and
 * the lowest in *first (-1: none). */
static int slots_of(const tc_cluster *c, int i, int *first)
{
    *first = -1;
    for (int a = 0; a < TC_NODES; a++) {
        redisReply *rep = node_ask(&c->node[a], "CLUSTER SLOTS");
        if (rep == NULL)
            continue;
        long long n = 0;
        for (size_t e = 0; rep->type == REDIS_REPLY_ARRAY && e < rep->elements; e++) {
            redisReply *r = rep->element[e];
            if (r->elements < 3 || r->element[2]->element[1]->integer != c->node[i].port)
                continue;
            n += r->element[1]->integer - r->element[0]->integer + 1;
            if (*first < 0 || r->element[0]->integer < *first)
                *first = (int)r->element[0]->integer;
        }
        freeReplyObject(rep);
        return (int)n;
    }
    return 0;
}

int tc_cluster_slot_count(const tc_cluster *c, int i)
{
    int first;
    return slots_of(c, i, &first);
}

int tc_cluster_first_slot(const tc_cluster *c, int i)
{
    int first;
    slots_of(c, i, &first);
    return first;
}

long long tc_cluster_count(const tc_cluster *c, int i, const char *pattern)
{
    char cmd[160];
    snprintf(cmd, sizeof cmd, "KEYS %s", pattern);
    redisReply *rep = node_ask(&c->node[i], cmd);
    long long n = rep && rep->type == REDIS_REPLY_ARRAY ? (long long)rep->elements : -1;
    if (rep)
        freeReplyObject(rep);
    return n;
}

