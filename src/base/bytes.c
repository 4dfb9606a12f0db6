/*
 * bytes.c - the bounds-checked little-endian reader and writer (bytes.h). Every check of
 * a length against what is left lives in kpc__get_bytes (inline in bytes.h: the reads of
 * a format's fields are the per-file work of a manifest hit) and in the writer's reserve
 * here, written so that it cannot overflow (len > size - off, never off + len > size).
 */
#define _GNU_SOURCE /* strnlen */
#include "base/bytes.h"

#include <stdlib.h>
#include <string.h>

char *kpc__get_lstr_dup(kpc__reader *r, int len_bytes, size_t max, size_t *len)
{
    size_t n;
    const char *s = kpc__get_lstr(r, len_bytes, max, &n);
    if (len)
        *len = s ? n : 0;
    if (s == NULL)
        return NULL;
    char *d = malloc(n + 1);
    if (d == NULL) {
        r->bad = true;
        return NULL;
    }
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

void kpc__get_fixed_str(kpc__reader *r, char *dst, size_t width)
{
    kpc__get_copy(r, dst, width);
    if (width && dst[width - 1] != '\0') {
        r->bad = true;
        dst[width - 1] = '\0';
    }
}


void kpc__writer_fixed(kpc__writer *w, void *buf, size_t cap)
{
    memset(w, 0, sizeof *w);
    w->p = buf;
    w->cap = cap;
    w->max = cap;
}

void kpc__writer_grow(kpc__writer *w, size_t max)
{
    memset(w, 0, sizeof *w);
    w->grows = true;
    w->max = max ? max : SIZE_MAX;
}

/* Room for len more bytes at w->p + w->len, or NULL (and bad). */
static uint8_t *reserve(kpc__writer *w, size_t len)
{
    if (w->bad || len > w->max - w->len) {
        w->bad = true;
        return NULL;
    }
    if (w->len + len > w->cap) {
        if (!w->grows) {
            w->bad = true;
            return NULL;
        }
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->len + len)
            cap = cap > SIZE_MAX / 2 ? w->len + len : cap * 2;
        uint8_t *p = realloc(w->p, cap);
        if (p == NULL) {
            w->bad = w->nomem = true;
            return NULL;
        }
        w->p = p;
        w->cap = cap;
    }
    uint8_t *at = w->p + w->len;
    w->len += len;
    return at;
}

static void put_le(kpc__writer *w, uint64_t v, int bytes)
{
    uint8_t *b = reserve(w, (size_t)bytes);
    if (b)
        kpc__store_le(b, v, bytes);
}

void kpc__put_u8(kpc__writer *w, uint8_t v) { put_le(w, v, 1); }
void kpc__put_u16(kpc__writer *w, uint16_t v) { put_le(w, v, 2); }
void kpc__put_u32(kpc__writer *w, uint32_t v) { put_le(w, v, 4); }
void kpc__put_u64(kpc__writer *w, uint64_t v) { put_le(w, v, 8); }

void kpc__put_bytes(kpc__writer *w, const void *data, size_t len)
{
    uint8_t *b = len ? reserve(w, len) : NULL;
    if (b)
        memcpy(b, data, len);
}

void kpc__put_zeros(kpc__writer *w, size_t len)
{
    uint8_t *b = len ? reserve(w, len) : NULL;
    if (b)
        memset(b, 0, len);
}

void kpc__put_lstr(kpc__writer *w, int len_bytes, const char *s, size_t len)
{
    if (len_bytes < 8 && (uint64_t)len >> (8 * len_bytes) != 0) {
        w->bad = true;
        return;
    }
    put_le(w, len, len_bytes);
    kpc__put_bytes(w, s, len);
}

void kpc__put_fixed_str(kpc__writer *w, const char *s, size_t width)
{
    size_t n = width && s ? strnlen(s, width - 1) : 0;
    kpc__put_bytes(w, s, n);
    kpc__put_zeros(w, width - n);
}

bool kpc__writer_ok(const kpc__writer *w) { return !w->bad; }

kpc_status kpc__writer_finish(kpc__writer *w, void **buf, size_t *size)
{
    if (w->bad) {
        kpc_status s = w->nomem ? KPC_E_NOMEM : KPC_E_INVALID;
        kpc__writer_discard(w);
        return s;
    }
    *buf = w->p;
    *size = w->len;
    if (w->grows)
        w->p = NULL; /* handed over */
    return KPC_OK;
}

void kpc__writer_discard(kpc__writer *w)
{
    if (w->grows)
        free(w->p);
    w->p = NULL;
    w->len = w->cap = 0;
}
