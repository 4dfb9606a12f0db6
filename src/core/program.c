/*
 * program.c - a built program: its code object, its lowered-name table
 * (platform/names.h) and, on a device context, its module and kernel table.
 * Reference-counted: the context's map holds one reference, every caller of
 * kpc_program_get another; the last release unloads the module and frees everything, so
 * a program outlives its eviction from the map (kpc.h promises it).
 *
 * A hit must not write a line other threads write (many threads asking for one program
 * fought over its count: 2.9-4.4x the one-thread hit at 8-16 threads), so the count is
 * split while the program is in a map. refs is the shared part; slots holds one count per
 * thread slot (base/grace.h), each on its own line, made by the program's first hit in
 * the map (until then, or without memory for them, hits count in refs). A hit adds 1 to
 * its thread's slot; a release takes 1 from the releasing thread's slot (which may go
 * below 0: only the sum means anything), retain and the misses use refs. The map's own
 * reference is a large bias in refs, so refs cannot reach 0 while the slots are in use.
 * Every program is made for a map (a miss publishes what it resolved), so it is born
 * holding the map's reference beside its maker's: the publication hands the map what it
 * already holds and calls nothing here, and a maker that publishes nothing (the program
 * refused after it was made) lets go of both (kpc_program_discard).
 * When the map lets go (eviction, a changed file, the context destroyed; after a grace
 * period, so that no hit can still be adding to a slot, or making them), it folds: every
 * slot is swapped for POISONED and the sum, less the bias, goes into refs; if that makes
 * 0, nobody holds the program and it is freed. A release that finds its slot POISONED
 * takes its 1 from refs instead. So a hit and the release after it touch only the
 * thread's own line, and the one who drops the count to 0 is exactly the last holder,
 * as before.
 *
 * The kernel table: kernels_lock guards kernels, num_kernels and cap_kernels; a kernel
 * once looked up stays until the program is freed, so kpc_kernel_get hands out the
 * function handle without holding the lock afterwards.
 */
#define _GNU_SOURCE
#include "core/program.h"
#include "core/cache.h"
#include "core/context.h"
#include "base/grace.h"
#include "base/log.h"
#include "platform/names.h"
#include "storage/record.h"

#include <stdlib.h>
#include <string.h>

#define MAP_BIAS ((int64_t)1 << 40)          /* the map's reference, while the slots count */
#define POISONED (INT64_MIN / 2)              /* a slot folded into refs */
#define IS_POISONED(v) ((v) < INT64_MIN / 4)

static kpc_program *program_alloc(const kpc_key *key)
{
    kpc_program *p = calloc(1, sizeof *p);
    if (p == NULL)
        return NULL;
    atomic_init(&p->refs, MAP_BIAS + 1); /* the map's and the maker's */
    p->key = *key;
    p->object = *key;
    p->device = -1;
    pthread_mutex_init(&p->kernels_lock, NULL);
    return p;
}

kpc_status kpc_program_from_record(const kpc_key *key, kpc_record *rec, kpc_program **out)
{
    kpc_program *p = program_alloc(key);
    if (p == NULL) {
        kpc_record_free(rec);
        return KPC_E_NOMEM;
    }
    p->block = rec->block;
    p->code = rec->payload; /* the head of the payload, where the record lies */
    p->code_size = rec->code_size;
    p->names = (char *)rec->payload + rec->code_size;
    p->names_size = rec->names_size;
    p->bitcode = (rec->flags & KPC_RECORD_BITCODE) != 0;
    rec->block = rec->payload = NULL;
    *out = p;
    return KPC_OK;
}

kpc_status kpc_program_new(const kpc_key *key, kpc_build *b, kpc_program **out)
{
    kpc_program *p = program_alloc(key);
    if (p == NULL)
        return KPC_E_NOMEM;
    p->block = p->code = b->code;
    p->code_size = b->code_size;
    p->bitcode = b->bitcode;
    p->names_block = p->names = b->names;
    p->names_size = b->names_size;
    b->code = b->names = NULL;
    *out = p;
    return KPC_OK;
}

kpc_status kpc_program_retain(kpc_program *prog)
{
    if (prog == NULL)
        return KPC_E_INVALID;
    atomic_fetch_add_explicit(&prog->refs, 1, memory_order_relaxed);
    return KPC_OK;
}

static void program_free(kpc_program *prog);

static void drop_shared(kpc_program *prog, int64_t n)
{
    if (atomic_fetch_sub_explicit(&prog->refs, n, memory_order_acq_rel) == n)
        program_free(prog);
}

void kpc_program_discard(kpc_program *prog)
{
    if (prog)
        drop_shared(prog, MAP_BIAS + 1);
}

/* The program's slots, made by the first hit that finds none: a program got once per
 * process never pays for their 2 KB, nor for the page fault of their first touch (2.2 us
 * of a new process's 24 us disk hit on the 2-core VM). NULL when memory is short: the
 * shared count serves, correct and only slower under many threads. */
static kpc_ref_slot *make_slots(kpc_program *prog)
{
    kpc_ref_slot *none = NULL, *slots = aligned_alloc(64, KPC_REF_SLOTS * sizeof *slots);
    if (slots == NULL)
        return NULL;
    for (int i = 0; i < KPC_REF_SLOTS; i++)
        atomic_init(&slots[i].n, 0);
    if (atomic_compare_exchange_strong_explicit(&prog->slots, &none, slots, memory_order_acq_rel,
                                                memory_order_acquire))
        return slots;
    free(slots); /* another thread's first hit won */
    return none;
}

void kpc_program_hit(kpc_program *prog)
{
    kpc_ref_slot *slots = atomic_load_explicit(&prog->slots, memory_order_acquire);
    if (slots == NULL)
        slots = make_slots(prog);
    if (slots)
        atomic_fetch_add_explicit(&slots[kpc_thread_slot() % KPC_REF_SLOTS].n, 1, memory_order_relaxed);
    else
        atomic_fetch_add_explicit(&prog->refs, 1, memory_order_relaxed);
}

void kpc_program_map_drop(kpc_program *prog)
{
    kpc_ref_slot *slots = atomic_load_explicit(&prog->slots, memory_order_acquire);
    if (slots == NULL) { /* never hit (or no memory for slots): the bias alone */
        drop_shared(prog, MAP_BIAS);
        return;
    }
    int64_t sum = 0;
    for (int i = 0; i < KPC_REF_SLOTS; i++)
        sum += atomic_exchange_explicit(&slots[i].n, POISONED, memory_order_acq_rel);
    drop_shared(prog, MAP_BIAS - sum);
}

void kpc_program_release(kpc_program *prog)
{
    if (prog == NULL)
        return;
    kpc_ref_slot *slots = atomic_load_explicit(&prog->slots, memory_order_acquire);
    if (slots) {
        _Atomic int64_t *n = &slots[kpc_thread_slot() % KPC_REF_SLOTS].n;
        int64_t v = atomic_load_explicit(n, memory_order_relaxed);
        while (!IS_POISONED(v))
            if (atomic_compare_exchange_weak_explicit(n, &v, v - 1, memory_order_release,
                                                      memory_order_relaxed))
                return;
    }
    drop_shared(prog, 1);
}

static void program_free(kpc_program *prog)
{
    if (prog->module)
        kpc_platform_get()->module_unload(prog->device, prog->module);
    for (size_t i = 0; i < prog->num_kernels; i++)
        free(prog->kernels[i].name);
    free(prog->kernels);
    pthread_mutex_destroy(&prog->kernels_lock);
    free(prog->block);
    free(prog->names_block);
    kpc_manifest_deps_free(prog->deps);
    free(atomic_load(&prog->slots));
    free(prog);
}

const void *kpc_program_code(const kpc_program *prog, size_t *size)
{
    if (size)
        *size = prog ? prog->code_size : 0;
    return prog ? prog->code : NULL;
}

/* A name is valid while the caller holds its reference. */
const char *kpc_program_lowered_name(const kpc_program *prog, const char *name_expression)
{
    /* "" is no request's expression: its entry is the compile's log (platform/names.h) */
    if (prog == NULL || name_expression == NULL || name_expression[0] == '\0' || prog->names == NULL)
        return NULL;
    return kpc_names_find(prog->names, prog->names_size, name_expression);
}

const char *kpc_program_build_log(const kpc_program *prog)
{
    const char *log = prog && prog->names ? kpc_names_find(prog->names, prog->names_size, KPC_NAMES_LOG) : NULL;
    return log ? log : "";
}

const char *kpc_program_lowered_reason(const kpc_program *prog, const char *name_expression)
{
    if (prog == NULL || name_expression == NULL || prog->names == NULL)
        return NULL;
    return kpc_names_reason(prog->names, prog->names_size, name_expression);
}

kpc_status kpc_kernel_get(kpc_context *ctx, kpc_program *prog, const char *kernel_name, hipFunction_t *out)
{
    if (out)
        *out = NULL;
    if (ctx == NULL || prog == NULL || kernel_name == NULL || out == NULL) {
        KPC_LOG(KPC_LOG_ERROR, "kpc_kernel_get: NULL argument");
        return KPC_E_INVALID;
    }
    if (ctx->device < 0 || prog->module == NULL || prog->ctx != ctx) {
        KPC_LOG(KPC_LOG_ERROR, "kpc_kernel_get: %s", ctx->device < 0
                ? "a compile-only context has no kernels (create it with kpc_context_create)"
                : "the program belongs to another context");
        return KPC_E_INVALID;
    }
    kpc_status s = KPC_OK;
    pthread_mutex_lock(&prog->kernels_lock);
    for (size_t i = 0; i < prog->num_kernels; i++)
        if (strcmp(prog->kernels[i].name, kernel_name) == 0) {
            *out = (hipFunction_t)prog->kernels[i].fn;
            pthread_mutex_unlock(&prog->kernels_lock);
            return KPC_OK;
        }
    void *fn = NULL;
    s = ctx->cache->platform->module_function(prog->device, prog->module, kernel_name, &fn);
    if (s == KPC_OK && prog->num_kernels == prog->cap_kernels) {
        size_t cap = prog->cap_kernels ? prog->cap_kernels * 2 : 8;
        kpc_kernel_slot *k = realloc(prog->kernels, cap * sizeof *k);
        if (k == NULL)
            s = KPC_E_NOMEM;
        else
            prog->kernels = k, prog->cap_kernels = cap;
    }
    if (s == KPC_OK) {
        char *name = strdup(kernel_name);
        if (name == NULL)
            s = KPC_E_NOMEM;
        else {
            prog->kernels[prog->num_kernels].name = name;
            prog->kernels[prog->num_kernels++].fn = fn;
            *out = (hipFunction_t)fn;
        }
    }
    pthread_mutex_unlock(&prog->kernels_lock);
    if (s == KPC_E_NOT_FOUND)
        KPC_LOG(KPC_LOG_ERROR, "kpc_kernel_get: no kernel \"%s\" in the module", kernel_name);
    return s;
}

bool kpc_program_is_bitcode(const kpc_program *prog)
{
    return prog != NULL && prog->bitcode;
}
