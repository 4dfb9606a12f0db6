/*
 * request_codec.c - the request a record keeps beside its code object, so that `kpc replay`
 * can build it again for a new compiler or another target.
 *
 * A request is everything kpc_program_get was given (source text, name, options,
 * in-memory headers, name expressions) plus the values of the environment variables the
 * compiler turns into hidden options (the platform's key_env), which enter the key: a
 * replay must set them as the application had them, or it would build objects under
 * keys nobody asks for. It is serialized little-endian, every string with its length
 * (no NUL needed, none assumed), then compressed with zstd (libzstd) as one frame:
 *
 *   section   "KPRQ" | u32 version (1) | u64 raw size | zstd frame of the raw bytes
 *   raw       u64 len + source text | u32 len + name
 *             | u32 count, count x (u32 len + option)
 *             | u32 count, count x (u32 len + header name, u64 len + header text)
 *             | u32 count, count x (u32 len + name expression)
 *             | u32 count, count x (u32 len + variable name, u8 set, u32 len + value)
 *             | u32 len + working directory (relative -I paths and include manifests
 *               are resolved from it)
 *
 * Invariants: decode trusts nothing (the section sits in a checksummed record, but a
 * pack may come from anywhere): every length is checked against what is left, the raw
 * size is bounded (1 GiB) and must match the frame's content size exactly, and trailing
 * bytes are refused. Format: docs/file-format.md ("The request section").
 */
#include "storage/request_codec.h"
#include "base/log.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#define REQ_MAGIC "KPRQ"
#define REQ_VERSION 1u
#define REQ_HEAD 16u
#define REQ_MAX_RAW (1ull << 30)
#define REQ_LEVEL 3 /* zstd's default: ~1-2 ms for a 100 KB source, a few % of a compile */

/* ---- writing ------------------------------------------------------------------------- */
typedef struct wbuf {
    uint8_t *p;
    size_t len, cap;
    bool failed;
} wbuf;

static void put(wbuf *w, const void *data, size_t n)
{
    if (w->failed || n == 0) /* n == 0: data may be NULL (an absent name) */
        return;
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->len + n)
            cap *= 2;
        uint8_t *p = realloc(w->p, cap);
        if (p == NULL) {
            w->failed = true;
            return;
        }
        w->p = p, w->cap = cap;
    }
    memcpy(w->p + w->len, data, n);
    w->len += n;
}

static void put_u(wbuf *w, uint64_t v, int bytes)
{
    uint8_t b[8];
    for (int i = 0; i < bytes; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, (size_t)bytes);
}

static void put_str(wbuf *w, const char *s, size_t len, int len_bytes)
{
    put_u(w, len, len_bytes);
    put(w, s, len);
}

static size_t slen(const char *s) { return s ? strlen(s) : 0; }

kpc_status kpc_request_encode(const kpc_source *src, const char *const *env_names, void **out,
                              size_t *size)
{
    *out = NULL;
    *size = 0;
    if (src == NULL || src->code == NULL)
        return KPC_E_INVALID;
    wbuf w = {0};
    size_t code_len = src->code_len ? src->code_len : strlen(src->code);
    put_str(&w, src->code, code_len, 8);
    put_str(&w, src->name, slen(src->name), 4);
    put_u(&w, src->num_options, 4);
    for (size_t i = 0; i < src->num_options; i++)
        put_str(&w, src->options[i], slen(src->options[i]), 4);
    put_u(&w, src->num_headers, 4);
    for (size_t i = 0; i < src->num_headers; i++) {
        put_str(&w, src->header_names[i], slen(src->header_names[i]), 4);
        put_str(&w, src->header_sources[i], slen(src->header_sources[i]), 8);
    }
    put_u(&w, src->num_name_expressions, 4);
    for (size_t i = 0; i < src->num_name_expressions; i++)
        put_str(&w, src->name_expressions[i], slen(src->name_expressions[i]), 4);
    size_t nenv = 0;
    while (env_names && env_names[nenv])
        nenv++;
    put_u(&w, nenv, 4);
    for (size_t i = 0; i < nenv; i++) {
        const char *v = getenv(env_names[i]);
        put_str(&w, env_names[i], strlen(env_names[i]), 4);
        put_u(&w, v != NULL, 1);
        put_str(&w, v, slen(v), 4);
    }
    char cwd[4096];
    if (getcwd(cwd, sizeof cwd) == NULL)
        cwd[0] = '\0'; /* unknown: a replay resolves relative paths from its own */
    put_str(&w, cwd, strlen(cwd), 4);
    if (w.failed || w.len > REQ_MAX_RAW) {
        free(w.p);
        return w.failed ? KPC_E_NOMEM : KPC_E_INVALID;
    }
    size_t bound = ZSTD_compressBound(w.len);
    uint8_t *sec = malloc(REQ_HEAD + bound);
    if (sec == NULL) {
        free(w.p);
        return KPC_E_NOMEM;
    }
    memcpy(sec, REQ_MAGIC, 4);
    for (int i = 0; i < 4; i++)
        sec[4 + i] = (uint8_t)(REQ_VERSION >> (8 * i));
    for (int i = 0; i < 8; i++)
        sec[8 + i] = (uint8_t)((uint64_t)w.len >> (8 * i));
    size_t z = ZSTD_compress(sec + REQ_HEAD, bound, w.p, w.len, REQ_LEVEL);
    free(w.p);
    if (ZSTD_isError(z)) {
        KPC_LOG(KPC_LOG_WARN, "ZSTD_compress: %s: the request is not kept", ZSTD_getErrorName(z));
        free(sec);
        return KPC_E_NOMEM;
    }
    *out = sec;
    *size = REQ_HEAD + z;
    return KPC_OK;
}

/* ---- reading ------------------------------------------------------------------------- */
typedef struct rbuf {
    const uint8_t *p;
    size_t left;
    bool bad;
} rbuf;

static uint64_t get_u(rbuf *r, int bytes)
{
    if (r->bad || r->left < (size_t)bytes) {
        r->bad = true;
        return 0;
    }
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | r->p[i];
    r->p += bytes;
    r->left -= (size_t)bytes;
    return v;
}

/* A string of a length given in len_bytes: malloc'd and NUL-terminated; NULL when bad. */
static char *get_str(rbuf *r, int len_bytes, size_t *len_out)
{
    uint64_t n = get_u(r, len_bytes);
    if (r->bad || n > r->left) {
        r->bad = true;
        return NULL;
    }
    char *s = malloc(n + 1);
    if (s == NULL) {
        r->bad = true;
        return NULL;
    }
    memcpy(s, r->p, n);
    s[n] = '\0';
    r->p += n;
    r->left -= n;
    if (len_out)
        *len_out = n;
    return s;
}

/* An array of count pointers, every one NULL; NULL when count is implausible. */
static char **get_array(rbuf *r, uint64_t count, size_t min_each)
{
    if (r->bad || count > r->left / (min_each ? min_each : 1)) {
        r->bad = true;
        return NULL;
    }
    char **a = calloc(count ? count : 1, sizeof *a);
    if (a == NULL)
        r->bad = true;
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

static bool parse_raw(rbuf *r, kpc_request *rq)
{
    kpc_source *s = &rq->src;
    size_t code_len = 0;
    s->code = get_str(r, 8, &code_len);
    s->code_len = code_len;
    s->name = get_str(r, 4, NULL);
    uint64_t n = get_u(r, 4);
    char **opts = get_array(r, n, 4);
    s->options = (const char *const *)opts;
    s->num_options = opts ? n : 0;
    for (size_t i = 0; opts && i < n && !r->bad; i++)
        opts[i] = get_str(r, 4, NULL);
    n = get_u(r, 4);
    char **hn = get_array(r, n, 12), **hs = hn ? get_array(r, n, 1) : NULL;
    s->header_names = (const char *const *)hn;
    s->header_sources = (const char *const *)hs;
    s->num_headers = hn && hs ? n : 0;
    for (size_t i = 0; hn && hs && i < n && !r->bad; i++) {
        hn[i] = get_str(r, 4, NULL);
        hs[i] = get_str(r, 8, NULL);
    }
    n = get_u(r, 4);
    char **ex = get_array(r, n, 4);
    s->name_expressions = (const char *const *)ex;
    s->num_name_expressions = ex ? n : 0;
    for (size_t i = 0; ex && i < n && !r->bad; i++)
        ex[i] = get_str(r, 4, NULL);
    n = get_u(r, 4);
    rq->env_names = get_array(r, n, 9);
    rq->env_values = rq->env_names ? get_array(r, n, 1) : NULL;
    rq->num_env = rq->env_names && rq->env_values ? n : 0;
    for (size_t i = 0; rq->num_env && i < n && !r->bad; i++) {
        rq->env_names[i] = get_str(r, 4, NULL);
        bool set = get_u(r, 1) != 0;
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
    return !r->bad && r->left == 0 && s->code != NULL && code_len > 0;
}

kpc_status kpc_request_decode(const void *section, size_t size, kpc_request *out)
{
    memset(out, 0, sizeof *out);
    const uint8_t *p = section;
    if (section == NULL || size < REQ_HEAD || memcmp(p, REQ_MAGIC, 4) != 0)
        return KPC_E_CORRUPT;
    rbuf h = {p + 4, 12, false};
    uint64_t version = get_u(&h, 4), raw_size = get_u(&h, 8);
    if (version != REQ_VERSION || raw_size > REQ_MAX_RAW)
        return KPC_E_CORRUPT;
    unsigned long long content = ZSTD_getFrameContentSize(p + REQ_HEAD, size - REQ_HEAD);
    if (content != raw_size)
        return KPC_E_CORRUPT;
    uint8_t *raw = malloc(raw_size ? raw_size : 1);
    if (raw == NULL)
        return KPC_E_NOMEM;
    size_t got = ZSTD_decompress(raw, raw_size, p + REQ_HEAD, size - REQ_HEAD);
    if (ZSTD_isError(got) || got != raw_size) {
        free(raw);
        return KPC_E_CORRUPT;
    }
    rbuf r = {raw, raw_size, false};
    bool ok = parse_raw(&r, out);
    free(raw);
    if (!ok) {
        kpc_request_free(out);
        return KPC_E_CORRUPT;
    }
    return KPC_OK;
}
