/*
 * names.c - the lowered-name table (format: platform/names.h). Every length is checked
 * against the end of the buffer before use: a table comes from disk or a network.
 */
#include "platform/names.h"

#include <stdint.h>
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

kpc_status kpc_names_encode(const char *const *exprs, const char *const *lowered, size_t n,
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

bool kpc_names_valid(const void *names, size_t size)
{
    bool valid;
    uint32_t len;
    names_find(names, size, NULL, &len, &valid);
    return valid;
}

const char *kpc_names_find(const void *names, size_t size, const char *expr)
{
    bool valid;
    uint32_t len = 0;
    return (const char *)names_find(names, size, expr, &len, &valid);
}
