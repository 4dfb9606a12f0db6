/*
 * fake_rtc.c - a tiny stand-in for NVRTC (built with -DFAKE_NVRTC as libnvrtc.so.13) or
 * for a hipRTC with the link API (ROCm 5.3+; hipRTC 5.2 has none), so that the drop-ins'
 * forwarding and keying are tested where there is no CUDA and no newer ROCm.
 *
 * A "compile" is deterministic: the cubin and PTX are bytes derived from everything the
 * program was given (FNV-1a), the target from -arch=/--gpu-architecture= (default
 * compute_75), the files its `#include "X"` find in -I/--include-path directories.
 * "#error" in the source is a compile error with a log; "--bogus" is an
 * invalid option. Each compile appends a line to $FAKE_RTC_COUNT, so a test counts the
 * compiles the real library ran.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FAKE_NVRTC
#define F(name) nvrtc##name
#define LOG_NUL 1
#else
#define F(name) hiprtc##name
#define LOG_NUL 0
#endif
#define API __attribute__((visibility("default")))

typedef struct fprog {
    char *src, *name;
    uint64_t inputs; /* hash of source, name and headers */
    char *exprs[16];
    char lowered[16][128]; /* valid until the program is destroyed, as NVRTC's */
    int num_exprs;
    int compiled; /* 0 no, 1 yes, -1 failed */
    char target[32];
    uint64_t hash;
    char log[512];
} fprog;

static uint64_t fnv(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

API const char *F(GetErrorString)(int r)
{
    static _Thread_local char buf[48]; /* threads call it at once */
    snprintf(buf, sizeof buf, "FAKE_RTC_RESULT_%d", r);
    return buf;
}

API int F(Version)(int *major, int *minor)
{
    if (!major || !minor)
        return 3;
    *major = 13;
    *minor = 0;
    return 0;
}

API int F(CreateProgram)(fprog **prog, const char *src, const char *name, int nh, const char *const *hs,
                         const char *const *hn)
{
    if (prog == NULL)
        return 4;
    if (src == NULL || nh < 0 || (nh > 0 && (!hs || !hn)))
        return 3;
    fprog *p = calloc(1, sizeof *p);
    p->src = strdup(src);
    p->name = strdup(name ? name : "default_program");
    p->inputs = fnv(fnv(14695981039346656037ull, src, strlen(src)), p->name, strlen(p->name));
    for (int i = 0; i < nh; i++)
        p->inputs = fnv(fnv(p->inputs, hn[i], strlen(hn[i])), hs[i], strlen(hs[i]));
    *prog = p;
    return 0;
}

API int F(AddNameExpression)(fprog *p, const char *e)
{
    if (!p)
        return 4;
    if (!e)
        return 3;
    if (p->compiled)
        return 8;
    if (p->num_exprs < 16)
        p->exprs[p->num_exprs++] = strdup(e);
    return 0;
}

/* h mixed with the contents of each dir/X that the source includes as "X"; dir NULL: h. */
static uint64_t include_dir(uint64_t h, const char *src, const char *dir)
{
    for (const char *q = src; dir && (q = strstr(q, "#include \"")) != NULL;) {
        q += 10;
        const char *e = strchr(q, '"');
        if (e == NULL)
            break;
        char path[4096], buf[4096];
        snprintf(path, sizeof path, "%s/%.*s", dir, (int)(e - q), q);
        FILE *f = fopen(path, "rb");
        if (f != NULL) {
            size_t got = fread(buf, 1, sizeof buf, f);
            fclose(f);
            h = fnv(h, buf, got);
        }
    }
    return h;
}

API int F(CompileProgram)(fprog *p, int n, const char *const *opts)
{
    if (!p)
        return 4;
    if (n < 0 || (n > 0 && !opts))
        return 3;
    const char *count = getenv("FAKE_RTC_COUNT");
    if (count) {
        FILE *f = fopen(count, "a");
        if (f) {
            fprintf(f, "compile %s\n", p->name);
            fclose(f);
        }
    }
    snprintf(p->target, sizeof p->target, "compute_75");
    uint64_t h = p->inputs;
    for (int i = 0; i < n; i++) {
        if (strcmp(opts[i], "--bogus") == 0) {
            snprintf(p->log, sizeof p->log, "fake: error: unrecognized option %s\n", opts[i]);
            p->compiled = -1;
            return 5;
        }
        const char *t = strncmp(opts[i], "-arch=", 6) == 0                ? opts[i] + 6
                        : strncmp(opts[i], "--gpu-architecture=", 19) == 0 ? opts[i] + 19
                        : strncmp(opts[i], "--offload-arch=", 15) == 0     ? opts[i] + 15
                                                                           : NULL;
        if (t)
            snprintf(p->target, sizeof p->target, "%s", t);
        else /* order-free, as a compiler's options mostly are */
            h ^= fnv(14695981039346656037ull, opts[i], strlen(opts[i]));
    }
    for (int i = 0; i < n; i++) /* what the include directories give the source */
        h = include_dir(h, p->src, strcmp(opts[i], "-I") == 0 && i + 1 < n ? opts[++i]
                                   : strncmp(opts[i], "--include-path=", 15) == 0 ? opts[i] + 15
                                   : strncmp(opts[i], "-I", 2) == 0               ? opts[i] + 2
                                                                                  : NULL);
    for (int i = 0; i < p->num_exprs; i++)
        h = fnv(h, p->exprs[i], strlen(p->exprs[i]));
    p->hash = fnv(h, p->target, strlen(p->target));
    if (strstr(p->src, "#error")) {
        snprintf(p->log, sizeof p->log,
                 "%s(1): error: #error directive: \"broken\"\n\n1 error detected in the compilation of \"%s\".\n",
                 p->name, p->name);
        p->compiled = -1;
        return 6;
    }
    p->compiled = 1;
    return 0;
}

static int sm(const fprog *p)
{
    return strncmp(p->target, "sm_", 3) == 0;
}

static int code_size(fprog *p, size_t *s, int want_sm)
{
    if (!p)
        return 4;
    if (!s)
        return 3;
    *s = p->compiled == 1 && (!want_sm || sm(p)) ? 64 + (p->hash % 64) : 0;
    return 0;
}

static int code(fprog *p, char *out, int want_sm)
{
    if (!p)
        return 4;
    if (!out)
        return 3;
    size_t n;
    code_size(p, &n, want_sm);
    for (size_t i = 0; i < n; i++)
        out[i] = (char)((p->hash >> (i % 8 * 8)) + i);
    if (n && !want_sm) /* PTX: text with its NUL */
        snprintf(out, n, "// fake PTX %s %016llx\n", p->target, (unsigned long long)p->hash);
    return 0;
}

#ifdef FAKE_NVRTC
API int nvrtcGetCUBINSize(fprog *p, size_t *s) { return code_size(p, s, 1); }
API int nvrtcGetCUBIN(fprog *p, char *c) { return code(p, c, 1); }
API int nvrtcGetPTXSize(fprog *p, size_t *s) { return code_size(p, s, 0); }
API int nvrtcGetPTX(fprog *p, char *c) { return code(p, c, 0); }
static const int archs[] = {75, 80, 86, 89, 90, 100, 120};
API int nvrtcGetNumSupportedArchs(int *n)
{
    *n = (int)(sizeof archs / sizeof archs[0]);
    return 0;
}
API int nvrtcGetSupportedArchs(int *a)
{
    memcpy(a, archs, sizeof archs);
    return 0;
}
API int nvrtcGetLTOIRSize(fprog *p, size_t *s)
{
    if (!p || !s)
        return 3;
    *s = 0;
    return 0;
}
#else
API int hiprtcGetCodeSize(fprog *p, size_t *s) { return code_size(p, s, 0); }
API int hiprtcGetCode(fprog *p, char *c) { return code(p, c, 0); }

typedef struct flink {
    uint64_t h;
    char out[32];
} flink;
API int hiprtcLinkCreate(unsigned n, int *o, void **v, flink **state)
{
    (void)o, (void)v;
    if (!state)
        return 3;
    *state = calloc(1, sizeof **state);
    (*state)->h = 14695981039346656037ull + n;
    return 0;
}
API int hiprtcLinkAddData(flink *s, int type, void *image, size_t size, const char *name, unsigned n, int *o,
                          void **v)
{
    (void)n, (void)o, (void)v;
    if (!s || !image)
        return 3;
    s->h = fnv(fnv(s->h, image, size), name ? name : "", name ? strlen(name) : 0) + (uint64_t)type;
    return 0;
}
API int hiprtcLinkAddFile(flink *s, int type, const char *path, unsigned n, int *o, void **v)
{
    return hiprtcLinkAddData(s, type, (void *)path, path ? strlen(path) : 0, path, n, o, v);
}
API int hiprtcLinkComplete(flink *s, void **bin, size_t *size)
{
    if (!s || !bin || !size)
        return 3;
    snprintf(s->out, sizeof s->out, "LINKED %016llx", (unsigned long long)s->h);
    *bin = s->out;
    *size = strlen(s->out);
    return 0;
}
API int hiprtcLinkDestroy(flink *s)
{
    free(s);
    return 0;
}
#endif

API int F(GetLoweredName)(fprog *p, const char *e, const char **out)
{
    if (!p)
        return 4;
    if (!e || !out)
        return 3;
    if (p->compiled != 1)
        return 9;
    for (int i = 0; i < p->num_exprs; i++)
        if (strcmp(p->exprs[i], e) == 0) {
            char *n = p->lowered[i];
            snprintf(n, sizeof p->lowered[i], "_Z%zu%s_fake", strlen(e), e);
            for (char *c = n; *c; c++)
                if (*c == '<' || *c == '>' || *c == ':' || *c == ',' || *c == ' ')
                    *c = '_';
            *out = n;
            return 0;
        }
    return 10;
}

API int F(GetProgramLogSize)(fprog *p, size_t *s)
{
    if (!p)
        return 4;
    if (!s)
        return 3;
    *s = strlen(p->log) + LOG_NUL;
    return 0;
}

API int F(GetProgramLog)(fprog *p, char *log)
{
    if (!p)
        return 4;
    if (!log)
        return 3;
    memcpy(log, p->log, strlen(p->log) + LOG_NUL);
    return 0;
}

API int F(DestroyProgram)(fprog **p)
{
    if (!p || !*p)
        return 4;
    for (int i = 0; i < (*p)->num_exprs; i++)
        free((*p)->exprs[i]);
    free((*p)->src);
    free((*p)->name);
    free(*p);
    *p = NULL;
    return 0;
}
