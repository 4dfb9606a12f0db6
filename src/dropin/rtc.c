/*
 * rtc.c - the drop-in engine: a hipRTC/NVRTC program whose compile is answered by kpc.
 *
 * A program records what hiprtcCreateProgram and AddNameExpression were given. Its
 * compile keys on all of it with the options and the target (the option that names it,
 * else the vendor's default) and asks kpc_program_get on a compile-only context for that
 * target: a hit compiles nothing. What kpc cannot answer exactly goes to a real program
 * made from the same record ("materialized"): options kpc may not key
 * (rtc_option_keyable), a target that cannot be told, a request the cache does not hold
 * (PTX of a cubin build, bitcode, a getter called before the compile or after a failure),
 * odd arguments. From then on that program is the real one's.
 *
 * States: NEW (recorded) -> KPC (compiled by kpc: code, lowered names from the cache),
 * FAILED (kpc's compile failed: status COMPILATION and the compiler's log), or REAL
 * (every call goes to prog->real). Each program has its own lock (hipRTC and NVRTC let
 * threads use different programs at once); the cache and the context list have one.
 *
 * Over 500 lines for one responsibility: the drop-in engine shared by hipRTC and NVRTC
 * (hiprtc.c and nvrtc.c are only their exported API over it).
 */
#define _GNU_SOURCE
#include "dropin/rtc.h"

#include "base/log.h"
#include "base/util.h"

#include <bsd/string.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROG_MAGIC 0x6b7063726463ull /* "kpcrdc": tells our handles from the real library's */
#define MAX_CONTEXTS 16

enum prog_state { P_NEW, P_KPC, P_FAILED, P_REAL };

typedef struct rtc_prog {
    uint64_t magic;
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

/* Process state: guarded by lock; reset in a forked child (kpc handles do not cross fork). */
static struct {
    pthread_mutex_t lock;
    kpc_cache *cache;
    bool cache_failed;
    size_t num_contexts;
    struct {
        char target[128];
        kpc_context *ctx;
    } contexts[MAX_CONTEXTS];
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

static atomic_int disabled = -1; /* KPC_DISABLE=1: every call goes to the real library */
static _Atomic(const rtc_vendor *) stats_vendor; /* set by the first create: stats at exit */
static _Atomic uint64_t n_compiles, n_kpc, n_forwarded, n_materialized;

static void atfork_prepare(void) { pthread_mutex_lock(&g.lock); }
static void atfork_parent(void) { pthread_mutex_unlock(&g.lock); }
static void atfork_child(void)
{
    /* the parent's cache and contexts are not valid here: leak them, open anew */
    g.cache = NULL;
    g.cache_failed = false;
    g.num_contexts = 0;
    pthread_mutex_unlock(&g.lock);
}
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void install_atfork(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

static bool is_disabled(void)
{
    int d = atomic_load(&disabled);
    if (d < 0) { /* threads racing here all read the same environment */
        const char *v = getenv("KPC_DISABLE");
        d = v != NULL && strcmp(v, "1") == 0;
        atomic_store(&disabled, d);
    }
    return d;
}

static rtc_prog *ours(void *prog)
{
    rtc_prog *p = prog;
    return p != NULL && p->magic == PROG_MAGIC ? p : NULL;
}

/* ---- kpc: the cache and one compile-only context per target ----------------------- */
static kpc_cache *cache_get(const rtc_vendor *v) /* g.lock held */
{
    pthread_once(&fork_once, install_atfork);
    if (g.cache == NULL && !g.cache_failed) {
        kpc_status s = kpc_cache_open(NULL, &g.cache);
        if (s != KPC_OK) {
            KPC_LOG(KPC_LOG_ERROR, "%s: kpc_cache_open: %s; forwarding every compile", v->name,
                    kpc_status_str(s));
            g.cache_failed = true;
        }
    }
    return g.cache;
}

/* The compile-only context for target, or (target NULL) for the vendor's default. */
static kpc_context *context_for(const rtc_vendor *v, const char *target)
{
    kpc_context *ctx = NULL;
    char tbuf[128];
    pthread_mutex_lock(&g.lock);
    kpc_cache *cache = cache_get(v);
    if (cache && target == NULL) {
        kpc_status s = v->default_target(cache, tbuf, sizeof tbuf);
        if (s == KPC_OK)
            target = tbuf;
        else
            KPC_LOG(KPC_LOG_INFO, "%s: no option names the target and there is no default (%s): "
                    "forwarding", v->name, kpc_status_str(s));
    }
    for (size_t i = 0; cache && target && ctx == NULL && i < g.num_contexts; i++)
        if (strcmp(g.contexts[i].target, target) == 0)
            ctx = g.contexts[i].ctx;
    if (cache && target && ctx == NULL && g.num_contexts < MAX_CONTEXTS &&
        strlen(target) < sizeof g.contexts[0].target) {
        kpc_status s = kpc_context_create_for_target(cache, target, &ctx);
        if (s == KPC_OK) {
            strlcpy(g.contexts[g.num_contexts].target, target, sizeof g.contexts[0].target);
            g.contexts[g.num_contexts++].ctx = ctx;
        } else {
            KPC_LOG(KPC_LOG_INFO, "%s: no kpc context for target %s (%s): forwarding", v->name,
                    target, kpc_status_str(s));
            ctx = NULL;
        }
    }
    pthread_mutex_unlock(&g.lock);
    return ctx;
}

/* KPC_DROPIN_STATS=FILE: each process appends a line of its figures at exit. */
__attribute__((destructor)) static void write_stats(void)
{
    const char *path = getenv("KPC_DROPIN_STATS");
    const rtc_vendor *v = atomic_load(&stats_vendor);
    if (path == NULL || *path == '\0' || v == NULL)
        return;
    kpc_stats st = {0};
    pthread_mutex_lock(&g.lock);
    if (g.cache)
        kpc_stats_get(g.cache, &st);
    pthread_mutex_unlock(&g.lock);
    char line[512];
    int n = snprintf(line, sizeof line,
                     "%s pid=%d compiles=%llu kpc=%llu forwarded=%llu materialized=%llu builds=%llu "
                     "build_failures=%llu disk_hits=%llu mem_hits=%llu waits=%llu\n",
                     v->name, (int)getpid(), (unsigned long long)n_compiles,
                     (unsigned long long)n_kpc, (unsigned long long)n_forwarded,
                     (unsigned long long)n_materialized, (unsigned long long)st.builds,
                     (unsigned long long)st.build_failures, (unsigned long long)st.disk_hits,
                     (unsigned long long)st.mem_hits, (unsigned long long)st.waits);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 || n <= 0 || kpc__write_all(fd, line, (size_t)n) != 0)
        KPC_LOG(KPC_LOG_ERROR, "%s: cannot write KPC_DROPIN_STATS=%s", v->name, path);
    if (fd >= 0)
        close(fd);
}

/* ---- options -------------------------------------------------------------------------- */
/* Options that name a file or a directory to read, keyed since include manifests
 * (docs/design.md "manifests"): the core records every file the compile read and checks
 * them on each hit (hipRTC: its dependency file, platform/amd_deps.c; NVRTC: platform/include_scan.c,
 * which follows exactly these four), and keys the working directory when the path is
 * relative (kpc_manifest_needs_cwd). The path follows attached ("-Idir",
 * "--include-path=dir") or as the next option ("-I" "dir": rtc_option_path_next). */
static const char *const path_options[] = {"--include-path", "--pre-include", "-include", "-I", NULL};

bool kpc_rtc_option_keyable(const char *opt)
{
    /* reads or writes files, or changes what the program API hands back. -isystem,
     * -iquote, -idirafter and -imacros stay here: hipRTC's -MD file would list what they
     * read, but NVRTC's include scan does not follow them, and this list serves both. */
    static const char *const refused[] = {
        "-isystem", "-iquote", "-idirafter", "-imacros", "-fgpu-rdc", "-fsave", "-fsanitize",
        "-fprofile", "-fcoverage", "-fplugin", "-fmodule", "-fdebug-prefix", "-fembed", "-Wp,",
        "-Wl,", "-Wa,", "-gsplit", "-march", "-mcpu", "-mtune", "-save-temps", NULL};
    /* known to change only the compile itself, and said wholly in the option's text */
    static const char *const allowed[] = {
        "-D", "-U", "-O", "-std=", "--std=", "-W", "-w", "-f", "-m", "-g", "--define-macro=",
        "--undefine-macro=", "-use_fast_math", "--use_fast_math", "-ftz=", "--ftz=", "-prec-div=",
        "--prec-div=", "-prec-sqrt=", "--prec-sqrt=", "-fmad=", "--fmad=", "-default-device",
        "--device-as-default-execution-space", "-lineinfo", "--generate-line-info", "-G",
        "--device-debug", "-restrict", "--restrict", "-maxrregcount=", "--maxrregcount=", "-ewp",
        "--extensible-whole-program", "-dopt=", "--dopt=", "-extra-device-vectorization",
        "--extra-device-vectorization", "--disable-warnings", "-rdc=false",
        "--relocatable-device-code=false", "-dw", "--device-w", NULL};
    if (opt == NULL || opt[0] != '-')
        return false;
    for (const char *const *r = refused; *r; r++)
        if (strncmp(opt, *r, strlen(*r)) == 0)
            return false;
    for (const char *const *p = path_options; *p; p++) {
        size_t len = strlen(*p);
        /* "--include-pathX" is another option; "-Idir" and "-includef.h" are the path */
        if (strncmp(opt, *p, len) == 0 && ((*p)[1] != '-' || opt[len] == '\0' || opt[len] == '='))
            return true;
    }
    for (const char *const *a = allowed; *a; a++)
        if (strncmp(opt, *a, strlen(*a)) == 0)
            return true;
    return false;
}

bool kpc_rtc_option_path_next(const char *opt)
{
    for (const char *const *p = path_options; opt != NULL && *p; p++)
        if (strcmp(opt, *p) == 0)
            return true;
    return false;
}

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
    p->magic = 0;
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
        atomic_fetch_add(&n_materialized, 1);
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
    atomic_store(&stats_vendor, v);
    const rtc_real *r;
    if (src == NULL && prog != NULL)
        return RTC_ERROR_INVALID_INPUT; /* hipRTC 5.2 aborts on a NULL source */
    /* a NULL name is NVRTC's "default_program"; what hipRTC makes of it is its own affair */
    bool odd = prog == NULL || (name == NULL && v->default_name == NULL) || num_headers < 0 ||
               (num_headers > 0 && (headers == NULL || include_names == NULL));
    for (int i = 0; !odd && i < num_headers; i++)
        odd = headers[i] == NULL || include_names[i] == NULL;
    if (is_disabled() || odd) /* the real library's own program, and its own answer */
        return (r = kpc_real_get(v)) ? r->create(prog, src, name, num_headers, headers, include_names)
                                     : RTC_ERROR_INTERNAL_ERROR;
    rtc_prog *p = calloc(1, sizeof *p);
    if (p == NULL)
        return RTC_ERROR_OUT_OF_MEMORY;
    bool ok = true;
    p->magic = PROG_MAGIC;
    pthread_mutex_init(&p->lock, NULL);
    p->src = strdup(src);
    p->name = name ? strdup(name) : NULL; /* materialize hands the real library the same */
    p->num_headers = num_headers;
    p->headers = dup_strv(headers, (size_t)num_headers, &ok);
    p->include_names = dup_strv(include_names, (size_t)num_headers, &ok);
    if (!ok || p->src == NULL || (name && p->name == NULL)) {
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
    *target = NULL;
    *num_rest = 0;
    for (int i = 0; i < n; i++) {
        const char *t = NULL;
        for (const char *const *a = v->arch_prefixes; t == NULL && *a; a++)
            if (strncmp(opts[i], *a, strlen(*a)) == 0)
                t = opts[i] + strlen(*a);
        if (t != NULL) {
            if (*target != NULL || *t == '\0')
                return false; /* two targets: let the real compiler judge */
            *target = t;
        } else if (kpc_rtc_option_keyable(opts[i])) {
            rest[(*num_rest)++] = opts[i];
            if (kpc_rtc_option_path_next(opts[i])) { /* "-I" "dir": the path is keyed with it */
                if (i + 1 >= n || opts[i + 1] == NULL)
                    return false; /* no path: let the real compiler judge */
                rest[(*num_rest)++] = opts[++i];
            }
        } else {
            KPC_LOG(KPC_LOG_INFO, "%s: option \"%s\" is not keyed: forwarding the compile", v->name,
                    opts[i]);
            return false;
        }
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
    kpc_context *ctx = context_for(v, target);
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
        p->kind = v->code_kind(kpc_context_target(ctx));
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
    atomic_fetch_add(&n_compiles, 1);
    if (p == NULL) { /* the real library's own program (KPC_DISABLE=1, odd create arguments) */
        atomic_fetch_add(&n_forwarded, 1);
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
            atomic_fetch_add(&n_kpc, 1);
        else if (res < 0) { /* forward: the real program, compiled with the same options */
            p->state = P_NEW;
            res = materialize(v, p);
            if (res == RTC_SUCCESS)
                res = kpc_real_get(v)->compile(p->real, num_options, options);
            atomic_fetch_add(&n_forwarded, 1);
        }
    } else {
        void *real = real_of(v, p, &res);
        if (real)
            res = kpc_real_get(v)->compile(real, num_options, options);
        atomic_fetch_add(&n_forwarded, 1);
    }
    pthread_mutex_unlock(&p->lock);
    return res;
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
    const char *name = p->state == P_KPC && expr && lowered ? kpc_program_lowered_name(p->kprog, expr) : NULL;
    if (name != NULL && name[0] != '\0') { /* "" is a name the compiler could not lower */
        *lowered = name;
        res = RTC_SUCCESS;
    } else {
        void *real = real_of(v, p, &res);
        if (real)
            res = kpc_real_get(v)->lowered(real, expr, lowered);
    }
    pthread_mutex_unlock(&p->lock);
    return res;
}

/* The log kpc answers with: the failed compile's text, or none after a success. */
static size_t kpc_log_size(const rtc_vendor *v, const rtc_prog *p)
{
    size_t n = p->state == P_FAILED ? strlen(p->log) : 0;
    return n + (v->log_counts_nul ? 1 : 0);
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
            memcpy(log, p->state == P_FAILED ? p->log : "", n); /* the NUL too where counted */
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
    if (p->real)
        res = kpc_real_get(v)->destroy(&p->real);
    prog_free(p);
    *prog = NULL;
    return res;
}
