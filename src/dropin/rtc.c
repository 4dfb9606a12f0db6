/*
 * rtc.c - the drop-in engine: a hipRTC/NVRTC program whose compile is answered by kpc.
 *
 * A program records what hiprtcCreateProgram and AddNameExpression were given. Its
 * compile keys on all of it with the options and the target (the option that names it,
 * else the vendor's default) and asks kpc_program_get on a compile-only context for that
 * target: a hit compiles nothing. What kpc cannot answer exactly goes to a real program
 * made from the same record ("materialized"): options kpc may not key
 * (the option table, platform/options.c), a target that cannot be told, a request the cache does not hold
 * (PTX of a cubin build, the code object of a bitcode build, a getter called before the
 * compile or after a failure),
 * odd arguments. From then on that program is the real one's.
 *
 * States: NEW (recorded) -> KPC (compiled by kpc: code, lowered names from the cache),
 * FAILED (kpc's compile failed: status COMPILATION and the compiler's log), or REAL
 * (every call goes to prog->real). Each program has its own lock (hipRTC and NVRTC let
 * threads use different programs at once). The process's side (the cache, a context per
 * target, the counters, the set of our handles) is rtc_process.c's.
 */
#define _GNU_SOURCE
#include "dropin/rtc.h"

#include "base/log.h"
#include "base/util.h"
#include "core/program.h"
#include "platform/options.h"

#include <bsd/string.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


enum prog_state { P_NEW, P_KPC, P_FAILED, P_REAL };

typedef struct rtc_prog {
    pthread_mutex_t lock; /* guards everything below */
    enum prog_state state;
    char *src, *name;
    int num_headers;
    char **headers, **include_names;
    char **exprs;
    size_t num_exprs;
    int num_opts; /* the compile's options, kept to materialize */
    char **opts;
    void *real;         /* P_REAL */
    kpc_program *kprog; /* P_KPC */
    int kind;           /* P_KPC: the code kind the cache holds */
    char *log;          /* P_FAILED: the compiler's log */
} rtc_prog;

/* One of our handles, else NULL (a real program, or garbage: never read through). */
static rtc_prog *ours(void *prog)
{
    return kpc_rtc_handle_known(prog) ? prog : NULL;
}

/* ---- options -------------------------------------------------------------------------- */
/* What each option means is the compiler's option table's answer (platform/options.h):
 * the drop-in keys what the table calls part of the key, a search directory, a file
 * read or the source directory switched off (the core records every file such a compile
 * reads and checks it on each hit, and keys the working directory for a relative path),
 * takes the target from a TARGET row, and forwards everything else. */

/* ---- recording, materializing ------------------------------------------------------------- */
static char **dup_strv(const char *const *v, size_t n, bool *ok)
{
    if (n == 0)
        return NULL;
    char **out = calloc(n, sizeof *out);
    if (out == NULL) {
        *ok = false;
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        if (v[i] && (out[i] = strdup(v[i])) == NULL)
            *ok = false;
    return out;
}

static void free_strv(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

static void prog_free(rtc_prog *p)
{
    free(p->src);
    free(p->name);
    free_strv(p->headers, (size_t)p->num_headers);
    free_strv(p->include_names, (size_t)p->num_headers);
    free_strv(p->exprs, p->num_exprs);
    free_strv(p->opts, (size_t)p->num_opts);
    free(p->log);
    kpc_program_release(p->kprog);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

/* Make the real program of p (p->lock held): created from the record, its names added,
 * and compiled with the kept options when p was compiled. The status of that compile is
 * what the caller's request sees (materializing after kpc's compile repeats it). */
static int materialize(const rtc_vendor *v, rtc_prog *p)
{
    if (p->state == P_REAL)
        return RTC_SUCCESS;
    const rtc_real *r = kpc_real_get(v);
    if (r == NULL)
        return RTC_ERROR_INTERNAL_ERROR;
    void *real = NULL;
    int res = r->create(&real, p->src, p->name, p->num_headers, (const char *const *)p->headers,
                        (const char *const *)p->include_names);
    for (size_t i = 0; res == RTC_SUCCESS && i < p->num_exprs; i++)
        res = r->add_name(real, p->exprs[i]);
    if (res != RTC_SUCCESS) {
        if (real)
            r->destroy(&real);
        return res;
    }
    bool compiled = p->state != P_NEW;
    p->real = real;
    p->state = P_REAL;
    kpc_program_release(p->kprog);
    p->kprog = NULL;
    if (compiled) {
        atomic_fetch_add(&kpc_rtc_counters.materialized, 1);
        r->compile(real, p->num_opts, (const char *const *)p->opts);
    }
    return RTC_SUCCESS;
}

/* The real program of prog, for a call kpc does not answer; *res says why there is none. */
static void *real_of(const rtc_vendor *v, rtc_prog *p, int *res)
{
    *res = materialize(v, p);
    return *res == RTC_SUCCESS ? p->real : NULL;
}

void *kpc_rtc_real_program(const rtc_vendor *v, void *prog)
{
    rtc_prog *p = ours(prog);
    if (p == NULL)
        return prog;
    pthread_mutex_lock(&p->lock);
    int res;
    void *real = real_of(v, p, &res);
    pthread_mutex_unlock(&p->lock);
    return real;
}

/* ---- the API ---------------------------------------------------------------------------- */
int kpc_rtc_create(const rtc_vendor *v, void **prog, const char *src, const char *name, int num_headers,
               const char *const *headers, const char *const *include_names)
{
    atomic_store(&kpc_rtc_counters.vendor, v);
    const rtc_real *r;
    bool odd = prog == NULL || num_headers < 0 ||
               (num_headers > 0 && (headers == NULL || include_names == NULL));
    /* hipRTC 5.2 aborts on a NULL source, header or header name (a C++ exception out of
     * the C API): refused here instead, as bad input */
    for (int i = 0; !odd && i < num_headers; i++)
        if (headers[i] == NULL || include_names[i] == NULL)
            return RTC_ERROR_INVALID_INPUT;
    if (src == NULL && prog != NULL)
        return RTC_ERROR_INVALID_INPUT;
    /* an empty source, header or header name: hipRTC 5.2 refuses it at create
     * (INVALID_INPUT), which kpc_program_get would only say at the compile, with a log
     * line on the application's stderr; the real library's create answers it, as it does
     * for NVRTC, whatever it says */
    odd = odd || src[0] == '\0';
    for (int i = 0; !odd && i < num_headers; i++)
        odd = headers[i][0] == '\0' || include_names[i][0] == '\0';
    /* a NULL name is NVRTC's "default_program"; hipRTC compiles it as it compiles any
     * (its diagnostics name the file "CompileSource" whatever the name): keyed as NULL */
    if (kpc_rtc_disabled() || odd) /* the real library's own program, and its own answer */
        return (r = kpc_real_get(v)) ? r->create(prog, src, name, num_headers, headers, include_names)
                                     : RTC_ERROR_INTERNAL_ERROR;
    rtc_prog *p = calloc(1, sizeof *p);
    if (p == NULL)
        return RTC_ERROR_OUT_OF_MEMORY;
    bool ok = true;
    pthread_mutex_init(&p->lock, NULL);
    p->src = strdup(src);
    p->name = name ? strdup(name) : NULL; /* materialize hands the real library the same */
    p->num_headers = num_headers;
    p->headers = dup_strv(headers, (size_t)num_headers, &ok);
    p->include_names = dup_strv(include_names, (size_t)num_headers, &ok);
    if (!ok || p->src == NULL || (name && p->name == NULL) || !kpc_rtc_handle_add(p)) {
        prog_free(p);
        return RTC_ERROR_OUT_OF_MEMORY;
    }
    *prog = p;
    return RTC_SUCCESS;
}

int kpc_rtc_add_name(const rtc_vendor *v, void *prog, const char *expr)
{
    rtc_prog *p = ours(prog);
    const rtc_real *r;
    if (p == NULL)
        return (r = kpc_real_get(v)) ? r->add_name(prog, expr) : RTC_ERROR_INTERNAL_ERROR;
    int res = RTC_SUCCESS;
    pthread_mutex_lock(&p->lock);
    if (p->state == P_NEW && expr != NULL) {
        char **grown = realloc(p->exprs, (p->num_exprs + 1) * sizeof *grown);
        if (grown)
            p->exprs = grown;
        if (grown == NULL || (grown[p->num_exprs] = strdup(expr)) == NULL)
            res = RTC_ERROR_OUT_OF_MEMORY;
        else
            p->num_exprs++;
    } else { /* NULL, or after the compile: the real library says what it says */
        void *real = real_of(v, p, &res);
        if (real)
            res = kpc_real_get(v)->add_name(real, expr);
    }
    pthread_mutex_unlock(&p->lock);
    return res;
}

/* Split options into the target and the rest; false when kpc must not key them. */
static bool split_options(const rtc_vendor *v, int n, const char *const *opts, const char **target,
                          const char **rest, size_t *num_rest)
{
    const kpc_option_table *table = kpc_options_for(v->name);
    *target = NULL;
    *num_rest = 0;
    for (int i = 0; i < n; i++) {
        if (opts[i][0] == '\0') { /* an empty option: the compiler gets it as the real one would */
            rest[(*num_rest)++] = opts[i];
            continue;
        }
        kpc_option o;
        kpc_option_classify(table, opts, (size_t)n, (size_t)i, &o);
        bool path = o.cls == KPC_OPTION_SEARCH_DIR || o.cls == KPC_OPTION_READ_FILE;
        if (o.cls == KPC_OPTION_TARGET) {
            if (*target != NULL || o.value == NULL || *o.value == '\0')
                return false; /* two targets, or a spelling without one: the real compiler judges */
            *target = o.value;
        } else if (path && o.value == NULL) {
            return false; /* no path: let the real compiler judge */
        } else if (path || o.cls == KPC_OPTION_KEY || o.cls == KPC_OPTION_NO_SOURCE_DIR) {
            for (size_t k = 0; k < o.used; k++) /* "-I" "dir": the path is keyed with it */
                rest[(*num_rest)++] = opts[i + (int)k];
        } else {
            KPC_LOG(KPC_LOG_INFO, "%s: option \"%s\" is not keyed: forwarding the compile", v->name,
                    opts[i]);
            return false;
        }
        i += (int)o.used - 1;
    }
    return true;
}

/* Compile through kpc (p->lock held): RTC_SUCCESS or COMPILATION, or -1 to forward. */
static int compile_kpc(const rtc_vendor *v, rtc_prog *p)
{
    const char **rest = calloc((size_t)p->num_opts + 1, sizeof *rest);
    const char *target = NULL;
    size_t num_rest = 0;
    int res = -1;
    if (rest == NULL || !split_options(v, p->num_opts, (const char *const *)p->opts, &target, rest, &num_rest))
        goto out;
    kpc_context *ctx = kpc_rtc_context_for(v, target);
    if (ctx == NULL)
        goto out;
    kpc_source src = {
        .code = p->src,
        .name = p->name ? p->name : v->default_name,
        .options = rest,
        .num_options = num_rest,
        .header_names = (const char *const *)p->include_names,
        .header_sources = (const char *const *)p->headers,
        .num_headers = (size_t)p->num_headers,
        .name_expressions = (const char *const *)p->exprs,
        .num_name_expressions = p->num_exprs,
    };
    kpc_program *kp = NULL;
    kpc_status s = kpc_program_get(ctx, &src, &kp);
    if (s == KPC_OK) {
        p->kprog = kp;
        p->kind = kpc_program_is_bitcode(kp) ? RTC_CODE_BITCODE : v->code_kind(kpc_context_target(ctx));
        p->state = P_KPC;
        res = RTC_SUCCESS;
    } else if (s == KPC_E_COMPILE && kpc_last_log()[0] != '\0' && strncmp(kpc_last_log(), "hipRTC: ", 8) != 0 &&
               strncmp(kpc_last_log(), "NVRTC: ", 7) != 0) {
        /* a compiler's own diagnostics; the "hipRTC: "/"NVRTC: " line platform/compile.c
         * writes when the compiler said nothing is forwarded: the real one answers */
        p->log = strdup(kpc_last_log());
        if (p->log) {
            p->state = P_FAILED;
            res = RTC_ERROR_COMPILATION;
        }
    } else {
        KPC_LOG(KPC_LOG_INFO, "%s: kpc_program_get: %s: forwarding the compile", v->name,
                kpc_status_str(s));
    }
out:
    free(rest);
    return res;
}

int kpc_rtc_compile(const rtc_vendor *v, void *prog, int num_options, const char *const *options)
{
    rtc_prog *p = ours(prog);
    const rtc_real *r;
    atomic_fetch_add(&kpc_rtc_counters.compiles, 1);
    if (p == NULL) { /* the real library's own program (KPC_DISABLE=1, odd create arguments) */
        atomic_fetch_add(&kpc_rtc_counters.forwarded, 1);
        return (r = kpc_real_get(v)) ? r->compile(prog, num_options, options) : RTC_ERROR_INTERNAL_ERROR;
    }
    bool odd = num_options < 0 || (num_options > 0 && options == NULL);
    for (int i = 0; !odd && i < num_options; i++)
        odd = options[i] == NULL;
    int res = -1;
    pthread_mutex_lock(&p->lock);
    if (p->state == P_NEW && !odd) {
        bool ok = true;
        p->opts = dup_strv(options, (size_t)num_options, &ok);
        p->num_opts = num_options;
        res = ok ? compile_kpc(v, p) : RTC_ERROR_OUT_OF_MEMORY;
        if (res == RTC_SUCCESS || res == RTC_ERROR_COMPILATION)
            atomic_fetch_add(&kpc_rtc_counters.kpc, 1);
        else if (res < 0) { /* forward: the real program, compiled with the same options */
            p->state = P_NEW;
            res = materialize(v, p);
            if (res == RTC_SUCCESS)
                res = kpc_real_get(v)->compile(p->real, num_options, options);
            atomic_fetch_add(&kpc_rtc_counters.forwarded, 1);
        }
    } else {
        void *real = real_of(v, p, &res);
        if (real)
            res = kpc_real_get(v)->compile(real, num_options, options);
        atomic_fetch_add(&kpc_rtc_counters.forwarded, 1);
    }
    pthread_mutex_unlock(&p->lock);
    return res;
}

/* Whether the real library has the calls of code kind (hipRTC 5.2 has no bitcode calls). */
static bool real_has_kind(const rtc_vendor *v, int kind)
{
    const rtc_real *r = kpc_real_get(v);
    return r && r->code_size[kind] && r->code[kind];
}

int kpc_rtc_code_size(const rtc_vendor *v, void *prog, int kind, size_t *size)
{
    rtc_prog *p = ours(prog);
    const rtc_real *r = p ? NULL : kpc_real_get(v);
    if (p == NULL)
        return r && r->code_size[kind] ? r->code_size[kind](prog, size) : RTC_ERROR_INTERNAL_ERROR;
    int res;
    pthread_mutex_lock(&p->lock);
    if (p->state == P_KPC && p->kind == kind && size != NULL) {
        kpc_program_code(p->kprog, size);
        res = RTC_SUCCESS;
    } else if (p->state == P_FAILED && v->empty_code_after_failure && kind != RTC_CODE_BITCODE && size != NULL) {
        *size = 0;
        res = RTC_SUCCESS;
    } else if (!real_has_kind(v, kind)) {
        res = RTC_ERROR_INTERNAL_ERROR; /* as the call the real library lacks: nothing to make */
    } else {
        void *real = real_of(v, p, &res);
        if (real)
            res = kpc_real_get(v)->code_size[kind](real, size);
    }
    pthread_mutex_unlock(&p->lock);
    return res;
}

int kpc_rtc_code(const rtc_vendor *v, void *prog, int kind, char *code)
{
    rtc_prog *p = ours(prog);
    const rtc_real *r = p ? NULL : kpc_real_get(v);
    if (p == NULL)
        return r && r->code[kind] ? r->code[kind](prog, code) : RTC_ERROR_INTERNAL_ERROR;
    int res;
    pthread_mutex_lock(&p->lock);
    if (p->state == P_KPC && p->kind == kind && code != NULL) {
        size_t size = 0;
        const void *bytes = kpc_program_code(p->kprog, &size);
        memcpy(code, bytes, size);
        res = RTC_SUCCESS;
    } else if (!real_has_kind(v, kind)) {
        res = RTC_ERROR_INTERNAL_ERROR;
    } else {
        void *real = real_of(v, p, &res);
        if (real)
            res = kpc_real_get(v)->code[kind](real, code);
    }
    pthread_mutex_unlock(&p->lock);
    return res;
}

int kpc_rtc_lowered(const rtc_vendor *v, void *prog, const char *expr, const char **lowered)
{
    rtc_prog *p = ours(prog);
    const rtc_real *r;
    if (p == NULL)
        return (r = kpc_real_get(v)) ? r->lowered(prog, expr, lowered) : RTC_ERROR_INTERNAL_ERROR;
    int res;
    pthread_mutex_lock(&p->lock);
    if (p->state == P_KPC) {
        /* the answers the real library gives, from the cached table: a name the compiler
         * could not lower ("") and one never added (NULL) are NAME_EXPRESSION_NOT_VALID */
        const char *name = expr && lowered ? kpc_program_lowered_name(p->kprog, expr) : NULL;
        if (expr == NULL || lowered == NULL)
            res = RTC_ERROR_INVALID_INPUT;
        else if (name == NULL || name[0] == '\0')
            res = RTC_ERROR_NAME_EXPRESSION_NOT_VALID;
        else
            *lowered = name, res = RTC_SUCCESS;
    } else {
        void *real = real_of(v, p, &res);
        if (real)
            res = kpc_real_get(v)->lowered(real, expr, lowered);
    }
    pthread_mutex_unlock(&p->lock);
    return res;
}

/* The log kpc answers with: the failed compile's text, or the successful one's (its
 * warnings, kept in the record: "" when the compiler said nothing). */
static const char *kpc_log_text(const rtc_prog *p)
{
    return p->state == P_FAILED ? p->log : kpc_program_build_log(p->kprog);
}

static size_t kpc_log_size(const rtc_vendor *v, const rtc_prog *p)
{
    return strlen(kpc_log_text(p)) + (v->log_counts_nul ? 1 : 0);
}

int kpc_rtc_log_size(const rtc_vendor *v, void *prog, size_t *size)
{
    rtc_prog *p = ours(prog);
    const rtc_real *r;
    if (p == NULL)
        return (r = kpc_real_get(v)) ? r->log_size(prog, size) : RTC_ERROR_INTERNAL_ERROR;
    int res;
    pthread_mutex_lock(&p->lock);
    if ((p->state == P_KPC || p->state == P_FAILED) && size != NULL) {
        *size = kpc_log_size(v, p);
        res = RTC_SUCCESS;
    } else {
        void *real = real_of(v, p, &res);
        if (real)
            res = kpc_real_get(v)->log_size(real, size);
    }
    pthread_mutex_unlock(&p->lock);
    return res;
}

int kpc_rtc_log(const rtc_vendor *v, void *prog, char *log)
{
    rtc_prog *p = ours(prog);
    const rtc_real *r;
    if (p == NULL)
        return (r = kpc_real_get(v)) ? r->log(prog, log) : RTC_ERROR_INTERNAL_ERROR;
    int res;
    pthread_mutex_lock(&p->lock);
    if ((p->state == P_KPC || p->state == P_FAILED) && log != NULL) {
        size_t n = kpc_log_size(v, p);
        if (n > 0)
            memcpy(log, kpc_log_text(p), n); /* the NUL too where counted */
        res = RTC_SUCCESS;
    } else {
        void *real = real_of(v, p, &res);
        if (real)
            res = kpc_real_get(v)->log(real, log);
    }
    pthread_mutex_unlock(&p->lock);
    return res;
}

int kpc_rtc_destroy(const rtc_vendor *v, void **prog)
{
    rtc_prog *p = prog ? ours(*prog) : NULL;
    const rtc_real *r;
    if (p == NULL)
        return (r = kpc_real_get(v)) ? r->destroy(prog) : RTC_ERROR_INTERNAL_ERROR;
    int res = RTC_SUCCESS;
    kpc_rtc_handle_remove(p);
    if (p->real)
        res = kpc_real_get(v)->destroy(&p->real);
    prog_free(p);
    *prog = NULL;
    return res;
}
