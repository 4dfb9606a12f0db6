/*
 * request_codec.c - the request a record keeps beside its code object, so that `kpc replay`
 * can build it again for a new compiler or another target, and so that a hit from another
 * process can be compared with the request asked, byte for byte (core/hit.c).
 *
 * A request is everything kpc_program_get was given (source text, name, options,
 * in-memory headers, name expressions) plus the values of the environment variables the
 * compiler turns into hidden options (the platform's key_env), which enter the key: a
 * replay must set them as the application had them, or it would build objects under
 * keys nobody asks for. It is serialized little-endian, every string with its length
 * (no NUL needed, none assumed):
 *
 *   section   "KPRQ" | u32 version | u64 raw size | the raw bytes (version 2)
 *                                                 | a zstd frame of them (version 1)
 *   raw       u64 len + source text | u32 len + name
 *             | u32 count, count x (u32 len + option)
 *             | u32 count, count x (u32 len + header name, u64 len + header text)
 *             | u32 count, count x (u32 len + name expression)
 *             | u32 count, count x (u32 len + variable name, u8 set, u32 len + value)
 *             | u32 len + working directory (relative -I paths and include manifests
 *               are resolved from it)
 *
 * Version 2 keeps the bytes as they are: a hit compares them with the request asked in
 * place (kpc_request_compare), a memcmp of the source, where version 1's frame cost a
 * decompression on every hit, about as much as a collision-resistant digest of the
 * source (docs/benchmarks.md, "Collision check"). Version 1 sections are still read.
 *
 * Invariants: decode trusts nothing (the section sits in a checksummed record, but a
 * pack may come from anywhere): every length is checked against what is left, the raw
 * size is bounded (1 GiB) and must match what follows the head exactly (version 1: the
 * frame's content size), and trailing bytes are refused. Format: docs/file-format.md
 * ("The request section").
 */
#include "storage/request_codec.h"
#include "base/bytes.h"
#include "base/log.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>
#if defined(KPC_HAVE_REMOTE)
#include <sodium.h>
#endif

#define REQ_MAGIC "KPRQ"
#define REQ_VERSION_ZSTD 1u
#define REQ_VERSION_RAW 2u
#define REQ_HEAD 16u
#define REQ_MAX_RAW (1ull << 30)

static size_t slen(const char *s) { return s ? strlen(s) : 0; }

kpc_status kpc_request_encode(const kpc_source *src, const char *const *env_names, void **out,
                              size_t *size)
{
    *out = NULL;
    *size = 0;
    if (src == NULL || src->code == NULL)
        return KPC_E_INVALID;
    kpc__writer w;
    kpc__writer_grow(&w, REQ_MAX_RAW);
    size_t code_len = src->code_len ? src->code_len : strlen(src->code);
    kpc__put_lstr(&w, 8, src->code, code_len);
    kpc__put_lstr(&w, 4, src->name, slen(src->name));
    kpc__put_u32(&w, (uint32_t)src->num_options);
    for (size_t i = 0; i < src->num_options; i++)
        kpc__put_lstr(&w, 4, src->options[i], slen(src->options[i]));
    kpc__put_u32(&w, (uint32_t)src->num_headers);
    for (size_t i = 0; i < src->num_headers; i++) {
        kpc__put_lstr(&w, 4, src->header_names[i], slen(src->header_names[i]));
        kpc__put_lstr(&w, 8, src->header_sources[i], slen(src->header_sources[i]));
    }
    kpc__put_u32(&w, (uint32_t)src->num_name_expressions);
    for (size_t i = 0; i < src->num_name_expressions; i++)
        kpc__put_lstr(&w, 4, src->name_expressions[i], slen(src->name_expressions[i]));
    size_t nenv = 0;
    while (env_names && env_names[nenv])
        nenv++;
    kpc__put_u32(&w, (uint32_t)nenv);
    for (size_t i = 0; i < nenv; i++) {
        const char *v = getenv(env_names[i]);
        kpc__put_lstr(&w, 4, env_names[i], strlen(env_names[i]));
        kpc__put_u8(&w, v != NULL);
        kpc__put_lstr(&w, 4, v, slen(v));
    }
    char cwd[4096];
    if (getcwd(cwd, sizeof cwd) == NULL)
        cwd[0] = '\0'; /* unknown: a replay resolves relative paths from its own */
    kpc__put_lstr(&w, 4, cwd, strlen(cwd));
    uint8_t *raw;
    size_t raw_len;
    kpc_status st = kpc__writer_finish(&w, (void **)&raw, &raw_len);
    if (st != KPC_OK)
        return st;
    uint8_t *sec = realloc(raw, REQ_HEAD + raw_len);
    if (sec == NULL) {
        free(raw);
        return KPC_E_NOMEM;
    }
    memmove(sec + REQ_HEAD, sec, raw_len);
    kpc__writer head;
    kpc__writer_fixed(&head, sec, REQ_HEAD);
    kpc__put_bytes(&head, REQ_MAGIC, 4);
    kpc__put_u32(&head, REQ_VERSION_RAW);
    kpc__put_u64(&head, raw_len);
    *out = sec;
    *size = REQ_HEAD + raw_len;
    return KPC_OK;
}

/* ---- reading ------------------------------------------------------------------------- */
/* A string of a length given in len_bytes: malloc'd and NUL-terminated; NULL when bad. */
static char *get_str(kpc__reader *r, int len_bytes, size_t *len_out)
{
    return kpc__get_lstr_dup(r, len_bytes, REQ_MAX_RAW, len_out);
}

/* An array of count pointers, every one NULL; NULL when count is implausible (more than
 * the bytes left could hold at min_each bytes an element). */
static char **get_array(kpc__reader *r, uint64_t count, size_t min_each)
{
    if (r->bad || count > kpc__reader_left(r) / (min_each ? min_each : 1)) {
        kpc__reader_fail(r);
        return NULL;
    }
    char **a = calloc(count ? count : 1, sizeof *a);
    if (a == NULL)
        kpc__reader_fail(r);
    return a;
}

void kpc_request_free(kpc_request *rq)
{
    if (rq == NULL)
        return;
    kpc_source *s = &rq->src;
    free((void *)s->code);
    free((void *)s->name);
    for (size_t i = 0; s->options && i < s->num_options; i++)
        free((void *)s->options[i]);
    for (size_t i = 0; s->header_names && i < s->num_headers; i++) {
        free((void *)s->header_names[i]);
        free((void *)s->header_sources[i]);
    }
    for (size_t i = 0; s->name_expressions && i < s->num_name_expressions; i++)
        free((void *)s->name_expressions[i]);
    free((void *)s->options);
    free((void *)s->header_names);
    free((void *)s->header_sources);
    free((void *)s->name_expressions);
    for (size_t i = 0; rq->env_names && i < rq->num_env; i++) {
        free(rq->env_names[i]);
        free(rq->env_values[i]);
    }
    free(rq->env_names);
    free(rq->env_values);
    free(rq->cwd);
    memset(rq, 0, sizeof *rq);
}

static bool parse_raw(kpc__reader *r, kpc_request *rq)
{
    kpc_source *s = &rq->src;
    size_t code_len = 0;
    s->code = get_str(r, 8, &code_len);
    s->code_len = code_len;
    s->name = get_str(r, 4, NULL);
    uint64_t n = kpc__get_u32(r);
    char **opts = get_array(r, n, 4);
    s->options = (const char *const *)opts;
    s->num_options = opts ? n : 0;
    for (size_t i = 0; opts && i < n && !r->bad; i++)
        opts[i] = get_str(r, 4, NULL);
    n = kpc__get_u32(r);
    char **hn = get_array(r, n, 12), **hs = hn ? get_array(r, n, 1) : NULL;
    s->header_names = (const char *const *)hn;
    s->header_sources = (const char *const *)hs;
    s->num_headers = hn && hs ? n : 0;
    for (size_t i = 0; hn && hs && i < n && !r->bad; i++) {
        hn[i] = get_str(r, 4, NULL);
        hs[i] = get_str(r, 8, NULL);
    }
    n = kpc__get_u32(r);
    char **ex = get_array(r, n, 4);
    s->name_expressions = (const char *const *)ex;
    s->num_name_expressions = ex ? n : 0;
    for (size_t i = 0; ex && i < n && !r->bad; i++)
        ex[i] = get_str(r, 4, NULL);
    n = kpc__get_u32(r);
    rq->env_names = get_array(r, n, 9);
    rq->env_values = rq->env_names ? get_array(r, n, 1) : NULL;
    rq->num_env = rq->env_names && rq->env_values ? n : 0;
    for (size_t i = 0; rq->num_env && i < n && !r->bad; i++) {
        rq->env_names[i] = get_str(r, 4, NULL);
        bool set = kpc__get_u8(r) != 0;
        char *v = get_str(r, 4, NULL);
        if (set)
            rq->env_values[i] = v;
        else
            free(v); /* unset: NULL, distinct from empty */
    }
    rq->cwd = get_str(r, 4, NULL);
    if (rq->cwd && rq->cwd[0] == '\0') {
        free(rq->cwd);
        rq->cwd = NULL;
    }
    if (s->name && s->name[0] == '\0') { /* the key does not tell NULL from "" */
        free((void *)s->name);
        s->name = NULL;
    }
    return kpc__reader_done(r) && s->code != NULL && code_len > 0;
}

/* The section's head checked: its version, and the raw size in *raw_size. */
static bool read_head(const void *section, size_t size, uint32_t *version, uint64_t *raw_size)
{
    kpc__reader h;
    kpc__reader_init(&h, section, size < REQ_HEAD ? size : REQ_HEAD);
    const uint8_t *magic = kpc__get_bytes(&h, 4);
    *version = kpc__get_u32(&h);
    *raw_size = kpc__get_u64(&h);
    return kpc__reader_done(&h) && memcmp(magic, REQ_MAGIC, 4) == 0 && *raw_size <= REQ_MAX_RAW &&
           (*version == REQ_VERSION_ZSTD || (*version == REQ_VERSION_RAW && size - REQ_HEAD == *raw_size));
}

kpc_status kpc_request_decode(const void *section, size_t size, kpc_request *out)
{
    memset(out, 0, sizeof *out);
    const uint8_t *p = section;
    uint32_t version;
    uint64_t raw_size;
    if (!read_head(section, size, &version, &raw_size))
        return KPC_E_CORRUPT;
    kpc__reader r;
    uint8_t *raw = NULL;
    if (version == REQ_VERSION_RAW) {
        kpc__reader_init(&r, p + REQ_HEAD, raw_size);
    } else {
        unsigned long long content = ZSTD_getFrameContentSize(p + REQ_HEAD, size - REQ_HEAD);
        if (content != raw_size)
            return KPC_E_CORRUPT;
        if ((raw = malloc(raw_size ? raw_size : 1)) == NULL)
            return KPC_E_NOMEM;
        size_t got = ZSTD_decompress(raw, raw_size, p + REQ_HEAD, size - REQ_HEAD);
        if (ZSTD_isError(got) || got != raw_size) {
            free(raw);
            return KPC_E_CORRUPT;
        }
        kpc__reader_init(&r, raw, raw_size);
    }
    bool ok = parse_raw(&r, out);
    free(raw);
    if (!ok) {
        kpc_request_free(out);
        return KPC_E_CORRUPT;
    }
    return KPC_OK;
}

/* ---- comparing in place ---------------------------------------------------------------- */
/* Whether the next string (its length in len_bytes) is s's len bytes. */
static bool same_str(kpc__reader *r, int len_bytes, const char *s, size_t len)
{
    size_t got;
    const char *at = kpc__get_lstr(r, len_bytes, REQ_MAX_RAW, &got);
    return at != NULL && got == len && memcmp(at, s ? s : "", len) == 0;
}

static bool same_count(kpc__reader *r, size_t n)
{
    uint32_t got = kpc__get_u32(r);
    return !r->bad && got == n;
}

enum kpc_request_match kpc_request_compare(const void *section, size_t size, const kpc_source *src)
{
    uint32_t version;
    uint64_t raw_size;
    if (!read_head(section, size, &version, &raw_size) || version != REQ_VERSION_RAW)
        return KPC_REQUEST_UNREAD;
    kpc__reader r;
    kpc__reader_init(&r, (const uint8_t *)section + REQ_HEAD, raw_size);
    /* the fields the key is made of, in the order they were written; the hidden-option
     * variables and the working directory after them are the key's too, but as the
     * context's and the process's, not as anything a request can choose */
    bool same = same_str(&r, 8, src->code, src->code_len ? src->code_len : strlen(src->code)) &&
                same_str(&r, 4, src->name, slen(src->name)) && same_count(&r, src->num_options);
    for (size_t i = 0; same && i < src->num_options; i++)
        same = same_str(&r, 4, src->options[i], strlen(src->options[i]));
    same = same && same_count(&r, src->num_headers);
    for (size_t i = 0; same && i < src->num_headers; i++)
        same = same_str(&r, 4, src->header_names[i], strlen(src->header_names[i])) &&
               same_str(&r, 8, src->header_sources[i], strlen(src->header_sources[i]));
    same = same && same_count(&r, src->num_name_expressions);
    for (size_t i = 0; same && i < src->num_name_expressions; i++)
        same = same_str(&r, 4, src->name_expressions[i], strlen(src->name_expressions[i]));
    return same ? KPC_REQUEST_SAME : KPC_REQUEST_OTHER;
}

/* ---- the digest a record keeps of its request ----------------------------------------- */
#if defined(KPC_HAVE_REMOTE)
/* A count or a length alone. */
static void digest_count(crypto_generichash_state *st, uint64_t n)
{
    uint8_t b[8];
    kpc__store_le(b, n, 8); /* little-endian, whatever the host */
    crypto_generichash_update(st, b, sizeof b);
}

static void digest_field(crypto_generichash_state *st, const void *data, uint64_t len)
{
    digest_count(st, len);
    if (len)
        crypto_generichash_update(st, data, len);
}

static void digest_str(crypto_generichash_state *st, const char *s)
{
    digest_field(st, s ? s : "", slen(s));
}

bool kpc_request_digest(const kpc_key *key, const kpc_source *src, uint8_t out[32])
{
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, 32);
    digest_field(&st, key->bytes, sizeof key->bytes);
    digest_field(&st, src->code, src->code_len ? src->code_len : strlen(src->code));
    digest_str(&st, src->name);
    digest_count(&st, src->num_options);
    for (size_t i = 0; i < src->num_options; i++)
        digest_str(&st, src->options[i]);
    digest_count(&st, src->num_headers);
    for (size_t i = 0; i < src->num_headers; i++) {
        digest_str(&st, src->header_names[i]);
        digest_str(&st, src->header_sources[i]);
    }
    digest_count(&st, src->num_name_expressions);
    for (size_t i = 0; i < src->num_name_expressions; i++)
        digest_str(&st, src->name_expressions[i]);
    crypto_generichash_final(&st, out, 32);
    return true;
}
#else
bool kpc_request_digest(const kpc_key *key, const kpc_source *src, uint8_t out[32])
{
    (void)key, (void)src;
    memset(out, 0, 32);
    return false;
}
#endif
