/*
 * test_manifest_threads.c - threads hitting one program whose header changes under them
 * (the map's check of its files, run under ThreadSanitizer): a get that began after a
 * version of the header was written never returns an older object, and the versions
 * between are served from the map, not compiled again per get. The manifest module
 * alone: test_manifest.c.
 */
#define _GNU_SOURCE
#include "core/manifest.h"
#include "support.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

static char *dir;

static void setup(void)
{
    dir = ts_tmpdir();
    ck_assert_int_eq(kpc__mkdir_p(dir, 0700), 0);
}

static void teardown(void)
{
    ts_cleanup(dir);
}

/* A platform whose compile reads the file named after "// dep=" in the source: the code
 * object embeds that file's bytes' hash, and the file is the build's one dependency. */
static _Atomic unsigned dep_compiles;

static kpc_status dep_identity(const kpc_root *root, uint8_t id[16], char *desc, size_t cap)
{
    (void)root;
    memset(id, 0x6b, 16);
    snprintf(desc, cap, "dep");
    return KPC_OK;
}

static kpc_status dep_normalize(const kpc_root *root, const uint8_t id[16], const char *t, char *out,
                                size_t cap)
{
    (void)root, (void)id;
    snprintf(out, cap, "%s", t);
    return KPC_OK;
}

static kpc_status dep_compile(const char *target, const kpc_source *src, kpc_build *b)
{
    (void)target;
    memset(b, 0, sizeof *b);
    atomic_fetch_add(&dep_compiles, 1);
    const char *at = strstr(src->code, "// dep=");
    char path[4096];
    snprintf(path, sizeof path, "%.*s", (int)strcspn(at + 7, "\n"), at + 7);
    size_t size;
    void *text = ts_read_file(path, &size);
    b->code_size = 128;
    unsigned char *c = calloc(1, b->code_size);
    memcpy(c, "\x7f" "ELF", 4);
    uint64_t h = text ? XXH3_64bits(text, size) : 0;
    memcpy(c + 64, &h, sizeof h);
    free(text);
    b->code = c;
    kpc_names_encode(NULL, NULL, 0, &b->names, &b->names_size);
    b->deps = calloc(1, sizeof *b->deps);
    b->deps[0] = strdup(path);
    b->num_deps = 1;
    return KPC_OK;
}

static const kpc_platform dep_platform = {
    .name = "dep",
    .identity = dep_identity,
    .target_normalize = dep_normalize,
    .compile = dep_compile,
};

#define VERSIONS 4
static uint64_t version_hash[VERSIONS]; /* of "version V\n", set before the threads start */

typedef struct hitter {
    kpc_context *ctx;
    kpc_source src;
    _Atomic int *version; /* stored after the file holds that version */
    _Atomic bool *stop;
    unsigned gets, stale;
} hitter;

static void *hit_loop(void *arg)
{
    hitter *h = arg;
    while (!atomic_load(h->stop)) {
        int before = atomic_load(h->version); /* the file is at least this new during the get */
        kpc_program *p = NULL;
        if (kpc_program_get(h->ctx, &h->src, &p) != KPC_OK) {
            h->stale++;
            continue;
        }
        size_t size;
        const unsigned char *code = kpc_program_code(p, &size);
        uint64_t got;
        memcpy(&got, code + 64, sizeof got);
        /* a get that began after a version was written never returns an older one */
        bool fresh = false;
        for (int v = before; v < VERSIONS; v++)
            fresh |= got == version_hash[v];
        h->stale += !fresh;
        h->gets++;
        kpc_program_release(p);
    }
    return NULL;
}

START_TEST(threads_see_a_header_change)
{
    kpc_platform_set(&dep_platform);
    char header[4200], code[4400];
    snprintf(header, sizeof header, "%s/dep.h", dir);
    ts_write_file(header, "version 0\n", strlen("version 0\n"));
    snprintf(code, sizeof code, "kernel\n// dep=%s\n", header);
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = NULL;
    ck_assert_int_eq(kpc_context_create_for_target(c, "fake", &ctx), KPC_OK);
    for (int v = 0; v < VERSIONS; v++) {
        char text[32];
        snprintf(text, sizeof text, "version %d\n", v);
        version_hash[v] = XXH3_64bits(text, strlen(text));
    }
    _Atomic int version = 0;
    _Atomic bool stop = false;
    usleep(1100 * 1000); /* old enough to be cached */
    hitter h[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        h[i] = (hitter){.ctx = ctx, .src = ts_src(code, "dep.hip"), .version = &version, .stop = &stop};
        ck_assert_int_eq(pthread_create(&t[i], NULL, hit_loop, &h[i]), 0);
    }
    for (int v = 1; v < VERSIONS; v++) {
        usleep(300 * 1000);
        char text[32], tmp[4300];
        snprintf(text, sizeof text, "version %d\n", v);
        /* whole, by rename: a compile never reads it half written (that is a torn read,
         * not a stale cache) */
        snprintf(tmp, sizeof tmp, "%s.tmp", header);
        ts_write_file(tmp, text, strlen(text));
        ck_assert_int_eq(rename(tmp, header), 0);
        atomic_store(&version, v);
        usleep(1100 * 1000); /* this version gets cached, and hit */
    }
    usleep(300 * 1000);
    atomic_store(&stop, true);
    unsigned gets = 0, stale = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        gets += h[i].gets;
        stale += h[i].stale;
    }
    ck_assert_uint_eq(stale, 0);
    ck_assert_uint_gt(gets, 100);
    /* each version was compiled, and hits were served in between: far fewer compiles than gets */
    unsigned compiles = atomic_load(&dep_compiles);
    ck_assert_uint_ge(compiles, 4);
    ck_assert_uint_lt(compiles, gets / 4);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    kpc_platform_set(NULL);
}
END_TEST

int main(void)
{
    const TTest *tests[] = {threads_see_a_header_change, NULL};
    return ts_main_case("manifest", "threads", 60, setup, teardown, tests);
}
