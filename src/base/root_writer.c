/*
 * root_writer.c - what a name under the cache says of the processes behind it. A staging
 * file under v1/tmp carries its writer's domain (the node, this boot, and its pid
 * namespace), pid and start time, so that a sweep can tell a dead writer's file from a
 * live one's (base/root.h), also on a cache directory that several nodes or containers
 * share; the host index's segment is named per pid namespace.
 */
#define _GNU_SOURCE
#include "base/root.h"
#include "base/root_private.h"
#include "base/hash.h"
#include "base/util.h"

#include <bsd/string.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

/* This process's pid namespace (the device and inode of /proc/self/ns/pid), hashed: 0
 * where it cannot be known. */
static uint64_t pid_namespace(void)
{
    uint64_t ns[2] = {0, 0};
    struct stat st;
    if (stat("/proc/self/ns/pid", &st) == 0) { /* bare: not kpc's file */
        ns[0] = (uint64_t)st.st_dev;
        ns[1] = (uint64_t)st.st_ino;
    }
    return ns[1] ? XXH3_64bits(ns, sizeof ns) : 0;
}

/* Where this process's pids mean something: XXH3-64 of the kernel's boot id (the node,
 * this boot; its host name where there is no boot id) and of its pid namespace. Nodes
 * that share a cache directory, and containers of one node that do not share their pids,
 * have different domains. */
static uint64_t writer_domain(void)
{
    char node[128];
    size_t n = kpc__boot_id(node, sizeof node);
    struct utsname u;
    if (n == 0 && uname(&u) == 0) {
        strlcpy(node, u.nodename, sizeof node);
        n = strlen(node);
    }
    return XXH3_64bits_withSeed(node, n, pid_namespace());
}

/* This process's domain and start time, computed once per process. */
static void this_writer(kpc_root *r, int *pid, uint64_t *start, uint64_t *domain)
{
    *pid = (int)getpid();
    *start = atomic_load(&r->tmp_start);
    *domain = atomic_load(&r->tmp_domain);
    if (atomic_load(&r->tmp_pid) != *pid || *start == 0) {
        *start = kpc__proc_start_time(*pid);
        *domain = writer_domain();
        atomic_store(&r->tmp_start, *start);
        atomic_store(&r->tmp_domain, *domain);
        atomic_store(&r->tmp_pid, *pid);
    }
}

int kpc_root_tmp_path(kpc_root *r, const kpc_key *key, char *out, size_t cap)
{
    char hex[KPC_KEY_HEX];
    kpc__hex(key->bytes, sizeof key->bytes, hex);
    int pid;
    uint64_t start, domain;
    this_writer(r, &pid, &start, &domain);
    int n = snprintf(out, cap, "%s/%s.%016llx.%d.%llu.%u.tmp", r->tmp, hex, (unsigned long long)domain, pid,
                     (unsigned long long)start, atomic_fetch_add(&r->tmp_seq, 1));
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

static bool all_hex(const char *s, int n)
{
    for (int i = 0; i < n; i++)
        if (kpc__hex_digit(s[i]) < 0)
            return false;
    return true;
}

enum kpc_tmp_writer kpc_root_tmp_writer(kpc_root *r, const char *name, int *pid, uint64_t *start)
{
    /* <32 hex>.<16 hex>.<pid>.<start>.<seq>.tmp, every part whole */
    size_t len = strlen(name);
    if (len < 50 || name[32] != '.' || name[49] != '.' || strcmp(name + len - 4, ".tmp") != 0 ||
        !all_hex(name, 32) || !all_hex(name + 33, 16))
        return KPC_TMP_UNKNOWN;
    const char *p = name + 50;
    char *end;
    unsigned long long v[3];
    for (int i = 0; i < 3; i++) {
        if (*p < '0' || *p > '9')
            return KPC_TMP_UNKNOWN;
        errno = 0;
        v[i] = strtoull(p, &end, 10);
        if (errno != 0 || *end != '.')
            return KPC_TMP_UNKNOWN;
        p = end + 1;
    }
    if (p != name + len - 3 || v[0] == 0 || v[0] > INT_MAX)
        return KPC_TMP_UNKNOWN;
    int me;
    uint64_t my_start, domain;
    this_writer(r, &me, &my_start, &domain);
    char mine[17];
    snprintf(mine, sizeof mine, "%016llx", (unsigned long long)domain);
    if (memcmp(name + 33, mine, 16) != 0)
        return KPC_TMP_FOREIGN;
    *pid = (int)v[0];
    *start = v[1];
    return KPC_TMP_OURS;
}

void kpc_root_segment_name(const char *root_path, char *out, size_t cap)
{
    /* the pid namespace too: the index judges its builders and attached processes by pid,
     * and a pid of another namespace names another process or none here, so processes
     * that share /dev/shm but not their pids (containers of one pod) keep an index each */
    snprintf(out, cap, "/kpc-%u-%016llx", (unsigned)geteuid(),
             (unsigned long long)XXH3_64bits_withSeed(root_path, strlen(root_path), pid_namespace()));
}
