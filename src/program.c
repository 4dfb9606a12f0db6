/*
 * program.c - a built program: its code object, its lowered-name table and, on a device
 * context, its module and kernel map. Reference-counted: the context's map holds one
 * reference, every caller of kpc_program_get another; the last release unloads the
 * module and frees everything, so a program outlives its eviction from the map.
 *
 * Lowered-name table (also the "names" part of a cached file): u32 count, then for
 * each name expression u32 length + bytes of the expression, u32 length + bytes of
 * its lowered name; little-endian; each string's bytes include its terminating NUL, so
 * a lowered name is returned in place.
 */
#include "kpc_internal.h"

#include <stdlib.h>
#include <string.h>

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

kpc_status kpc_prog_names_encode(const char *const *exprs, const char *const *lowered, size_t n,
                                 void **out, size_t *size)
{
    size_t total = 4;
    for (size_t i = 0; i < n; i++)
        total += 8 + strlen(exprs[i]) + 1 + strlen(lowered[i] ? lowered[i] : "") + 1;
    uint8_t *buf = malloc(total), *p = buf;
    if (buf == NULL)
        return KPC_E_NOMEM;
    put_u32(p, (uint32_t)n);
    p += 4;
    for (size_t i = 0; i < n; i++) {
        const char *pair[2] = {exprs[i], lowered[i] ? lowered[i] : ""};
        for (int j = 0; j < 2; j++) {
            size_t len = strlen(pair[j]) + 1;
            put_u32(p, (uint32_t)len);
            memcpy(p + 4, pair[j], len);
            p += 4 + len;
        }
    }
    *out = buf;
    *size = total;
    return KPC_OK;
}

/* Walk the table; returns the lowered name of expr (not NUL-terminated: *len), or with
 * expr NULL only checks the table. */
static const uint8_t *names_find(const void *names, size_t size, const char *expr, uint32_t *len,
                                 bool *valid)
{
    const uint8_t *p = names, *end = p + size;
    *valid = false;
    if (size < 4)
        return NULL;
    uint32_t n = get_u32(p);
    p += 4;
    size_t expr_len = expr ? strlen(expr) : 0;
    const uint8_t *found = NULL;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *field[2];
        uint32_t flen[2];
        for (int j = 0; j < 2; j++) {
            if ((size_t)(end - p) < 4)
                return NULL;
            flen[j] = get_u32(p);
            if ((size_t)(end - p) - 4 < flen[j] || flen[j] == 0 || p[4 + flen[j] - 1] != '\0')
                return NULL;
            field[j] = p + 4;
            p += 4 + flen[j];
        }
        if (expr && found == NULL && flen[0] == expr_len + 1 && memcmp(field[0], expr, expr_len) == 0) {
            found = field[1];
            *len = flen[1];
        }
    }
    *valid = p == end;
    return *valid ? found : NULL;
}

bool kpc_prog_names_valid(const void *names, size_t size)
{
    bool valid;
    uint32_t len;
    names_find(names, size, NULL, &len, &valid);
    return valid;
}

kpc_status kpc_prog_new(const kpc_key *key, kpc_build *b, kpc_program **out)
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
    bool valid;
    uint32_t len = 0;
    const uint8_t *found = names_find(prog->names, prog->names_size, name_expression, &len, &valid);
    return (const char *)found;
}
