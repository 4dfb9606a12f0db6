/*
 * compile.c - `kpc compile`: each file's code object through the cache, as an application
 * would get it, with per file built or hit, the time and the size (and its lowered names).
 *
 * `compile -j N` runs the files in a pool of forked workers (pool.c); each worker makes
 * its own cache handle and context at its first readable file. A file's result lives in
 * shared memory and its status is stored last (atomically), so a worker that dies leaves
 * its files "not compiled"; the parent reads the results for the progress line (on a
 * terminal) and prints the report once every worker is done. The options come parsed
 * into a kpc_tool by src/tools/kpc.c (kpc_tool_compile_option is its handler).
 */
#define _GNU_SOURCE
#include "base/fault.h"
#include "base/log.h"
#include "base/root.h"
#include "core/program.h"
#include "tools/pool.h"
#include "tools/tool.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOG_MAX 8192
#define LOWERED_MAX 32768 /* the lowered names of a file, one after another, each with its NUL */

/* A file's status until its worker finishes with it: a worker that dies leaves it so. */
#define RESULT_PENDING (-1)

typedef struct file_result {
    int status;       /* kpc_status, or RESULT_PENDING; written last, atomically */
    int outcome;      /* 0 built, 1 hit, 2 waited (another process built it) */
    double seconds;
    uint64_t size;    /* bytes of the code object (the file on disk adds a header) */
    /* a name that does not fit is left empty (and said so); an expression the compiler
     * gave no name for is REFUSED then the compiler's reason */
    char lowered[LOWERED_MAX];
    char log[LOG_MAX];
} file_result;

#define REFUSED '\001' /* cannot begin a name: marks a reason in file_result.lowered */

typedef struct compile_job {
    const kpc_tool *t;
    file_result *results; /* shared with the workers */
    /* why objects built cannot be stored in the cache dir ("" when they can): a tree that
     * is read-only for this user still serves hits */
    char uncached[600];
    /* progress (parent only) */
    bool progress;
    uint64_t started_ns;
    int shown;
} compile_job;

static int result_status(const file_result *r)
{
    return __atomic_load_n(&r->status, __ATOMIC_ACQUIRE);
}

/* What is packed for expression e of a result: names are packed in order. */
static const char *lowered_entry(const file_result *r, size_t e)
{
    const char *p = r->lowered;
    while (e-- > 0)
        p += strlen(p) + 1;
    return p;
}

/* The lowered name of expression e ("" when none), and *reason the compiler's reason
 * for none (NULL when it gave none, or the name did not fit). */
static const char *lowered_name(const file_result *r, size_t e, const char **reason)
{
    const char *p = lowered_entry(r, e);
    *reason = p[0] == REFUSED ? p + 1 : NULL;
    return p[0] == REFUSED ? "" : p;
}

/* A source file, or NULL with errno set (EISDIR for a directory, not the read's EEXIST). */
static char *read_source(const char *path, size_t *len)
{
    int fd = kpc__open(path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    void *buf = NULL;
    struct stat st;
    kpc_status s = kpc__read_fd_stat(fd, 256u << 20, &buf, len, &st);
    int err = errno;
    close(fd);
    if (s == KPC_OK)
        return buf;
    errno = S_ISDIR(st.st_mode) ? EISDIR : s == KPC_E_NOMEM ? ENOMEM : s == KPC_E_CORRUPT ? EFBIG : err;
    if (s == KPC_E_CORRUPT && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
        errno = EINVAL;
    return NULL;
}

static int write_out(const kpc_tool *t, int i, kpc_program *p)
{
    char path[4096];
    if (t->num_operands == 1)
        snprintf(path, sizeof path, "%s", t->out);
    else {
        char *copy = strdup(t->operands[i]);
        snprintf(path, sizeof path, "%s/%s.co", t->out, copy ? basename(copy) : "?");
        free(copy);
    }
    size_t size;
    const void *code = kpc_program_code(p, &size);
    int fd = kpc__open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || kpc__write_all(fd, code, size) != 0) {
        fprintf(stderr, "kpc compile: cannot write %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

/* The compile context of one worker, made at its first readable file, so that a file that
 * cannot be read is reported as such, not as a context that could not be made (no GPU,
 * unknown target). */
typedef struct worker {
    const kpc_tool *t;
    kpc_cache *cache;
    kpc_context *ctx;
    kpc_status status; /* of making the context; KPC_OK before the first try */
    bool tried;
} worker;

/* No GPU to take the target from, asked quietly: the library's own line names its C
 * function for a compile-only context, where this tool's user needs --target. */
static bool no_gpu(void)
{
    char target[64];
    int level = kpc__log_level;
    kpc__log_level = 0;
    kpc_status s = kpc_platform_get()->device_target(0, target, sizeof target);
    kpc__log_level = level;
    return s == KPC_E_NO_DEVICE;
}

static kpc_status worker_context(worker *w)
{
    if (!w->tried) {
        w->tried = true;
        kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = w->t->cache_dir};
        w->status = kpc_cache_open(&cfg, &w->cache);
        if (w->status == KPC_OK && w->t->target == NULL && no_gpu())
            w->status = KPC_E_NO_DEVICE;
        else if (w->status == KPC_OK)
            w->status = w->t->target ? kpc_context_create_for_target(w->cache, w->t->target, &w->ctx)
                                     : kpc_context_create(w->cache, 0, &w->ctx);
    }
    return w->status;
}

/* Compile one file; its status is stored last, so a worker killed before that leaves it
 * RESULT_PENDING. */
static void compile_one(worker *w, file_result *r, int i)
{
    const kpc_tool *t = w->t;
    const char *file = t->operands[i];
    size_t len;
    char *code = read_source(file, &len);
    if (code == NULL) {
        snprintf(r->log, sizeof r->log, "cannot read %s: %s\n", file, strerror(errno));
        __atomic_store_n(&r->status, KPC_E_IO, __ATOMIC_RELEASE);
        return;
    }
    kpc_status s = worker_context(w);
    if (s != KPC_OK) {
        if (s == KPC_E_NO_DEVICE && t->target == NULL)
            snprintf(r->log, sizeof r->log, "no GPU here to take the target from: name one with --target "
                     "(e.g. --target %s)\n", KPC_TOOL_EXAMPLE_TARGET);
        free(code);
        __atomic_store_n(&r->status, s, __ATOMIC_RELEASE);
        return;
    }
    char *name_copy = strdup(file);
    kpc_source src = {.code = code, .code_len = len, .name = name_copy ? basename(name_copy) : "source",
                      .options = t->options, .num_options = t->num_options,
                      .name_expressions = t->exprs, .num_name_expressions = t->num_exprs};
    kpc_stats before, after;
    kpc_stats_get(w->cache, &before);
    kpc_program *p = NULL;
    uint64_t t0 = kpc__now_ns();
    s = kpc_program_get(w->ctx, &src, &p);
    r->seconds = (double)(kpc__now_ns() - t0) / 1e9;
    kpc_stats_get(w->cache, &after);
    r->outcome = after.builds + after.build_failures > before.builds + before.build_failures ? 0
                 : after.waits > before.waits                                              ? 2
                                                                                           : 1;
    if (s == KPC_OK) {
        size_t size;
        kpc_program_code(p, &size);
        r->size = size;
        size_t used = 0;
        for (size_t e = 0; e < t->num_exprs; e++) {
            const char *low = kpc_program_lowered_name(p, t->exprs[e]);
            const char *why = low && low[0] == '\0' ? kpc_program_lowered_reason(p, t->exprs[e]) : NULL;
            char refused[512];
            if (why) {
                snprintf(refused, sizeof refused, "%c%s", REFUSED, why);
                low = refused;
            }
            size_t n = low ? strlen(low) : 0;
            /* room for this name and an empty one for each expression after it */
            if (used + n + 1 + (t->num_exprs - e - 1) > sizeof r->lowered)
                n = 0, low = NULL;
            memcpy(r->lowered + used, low ? low : "", n);
            r->lowered[used + n] = '\0';
            used += n + 1;
        }
        if (t->out && write_out(t, i, p) != 0)
            s = KPC_E_IO;
    } else
        snprintf(r->log, sizeof r->log, "%s", kpc_last_log());
    kpc_program_release(p);
    free(name_copy);
    free(code);
    __atomic_store_n(&r->status, s, __ATOMIC_RELEASE);
}

/* The pool's work: files first, first + step, ... through one cache handle and context. */
static void compile_some(void *arg, int first, int step)
{
    compile_job *job = arg;
    worker w = {.t = job->t};
    for (int i = first; i < job->t->num_operands; i += step)
        compile_one(&w, &job->results[i], i);
    kpc_context_destroy(w.ctx);
    kpc_cache_close(w.cache);
}

static void compile_lost(void *arg, int item, const char *why)
{
    compile_job *job = arg;
    file_result *r = &job->results[item];
    if (result_status(r) == RESULT_PENDING)
        snprintf(r->log, sizeof r->log, "%s\n", why);
}

/* On a terminal: one line rewritten in place, "[done/total] hits, builds, failures, ETA". */
static void compile_progress(void *arg)
{
    compile_job *job = arg;
    const kpc_tool *t = job->t;
    int done = 0, hits = 0, builds = 0, failed = 0;
    for (int i = 0; i < t->num_operands; i++) {
        const file_result *r = &job->results[i];
        int s = result_status(r);
        if (s == RESULT_PENDING)
            continue;
        done++;
        if (s != KPC_OK)
            failed++;
        else if (r->outcome == 0)
            builds++;
        else
            hits++;
    }
    if (!job->progress)
        return;
    double elapsed = (double)(kpc__now_ns() - job->started_ns) / 1e9;
    char eta[32] = "ETA ?";
    if (done == t->num_operands)
        snprintf(eta, sizeof eta, "%.1f s", elapsed);
    else if (done > 0) {
        long left = (long)(elapsed / done * (t->num_operands - done) + 0.5);
        snprintf(eta, sizeof eta, "ETA %ld:%02ld", left / 60, left % 60);
    }
    fprintf(stderr, "\r[%d/%d] %d %s, %d %s, %d failed, %s\033[K", done, t->num_operands, hits,
            kpc_tool_plural((uint64_t)hits, "hit", "hits"), builds, kpc_tool_plural((uint64_t)builds, "build", "builds"), failed,
            eta);
    fflush(stderr);
    job->shown = 1;
}

static int compile_report(const kpc_tool *t, const file_result *results, const char *uncached)
{
    /* a build the cache dir could not take is not "built" into the cache */
    static const char *const outcome[] = {"built", "hit", "hit (waited)", "not cached"};
    int rc = KPC_TOOL_OK, not_cached = 0;
    cJSON *arr = t->json ? cJSON_CreateArray() : NULL;
    for (int i = 0; i < t->num_operands; i++) {
        const file_result *r = &results[i];
        const char *file = t->operands[i];
        const char *status = r->status == RESULT_PENDING ? "not compiled" : kpc_status_str(r->status);
        if (r->status != KPC_OK) {
            rc = KPC_TOOL_FAIL;
            fprintf(stderr, "kpc compile: %s: %s\n%s", file, status, r->log);
        }
        bool cached = r->status == KPC_OK && !(r->outcome == 0 && uncached[0]);
        not_cached += r->status == KPC_OK && !cached;
        if (arr) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "file", file);
            cJSON_AddStringToObject(o, "status", status);
            cJSON_AddStringToObject(o, "result", r->status == KPC_OK ? (r->outcome == 0 ? "built" : "hit") : "failed");
            cJSON_AddBoolToObject(o, "waited", r->outcome == 2);
            cJSON_AddBoolToObject(o, "cached", cached);
            cJSON_AddNumberToObject(o, "seconds", r->seconds);
            cJSON_AddNumberToObject(o, "size", (double)r->size);
            cJSON *low = cJSON_AddObjectToObject(o, "lowered_names");
            cJSON *refused = NULL;
            for (size_t e = 0; e < t->num_exprs; e++) {
                const char *why;
                cJSON_AddStringToObject(low, t->exprs[e], lowered_name(r, e, &why));
                if (why && (refused || (refused = cJSON_AddObjectToObject(o, "lowered_refused"))))
                    cJSON_AddStringToObject(refused, t->exprs[e], why);
            }
            if (r->status != KPC_OK)
                cJSON_AddStringToObject(o, "log", r->log);
            cJSON_AddItemToArray(arr, o);
        } else if (r->status == KPC_OK) {
            /* the code object's own bytes: `kpc ls` shows the file, which adds a header */
            char size[16];
            kpc_tool_human(size, sizeof size, r->size);
            printf("%-12s %9.3f ms %5s code  %s\n", outcome[cached ? r->outcome : 3], r->seconds * 1e3, size, file);
            for (size_t e = 0; e < t->num_exprs; e++) {
                const char *why, *low = lowered_name(r, e, &why);
                if (why)
                    printf("    %s -> (no lowered name: the compiler refused it: %s)\n", t->exprs[e], why);
                else
                    printf("    %s -> %s\n", t->exprs[e], low[0] ? low : "(not found, or too long to report)");
            }
        } else
            printf("%-12s %9.3f ms %5s       %s\n", "failed", r->seconds * 1e3, "-", file);
    }
    if (arr)
        kpc_tool_print_json(arr);
    if (not_cached) {
        fprintf(stderr, "kpc compile: %d %s built but not cached: the cache directory %s is read-only for "
                "this user (%s)\n", not_cached, kpc_tool_plural((uint64_t)not_cached, "object", "objects"),
                t->set.cache_dir, uncached);
        rc = KPC_TOOL_FAIL;
    }
    return rc;
}

/* Why an object built now could not be stored under the cache dir ("" when it can): the
 * deepest of v1/tmp (where every object is staged), v1 and the directory itself that
 * exists, and what access(2) says of it (EACCES, EROFS). */
static void uncached_reason(const kpc_root *root, char *out, size_t cap)
{
    const char *const dirs[] = {kpc_root_tmp_dir(root), kpc_root_v1(root), kpc_root_path(root)};
    out[0] = '\0';
    for (size_t i = 0; i < 3; i++) {
        if (access(dirs[i], F_OK) != 0)
            continue;
        if (access(dirs[i], W_OK | X_OK) != 0)
            snprintf(out, cap, "%s: %s", dirs[i], strerror(errno));
        return;
    }
}

int kpc_tool_compile_option(kpc_tool *t, int c, const char *arg)
{
    switch (c) {
    case 't': t->target = arg; return KPC_TOOL_OK;
    case KPC_TOOL_OPT_OPTION: t->options[t->num_options++] = arg; return KPC_TOOL_OK;
    case KPC_TOOL_OPT_NAME_EXPR: t->exprs[t->num_exprs++] = arg; return KPC_TOOL_OK;
    case 'o': t->out = arg; return KPC_TOOL_OK;
    case 'j': {
        uint64_t n;
        if (kpc_tool_number(t, "-j", arg, KPC_SETTING_COUNT, 1, 1024, &n) != KPC_TOOL_OK)
            return KPC_TOOL_USAGE;
        t->jobs = (long)n;
        return KPC_TOOL_OK;
    }
    }
    return KPC_TOOL_USAGE;
}

int kpc_tool_compile(kpc_tool *t)
{
    if (t->num_operands > 1 && t->out) {
        struct stat st;
        if (kpc__fstatat(AT_FDCWD, t->out, &st, 0) != 0 || !S_ISDIR(st.st_mode))
            return kpc_tool_usage_error(t, "with several files, -o names an existing directory: %s", t->out);
        /* DIR/NAME.co per file: two files of one name would overwrite each other */
        for (int i = 0; i < t->num_operands; i++)
            for (int j = 0; j < i; j++) {
                const char *a = strrchr(t->operands[i], '/'), *b = strrchr(t->operands[j], '/');
                a = a ? a + 1 : t->operands[i];
                if (strcmp(a, b ? b + 1 : t->operands[j]) == 0)
                    return kpc_tool_usage_error(t, "-o DIR: two files named %s would be written to one file", a);
            }
    }
    /* a malformed environment is bad usage here too, not a failure of every file */
    int rc = kpc_tool_open(t);
    if (rc != KPC_TOOL_OK)
        return rc;
    compile_job job = {.t = t};
    /* the cache dir asked for must be one the library accepts: a refused one would have
     * every file built, cached nowhere, and reported as if it were */
    if (!(t->set.flags & KPC_NO_DISK)) {
        kpc_store *st = NULL;
        if ((rc = kpc_tool_store(t, &st)) != KPC_TOOL_OK) {
            fprintf(stderr, "kpc compile: nothing compiled\n");
            return rc;
        }
        uncached_reason(kpc_store_root(st), job.uncached, sizeof job.uncached);
        kpc_store_close(st);
    }
    size_t n = (size_t)t->num_operands;
    job.results = kpc_pool_alloc(n, sizeof *job.results);
    if (job.results == NULL) {
        fprintf(stderr, "kpc compile: cannot map %zu results: %s\n", n, strerror(errno));
        return KPC_TOOL_FAIL;
    }
    for (size_t i = 0; i < n; i++)
        job.results[i].status = RESULT_PENDING;
    /* progress only where a person watches: on a pipe the output stays line-oriented */
    job.progress = n > 1 && isatty(STDERR_FILENO);
    job.started_ns = kpc__now_ns();
    long jobs = t->jobs ? t->jobs : sysconf(_SC_NPROCESSORS_ONLN);
    kpc_pool_ops ops = {.work = compile_some, .tick = job.progress ? compile_progress : NULL,
                        .lost = compile_lost};
    kpc_pool_run(t->num_operands, jobs < 1 ? 1 : (int)jobs, &ops, &job);
    if (job.shown) {
        compile_progress(&job);
        fputc('\n', stderr);
    }
    rc = compile_report(t, job.results, job.uncached);
    kpc_pool_free(job.results, n, sizeof *job.results);
    return rc;
}
