/*
 * program.c - a built program: its code object, its lowered-name table
 * (platform/names.h) and, on a device context, its module and kernel table.
 * Reference-counted: the context's map holds one reference, every caller of
 * kpc_program_get another; the last release unloads the module and frees everything, so
 * a program outlives its eviction from the map.
 *
 * The kernel table: kernels_lock guards kernels, num_kernels and cap_kernels; a kernel
 * once looked up stays until the program is freed, so kpc_kernel_get hands out the
 * function handle without holding the lock afterwards.
 */
#define _GNU_SOURCE
#include "core/program.h"
#include "core/cache.h"
#include "core/context.h"
#include "base/log.h"
#include "platform/names.h"

#include <stdlib.h>
#include <string.h>

kpc_status kpc_program_new(const kpc_key *key, kpc_build *b, kpc_program **out)
{
    kpc_program *p = calloc(1, sizeof *p);
    if (p == NULL)
        return KPC_E_NOMEM;
    atomic_init(&p->refs, 1);
    p->key = *key;
    p->code = b->code;
    p->code_size = b->code_size;
    p->names = b->names;
    p->names_size = b->names_size;
    p->device = -1;
    b->code = b->names = NULL;
    pthread_mutex_init(&p->kernels_lock, NULL);
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

void kpc_program_release(kpc_program *prog)
{
    if (prog == NULL || atomic_fetch_sub_explicit(&prog->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (prog->module)
        kpc_platform_get()->module_unload(prog->device, prog->module);
    for (size_t i = 0; i < prog->num_kernels; i++)
        free(prog->kernels[i].name);
    free(prog->kernels);
    pthread_mutex_destroy(&prog->kernels_lock);
    free(prog->code);
    free(prog->names);
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
    if (prog == NULL || name_expression == NULL || prog->names == NULL)
        return NULL;
    return kpc_names_find(prog->names, prog->names_size, name_expression);
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
