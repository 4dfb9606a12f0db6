/*
 * names.c - the lowered-name table (format: platform/names.h), through base/bytes.h: every
 * length is checked against what is left before use, since a table comes from disk or a
 * network.
 */
#include "platform/names.h"
#include "base/bytes.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

kpc_status kpc_names_encode(const char *const *exprs, const char *const *lowered, size_t n,
                                 void **out, size_t *size)
{
    return kpc_names_encode_reasons(exprs, lowered, NULL, n, out, size);
}

/* The lowered field of expression i: the name with its NUL, or for an empty name with a
 * reason, "" then the reason with its NUL (a reader that stops at the first NUL sees ""). */
static size_t field_len(const char *lowered, const char *reason)
{
    lowered = lowered ? lowered : "";
    return strlen(lowered) + 1 + (lowered[0] == '\0' && reason ? strlen(reason) + 1 : 0);
}

kpc_status kpc_names_encode_reasons(const char *const *exprs, const char *const *lowered,
                                    const char *const *reasons, size_t n, void **out, size_t *size)
{
    kpc__writer w;
    kpc__writer_grow(&w, 0);
    kpc__put_u32(&w, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        kpc__put_lstr(&w, 4, exprs[i], strlen(exprs[i]) + 1); /* with its NUL */
        const char *low = lowered[i] ? lowered[i] : "", *why = reasons ? reasons[i] : NULL;
        kpc__put_u32(&w, (uint32_t)field_len(low, why));
        kpc__put_bytes(&w, low, strlen(low) + 1);
        if (low[0] == '\0' && why)
            kpc__put_bytes(&w, why, strlen(why) + 1);
    }
    return kpc__writer_finish(&w, out, size);
}

/* Walk the table; returns the lowered name of expr (not NUL-terminated: *len), or with
 * expr NULL only checks the table. */
static const uint8_t *names_find(const void *names, size_t size, const char *expr, uint32_t *len,
                                 bool *valid)
{
    kpc__reader r;
    kpc__reader_init(&r, names, size);
    *valid = false;
    uint32_t n = kpc__get_u32(&r);
    size_t expr_len = expr ? strlen(expr) : 0;
    const uint8_t *found = NULL;
    for (uint32_t i = 0; i < n && !r.bad; i++) {
        const char *field[2];
        size_t flen[2];
        for (int j = 0; j < 2; j++) {
            field[j] = kpc__get_lstr(&r, 4, UINT32_MAX, &flen[j]);
            if (field[j] == NULL || flen[j] == 0 || field[j][flen[j] - 1] != '\0')
                return NULL;
        }
        if (expr && found == NULL && flen[0] == expr_len + 1 && memcmp(field[0], expr, expr_len) == 0) {
            found = (const uint8_t *)field[1];
            *len = (uint32_t)flen[1];
        }
    }
    *valid = kpc__reader_done(&r);
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

const char *kpc_names_reason(const void *names, size_t size, const char *expr)
{
    bool valid;
    uint32_t len = 0;
    const char *low = (const char *)names_find(names, size, expr, &len, &valid);
    return low && low[0] == '\0' && len > 1 ? low + 1 : NULL;
}
