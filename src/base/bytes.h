/*
 * bytes.h - the one bounds-checked byte reader and writer every codec of kpc uses
 * (base/bytes.c): records, packs, requests, manifests, memos, cluster values.
 *
 * Everything kpc stores is little-endian and every length is checked against what is
 * left, so a codec never indexes a buffer by hand. Both cursors carry a sticky error
 * flag: after the first read past the end (or the first write that does not fit or
 * cannot grow) every later call does nothing and reads yield zeros and NULL, so a
 * codec reads or writes its whole format straight through and checks once at the end
 * (kpc__reader_done / kpc__writer_ok) instead of after every field.
 *
 * A writer either fills a caller's fixed buffer (a record or pack header: a field
 * that does not fit is an error, never a truncation) or grows a malloc'd one (a
 * request, a manifest), bounded by max (0: no bound beyond SIZE_MAX).
 */
#ifndef KPC_BASE_BYTES_H
#define KPC_BASE_BYTES_H

#include "kpc/kpc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct kpc__reader {
    const uint8_t *p;
    size_t size, off;
    bool bad; /* sticky: a read went past the end or a value was refused */
} kpc__reader;

/* The reader's primitives are inline: a manifest hit reads a dozen fields per file it
 * checks, and as calls (each a loop over the bytes, the cursor stored between them) they
 * cost as much as the file's stat on a slow core. */
static inline void kpc__reader_init(kpc__reader *r, const void *buf, size_t size)
{
    r->p = buf;
    r->size = buf ? size : 0;
    r->off = 0;
    r->bad = false;
}

/* len bytes in place (a pointer into the buffer), or NULL (and bad) if fewer are left. */
static inline const uint8_t *kpc__get_bytes(kpc__reader *r, size_t len)
{
    if (r->bad || len > r->size - r->off) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *p = r->p + r->off;
    r->off += len;
    return p;
}

/* The little-endian unsigned of n bytes (1, 2, 4 or 8) at b, which the caller has
 * bounded (a reader, or a layout a reader checked once and that is read in place), and
 * the same written: the one home of the byte order. */
static inline uint64_t kpc__load_le(const uint8_t *b, int n)
{
    uint64_t v = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(&v, b, (size_t)n);
#else
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | b[i];
#endif
    return v;
}

static inline void kpc__store_le(uint8_t *b, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

/* A little-endian unsigned of n bytes (1, 2, 4 or 8); 0 when they are not there. */
static inline uint64_t kpc__get_le(kpc__reader *r, int n)
{
    const uint8_t *b = kpc__get_bytes(r, (size_t)n);
    return b ? kpc__load_le(b, n) : 0;
}

static inline uint8_t kpc__get_u8(kpc__reader *r) { return (uint8_t)kpc__get_le(r, 1); }
static inline uint16_t kpc__get_u16(kpc__reader *r) { return (uint16_t)kpc__get_le(r, 2); }
static inline uint32_t kpc__get_u32(kpc__reader *r) { return (uint32_t)kpc__get_le(r, 4); }
static inline uint64_t kpc__get_u64(kpc__reader *r) { return kpc__get_le(r, 8); }

/* len bytes copied to dst; dst is zeroed when they are not there. */
static inline void kpc__get_copy(kpc__reader *r, void *dst, size_t len)
{
    const uint8_t *b = kpc__get_bytes(r, len);
    if (b)
        memcpy(dst, b, len);
    else if (len)
        memset(dst, 0, len);
}

static inline void kpc__get_skip(kpc__reader *r, size_t len) { (void)kpc__get_bytes(r, len); }

/* A string with a little-endian length of len_bytes (1, 2, 4 or 8) before it, in place
 * (not NUL-terminated): its bytes, and its length in *len. A length over max, or over
 * what is left, is bad. An empty string yields a non-NULL pointer. */
static inline const char *kpc__get_lstr(kpc__reader *r, int len_bytes, size_t max, size_t *len)
{
    uint64_t n = kpc__get_le(r, len_bytes);
    *len = 0;
    if (n > max) {
        r->bad = true;
        return NULL;
    }
    const char *s = (const char *)kpc__get_bytes(r, (size_t)n);
    if (s)
        *len = (size_t)n;
    return s;
}

/* The same, malloc'd and NUL-terminated (NULL, and bad, also when malloc fails). */
char *kpc__get_lstr_dup(kpc__reader *r, int len_bytes, size_t max, size_t *len);
/* A fixed-width string field of width bytes: must end in a NUL inside the field (bad if
 * not); copied whole to dst (width bytes). */
void kpc__get_fixed_str(kpc__reader *r, char *dst, size_t width);
/* A codec's own check failed (a bad magic, a value out of range): mark it bad. */
static inline void kpc__reader_fail(kpc__reader *r) { r->bad = true; }
static inline size_t kpc__reader_left(const kpc__reader *r) { return r->bad ? 0 : r->size - r->off; }
/* Nothing went wrong and every byte was read (trailing bytes are refused). */
static inline bool kpc__reader_done(const kpc__reader *r) { return !r->bad && r->off == r->size; }

typedef struct kpc__writer {
    uint8_t *p;
    size_t len, cap, max;
    bool grows;  /* p is ours, malloc'd and grown; otherwise the caller's, of cap bytes */
    bool bad;    /* sticky: something did not fit */
    bool nomem;  /* ... because malloc failed */
} kpc__writer;

/* Write into buf[0..cap): a field past cap is bad, never a truncation. */
void kpc__writer_fixed(kpc__writer *w, void *buf, size_t cap);
/* Write into a malloc'd buffer grown as needed, up to max bytes (0: unbounded). */
void kpc__writer_grow(kpc__writer *w, size_t max);
void kpc__put_u8(kpc__writer *w, uint8_t v);
void kpc__put_u16(kpc__writer *w, uint16_t v);
void kpc__put_u32(kpc__writer *w, uint32_t v);
void kpc__put_u64(kpc__writer *w, uint64_t v);
void kpc__put_bytes(kpc__writer *w, const void *data, size_t len); /* data may be NULL if len 0 */
void kpc__put_zeros(kpc__writer *w, size_t len);
/* A length of len_bytes (1, 2, 4 or 8), then the len bytes of s (s may be NULL if len 0);
 * bad if len does not fit in len_bytes. */
void kpc__put_lstr(kpc__writer *w, int len_bytes, const char *s, size_t len);
/* A fixed-width string field: at most width - 1 bytes of s, then NULs to width. */
void kpc__put_fixed_str(kpc__writer *w, const char *s, size_t width);
bool kpc__writer_ok(const kpc__writer *w);
/* A growing writer's buffer handed over (*buf malloc'd, *size bytes): KPC_OK, KPC_E_NOMEM
 * when malloc failed, KPC_E_INVALID when it went past max. On failure the buffer is freed.
 * A fixed writer: KPC_OK or KPC_E_INVALID, *buf its buffer. */
kpc_status kpc__writer_finish(kpc__writer *w, void **buf, size_t *size);
/* Drop a growing writer's buffer (after a failure of the caller's own). */
void kpc__writer_discard(kpc__writer *w);

#endif /* KPC_BASE_BYTES_H */
