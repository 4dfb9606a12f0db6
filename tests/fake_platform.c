/*
 * fake_platform.c - the fake platform of the tests (support.h, ts_fake_install): compiles
 * in microseconds, and does what a source's marker lines ask (support.h lists them), its
 * compiles counted in memory that processes forked after the install share.
 */
#define _GNU_SOURCE
#include "support.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

static _Atomic unsigned *fake_count;

static kpc_status fake_identity(const kpc_root *dir, uint8_t id[16], char *desc, size_t cap)
{
    (void)dir;
    memset(id, 0x5a, 16);
    snprintf(desc, cap, "fake");
    return KPC_OK;
}

static kpc_status fake_normalize(const kpc_root *dir, const uint8_t id[16], const char *t, char *out, size_t cap)
{
    (void)dir, (void)id;
    if (strncmp(t, "fake", 4) != 0 && strcmp(t, ts_target()) != 0 && strcmp(t, ts_target2()) != 0)
        return KPC_E_INVALID;
    snprintf(out, cap, "%s", t);
    return KPC_OK;
}

static kpc_status fake_compile(const char *target, const kpc_source *src, kpc_build *b)
{
    memset(b, 0, sizeof *b);
    atomic_fetch_add(fake_count, 1);
    size_t len = src->code_len ? src->code_len : strlen(src->code);
    const char *sl = strstr(src->code, "// sleep_ms=");
    if (sl) {
        long ms = strtol(sl + 12, NULL, 10);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (strstr(src->code, "#error")) {
        b->log = strdup("fake: #error in source\n");
        return KPC_E_COMPILE;
    }
    if (getenv("KPC_FAKE_LOCAL_FAULT")) { /* this process's environment, not the source */
        b->log = strdup("fake: no usable TMPDIR\n");
        b->local = true;
        return KPC_E_COMPILE;
    }
    /* a fake ELF header so the code-object checks work; then a hash of the request.
     * -fgpu-rdc: LLVM bitcode's magic instead, as hipRTC 5.3 and later give */
    b->code_size = 128;
    unsigned char *c = calloc(1, b->code_size);
    memcpy(c, "\x7f" "ELF", 4);
    for (size_t i = 0; i < src->num_options; i++)
        if (strcmp(src->options[i], "-fgpu-rdc") == 0) {
            memcpy(c, "BC\xc0\xde", 4);
            b->bitcode = true;
        }
#ifdef KPC_PLATFORM_NVIDIA
    c[18] = 190;
#else
    c[18] = 224;
#endif
    uint64_t h = XXH3_64bits(src->code, len) ^ XXH3_64bits(target, strlen(target));
    memcpy(c + 64, &h, sizeof h);
    b->code = c;
    const char **lowered = calloc(src->num_name_expressions + 1, sizeof *lowered);
    for (size_t i = 0; i < src->num_name_expressions; i++)
        lowered[i] = src->name_expressions[i];
    kpc_names_encode(src->name_expressions, lowered, src->num_name_expressions, &b->names, &b->names_size);
    free(lowered);
    const char *dep = strstr(src->code, "// dep=");
    if (dep) { /* the file it names, reported as read (its bytes are not) */
        b->deps = calloc(1, sizeof *b->deps);
        b->deps[0] = strndup(dep + 7, strcspn(dep + 7, "\n"));
        b->num_deps = 1;
    }
    return KPC_OK;
}

bool ts_fake_has_device;
unsigned ts_fake_refuse_loads;

static kpc_status fake_device_target(int device, char *out, size_t cap)
{
    if (!ts_fake_has_device || device != 0)
        return KPC_E_NO_DEVICE;
    snprintf(out, cap, "%s", ts_target());
    return KPC_OK;
}

static kpc_status fake_module_load(int device, const void *code, size_t size, void **module)
{
    (void)device, (void)code, (void)size;
    if (ts_fake_refuse_loads) { /* what a runtime answers an object it cannot load */
        ts_fake_refuse_loads--;
        return KPC_E_CORRUPT;
    }
    atomic_fetch_add(fake_count + 1, 1);
    *module = (void *)fake_count;
    return KPC_OK;
}

static void fake_module_unload(int device, void *module)
{
    (void)device, (void)module;
    atomic_fetch_add(fake_count + 2, 1);
}

unsigned ts_fake_loads(void) { return fake_count ? atomic_load(fake_count + 1) : 0; }
unsigned ts_fake_unloads(void) { return fake_count ? atomic_load(fake_count + 2) : 0; }

static const kpc_platform fake_platform = {
    .name = "fake",
    .identity = fake_identity,
    .target_normalize = fake_normalize,
    .compile = fake_compile,
    .device_target = fake_device_target,
    .module_load = fake_module_load,
    .module_unload = fake_module_unload,
};

void ts_fake_install(void)
{
    if (fake_count == NULL) {
        fake_count = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ck_assert_ptr_ne(fake_count, MAP_FAILED);
    }
    atomic_store(fake_count, 0);
    atomic_store(fake_count + 1, 0);
    atomic_store(fake_count + 2, 0);
    ts_fake_has_device = false;
    ts_fake_refuse_loads = 0;
    kpc_platform_set(&fake_platform);
}

void ts_fake_remove(void)
{
    kpc_platform_set(NULL);
}

unsigned ts_fake_compiles(void)
{
    return fake_count ? atomic_load(fake_count) : 0;
}

