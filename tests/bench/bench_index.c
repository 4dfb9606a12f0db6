/*
 * bench_index.c - figure 4: the host index at scale.
 *
 * For tables of about 1k, 64k and 1M entries (a segment of capacity N, the default
 * layout: 2N slots of 64 bytes, so 128 KB, 8 MB and 128 MB), the latency of
 *   lookup   kpc_index_begin on a key that is READY (random keys of the table)
 *   claim    kpc_index_begin on a new key, with room in the table (BUILD); the claimed
 *            keys are abandoned again after each timed batch, untimed
 *   evict    kpc_index_begin on a new key in a full table: one sampled-LRU eviction
 *            plus the claim; the claims are published READY after each batch, untimed
 * each the median over --rounds batches of B operations (after one warm-up batch), in
 * one process through the library's own index API. The goal is flatness: each figure at
 * 1M within 1.5x of the same figure at 1k. Random lookups in a 128 MB table miss every
 * cache level, so the memory's own latency is measured beside them (a dependent random
 * read over a buffer of the table's size): it is the part no index design removes.
 *
 * usage: bench_index [--sizes 1024,65536,1048576] [--rounds N] [--batch B]
 */
#define _GNU_SOURCE
#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

static int rounds = 21;
static size_t batch = 256;

static void make_key(uint64_t seq, uint64_t salt, kpc_key *k)
{
    XXH128_hash_t h = XXH3_128bits_withSeed(&seq, sizeof seq, salt);
    memcpy(k->bytes, &h.low64, 8);
    memcpy(k->bytes + 8, &h.high64, 8);
}

/* splitmix64: the random order of the lookups */
static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void begin(kpc_index *ix, const kpc_key *k, enum kpc_index_verdict want)
{
    enum kpc_index_verdict v;
    bool waited;
    if (kpc_index_begin(ix, k, 0, &v, &waited) != KPC_OK || v != want)
        bn_die("kpc_index_begin: unexpected answer %d (wanted %d)", (int)v, (int)want);
}

static void claim_publish(kpc_index *ix, const kpc_key *k)
{
    begin(ix, k, KPC_INDEX_BUILD);
    kpc_index_publish(ix, k, true, 16384);
}

/* A dependent random walk over `bytes` of memory: ns per read (the DRAM/TLB floor of a
 * random lookup in a table that large). */
static double memory_latency(size_t bytes)
{
    size_t n = bytes / 64;
    uint32_t *next = malloc(n * 64);
    if (next == NULL)
        bn_die("out of memory");
    /* one cycle through every line, in a random order (Sattolo's algorithm) */
    uint32_t *perm = malloc(n * sizeof *perm);
    if (perm == NULL)
        bn_die("out of memory");
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    uint64_t s = 42;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = rnd(&s) % i;
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (size_t i = 0; i < n; i++)
        next[(size_t)perm[i] * 16] = perm[(i + 1) % n];
    free(perm);
    double v[9];
    uint32_t at = 0;
    size_t steps = 200000;
    for (int r = 0; r < 9; r++) {
        uint64_t t0 = bn_now_ns();
        for (size_t i = 0; i < steps; i++)
            at = next[(size_t)at * 16];
        v[r] = (double)(bn_now_ns() - t0) / (double)steps;
    }
    volatile uint32_t sink = at;
    (void)sink;
    free(next);
    return bn_median(v + 1, 8);
}

typedef struct scale_result {
    double lookup, claim, evict, mem;
} scale_result;

static void run_size(size_t n, scale_result *out)
{
    char root[128];
    snprintf(root, sizeof root, "/kpc-bench-index-%d-%zu", (int)getpid(), n);
    kpc_index_unlink(root);
    kpc_index *ix = NULL;
    if (kpc_index_open(root, n, false, &ix) != KPC_OK)
        bn_die("kpc_index_open(%zu entries) failed (is /dev/shm large enough?)", n);
    size_t b = batch < n / 4 ? batch : n / 4;
    size_t filled = n - b; /* room for one batch of claims */
    uint64_t t0 = bn_now_ns();
    for (size_t i = 0; i < filled; i++) {
        kpc_key k;
        make_key(i, 1, &k);
        claim_publish(ix, &k);
    }
    bn_say("index: %zu entries filled in %.2f s", filled, (double)(bn_now_ns() - t0) / 1e9);

    kpc_key *keys = malloc(b * sizeof *keys);
    double *v = calloc((size_t)rounds + 1, sizeof *v);
    if (keys == NULL || v == NULL)
        bn_die("out of memory");
    uint64_t seed = n, fresh = 1ull << 40;

    /* lookups: READY keys in a random order */
    for (int r = 0; r <= rounds; r++) {
        for (size_t i = 0; i < b; i++)
            make_key(rnd(&seed) % filled, 1, &keys[i]);
        uint64_t s = bn_now_ns();
        for (size_t i = 0; i < b; i++)
            begin(ix, &keys[i], KPC_INDEX_READY);
        v[r] = (double)(bn_now_ns() - s) / (double)b;
    }
    out->lookup = bn_median(v + 1, (size_t)rounds);

    /* claims with room: a batch of new keys, then abandoned again (untimed) */
    for (int r = 0; r <= rounds; r++) {
        for (size_t i = 0; i < b; i++)
            make_key(fresh++, 2, &keys[i]);
        uint64_t s = bn_now_ns();
        for (size_t i = 0; i < b; i++)
            begin(ix, &keys[i], KPC_INDEX_BUILD);
        v[r] = (double)(bn_now_ns() - s) / (double)b;
        for (size_t i = 0; i < b; i++)
            kpc_index_abandon(ix, &keys[i]);
    }
    out->claim = bn_median(v + 1, (size_t)rounds);

    /* a full table: every claim evicts one finished entry first */
    for (size_t i = filled; i < n; i++) {
        kpc_key k;
        make_key(i, 1, &k);
        claim_publish(ix, &k);
    }
    kpc_index_counters c0, c1;
    kpc_index_counters_get(ix, &c0);
    if (c0.entries != n)
        bn_die("the table holds %llu entries, not %zu", (unsigned long long)c0.entries, n);
    for (int r = 0; r <= rounds; r++) {
        for (size_t i = 0; i < b; i++)
            make_key(fresh++, 3, &keys[i]);
        uint64_t s = bn_now_ns();
        for (size_t i = 0; i < b; i++)
            begin(ix, &keys[i], KPC_INDEX_BUILD);
        v[r] = (double)(bn_now_ns() - s) / (double)b;
        for (size_t i = 0; i < b; i++)
            kpc_index_publish(ix, &keys[i], true, 16384);
    }
    out->evict = bn_median(v + 1, (size_t)rounds);
    kpc_index_counters_get(ix, &c1);
    if (c1.evictions - c0.evictions != (uint64_t)(rounds + 1) * b)
        bn_die("expected %zu evictions, counted %llu", (size_t)(rounds + 1) * b,
               (unsigned long long)(c1.evictions - c0.evictions));
    if (!kpc_index_check(ix))
        bn_die("the table failed its consistency check");
    kpc_index_close(ix);
    kpc_index_unlink(root);
    free(keys);
    free(v);
    /* the segment's slot area: 2n slots (the next power of two) of 64 bytes */
    size_t slots = 16;
    while (slots < 2 * n)
        slots <<= 1;
    out->mem = memory_latency(slots * 64);
}

static int parse_sizes(const char *s, size_t *out, int max)
{
    int n = 0;
    for (char *end; *s && n < max; s = *end ? end + 1 : end)
        out[n++] = (size_t)strtoull(s, &end, 10);
    return n;
}

static void size_name(size_t n, char *out, size_t cap)
{
    if (n >= 1000000)
        snprintf(out, cap, "%zuM", (n + 500000) / 1000000);
    else if (n >= 1000)
        snprintf(out, cap, "%zuk", (n + 500) / 1000);
    else
        snprintf(out, cap, "%zu", n);
}

int main(int argc, char **argv)
{
    size_t sizes[8] = {1000, 64000, 1000000};
    int nsizes = 3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc)
            nsizes = parse_sizes(argv[++i], sizes, 8);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc)
            batch = (size_t)atol(argv[++i]);
        else
            bn_die("usage: bench_index [--sizes 1000,64000,1000000] [--rounds N] [--batch B]");
    }
    if (rounds < 1 || batch < 1 || nsizes < 1)
        bn_die("bad --rounds, --batch or --sizes");
    for (int i = 0; i < nsizes; i++)
        if (sizes[i] < 64 || sizes[i] > (1u << 25))
            bn_die("index sizes run from 64 to %u entries", 1u << 25);

    scale_result *res = calloc((size_t)nsizes, sizeof *res);
    for (int i = 0; i < nsizes; i++)
        run_size(sizes[i], &res[i]);

    static const char *const what[] = {"lookup (READY)", "claim (new key)", "claim in a full table (evicts one)"};
    static const char *const ids[] = {"lookup", "claim", "evict"};
    char base[16];
    size_name(sizes[0], base, sizeof base);
    for (int m = 0; m < 3; m++) {
        for (int i = 0; i < nsizes; i++) {
            double val = m == 0 ? res[i].lookup : m == 1 ? res[i].claim : res[i].evict;
            double ref = m == 0 ? res[0].lookup : m == 1 ? res[0].claim : res[0].evict;
            char sz[16], id[48], fig[96], v[32], r[32], refname[64], ratio[16];
            size_name(sizes[i], sz, sizeof sz);
            snprintf(id, sizeof id, "index_%s_%zu", ids[m], sizes[i]);
            snprintf(fig, sizeof fig, "4 index %s, %s entries", what[m], sz);
            bn_fmt_time(v, sizeof v, val / 1e9);
            bn_fmt_time(r, sizeof r, ref / 1e9);
            snprintf(refname, sizeof refname, "the same at %s entries", base);
            snprintf(ratio, sizeof ratio, "%.2fx", val / ref);
            bn_row(id, fig, v, refname, r, ratio, "<= 1.5x (flat)", val <= 1.5 * ref, val, "ns");
        }
    }
    /* context: the memory latency that random lookups in a large table pay */
    for (int i = 0; i < nsizes; i++) {
        char sz[16], id[48], fig[96], v[32], r[32], ratio[16];
        size_name(sizes[i], sz, sizeof sz);
        snprintf(id, sizeof id, "index_memory_%zu", sizes[i]);
        snprintf(fig, sizeof fig, "4 random read over the slots of %s", sz);
        bn_fmt_time(v, sizeof v, res[i].mem / 1e9);
        bn_fmt_time(r, sizeof r, res[i].lookup / 1e9);
        snprintf(ratio, sizeof ratio, "%.2fx", res[i].mem / res[i].lookup);
        bn_row(id, fig, v, "index lookup, same table", r, ratio, "(context: memory latency)", -1,
               res[i].mem, "ns");
    }
    free(res);
    return 0;
}
