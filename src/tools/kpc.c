/*
 * kpc - the cache tool: compile, stats, ls, verify, prune, clear.
 *
 * Table-driven: each subcommand is one row of `commands` {name, run, its options, its
 * help}; main() finds the row, parse() reads the row's options plus the common ones
 * (--cache-dir, --json, -h/--help) into a `tool`, and the row's function runs. Adding a
 * subcommand is one function and one row.
 *
 * Every subcommand exits 0 on success, 1 on failure, 2 on bad usage; a usage error prints
 * one line saying what was wrong and a hint (`see 'kpc compile --help'`), never the whole
 * usage. Only `compile` (and `prune --stale`, which needs the installed compiler's
 * identity) ever loads the compiler; the others read the disk tree and the host index, so
 * they run on a login node with no ROCm at all. `compile -j N` runs its files in a pool
 * of forked workers (pool.c).
 */
#define _GNU_SOURCE
#include "base/log.h"
#include "base/root.h"
#include "core/config.h"
#include "core/key.h"
#include "core/program.h"
#include "platform/platform.h"
#include "storage/index.h"
#include "storage/remote.h"
#include "storage/store.h"
#include "tools/tool.h"
#include "tools/pool.h"

#include <bsd/libutil.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef KPC_TOOL_VERSION
#define KPC_TOOL_VERSION "unknown"
#endif

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

struct command;

/* One run of the tool: the chosen command, its options, and (after tool_open) the cache. */
typedef struct tool {
    const struct command *cmd;
    /* common options */
    const char *cache_dir;
    bool json;
    /* compile */
    const char *target, *out;
    const char **options, **exprs; /* argc entries each: room for every argument */
    size_t num_options, num_exprs;
    long jobs;
    /* prune */
    const char *max_size;
    bool stale;
    /* replay (target and jobs above), pack create */
    const char *from_target;
    const char *targets[64];
    size_t num_targets;
    /* operands */
    char **operands;
    int num_operands;
    /* tool_open: the settings, the realpath of the cache dir ("" when it does not exist) */
    kpc_settings set;
    char root[4096];
} tool;

typedef struct command {
    const char *name;
    int (*run)(tool *t);
    /* the command's own options (NULL-terminated; NULL: none) and their getopt letters */
    const struct option *options;
    const char *shortopts;
    int (*option)(tool *t, int c, const char *arg); /* one of the command's own options */
    bool operands;                                   /* takes FILE... (else none) */
    const char *synopsis;                            /* after "kpc NAME " */
    const char *summary;                             /* one line for `kpc --help` */
    const char *help;                                /* the options, for `kpc NAME --help` */
} command;

enum { OPT_CACHE_DIR = 1000, OPT_JSON, OPT_MAX_SIZE, OPT_STALE, OPT_OPTION, OPT_NAME_EXPR, OPT_VERSION, OPT_FROM_TARGET };

static const struct option common_options[] = {
    {"cache-dir", required_argument, NULL, OPT_CACHE_DIR},
    {"json", no_argument, NULL, OPT_JSON},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0}};

static const char *const common_help =
    "  --cache-dir DIR    the cache directory (else KPC_CACHE_DIR, else $XDG_CACHE_HOME/kpc,\n"
    "                     else ~/.cache/kpc)\n"
    "  --json             print the data as JSON\n"
    "  -h, --help         this text\n"
    "Exit status: 0 success, 1 failure, 2 bad usage. See kpc(1).\n";

/* The one line of a usage error and the hint; returns EXIT_USAGE. */
static int usage_error(const tool *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage_error(const tool *t, const char *fmt, ...)
{
    const char *name = t && t->cmd ? t->cmd->name : NULL;
    fprintf(stderr, "kpc%s%s: ", name ? " " : "", name ? name : "");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nsee 'kpc%s%s --help'\n", name ? " " : "", name ? name : "");
    return EXIT_USAGE;
}

/* "955B", "4.4K", "2.0G": humanize_number scales only as far as the width needs, so the
 * width (4 characters) is what asks for the short form; HN_B marks unscaled bytes. */
static void human(char *buf, size_t len, uint64_t bytes)
{
    humanize_number(buf, len < 5 ? len : 5, (int64_t)bytes, "", HN_AUTOSCALE, HN_B | HN_DECIMAL | HN_NOSPACE);
}

static const char *plural(uint64_t n, const char *one, const char *many)
{
    return n == 1 ? one : many;
}

static int print_json(cJSON *j)
{
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    if (s == NULL)
        return EXIT_FAIL;
    puts(s);
    free(s);
    return EXIT_OK;
}

/* ---- the common set-up: settings, the cache dir, the store ---------------------------- */

/* Resolve the settings into t->set and the cache dir's realpath into t->root ("" when it
 * does not exist). A malformed environment is bad usage (the library named it). */
static int tool_open(tool *t)
{
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = t->cache_dir};
    if (kpc_config_resolve(&cfg, &t->set) != KPC_OK)
        return EXIT_USAGE;
    if (t->set.cache_dir[0] == '\0') {
        fprintf(stderr, "kpc %s: no cache directory: set KPC_CACHE_DIR or HOME, or give --cache-dir\n",
                t->cmd->name);
        return EXIT_FAIL;
    }
    if (!kpc_root_realpath(t->set.cache_dir, t->root, sizeof t->root))
        t->root[0] = '\0';
    return EXIT_OK;
}

/* The store of an existing cache dir; a directory the library refuses (another owner,
 * not a directory) is a failure, not an empty cache. */
static int tool_store(const tool *t, kpc_store **st)
{
    if (kpc_store_open(t->set.cache_dir, t->set.disk_max_bytes, st) != KPC_OK) {
        fprintf(stderr, "kpc %s: cannot use cache directory %s (see the log above)\n", t->cmd->name,
                t->set.cache_dir);
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

/* The one wording of an absent cache dir, for the commands that change or check it. */
static int say_absent(const tool *t)
{
    printf("no cache directory %s: nothing to %s\n", t->set.cache_dir, t->cmd->name);
    return EXIT_OK;
}

/* ---- compile ------------------------------------------------------------------------ */
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
    const tool *t;
    file_result *results; /* shared with the workers */
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
    int fd = open(path, O_RDONLY | O_CLOEXEC);
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

static int write_out(const tool *t, int i, kpc_program *p)
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
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
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
    const tool *t;
    kpc_cache *cache;
    kpc_context *ctx;
    kpc_status status; /* of making the context; KPC_OK before the first try */
    bool tried;
} worker;

static kpc_status worker_context(worker *w)
{
    if (!w->tried) {
        w->tried = true;
        kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = w->t->cache_dir};
        w->status = kpc_cache_open(&cfg, &w->cache);
        if (w->status == KPC_OK)
            w->status = w->t->target ? kpc_context_create_for_target(w->cache, w->t->target, &w->ctx)
                                     : kpc_context_create(w->cache, 0, &w->ctx);
    }
    return w->status;
}

/* Compile one file; its status is stored last, so a worker killed before that leaves it
 * RESULT_PENDING. */
static void compile_one(worker *w, file_result *r, int i)
{
    const tool *t = w->t;
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
    const tool *t = job->t;
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
            plural((uint64_t)hits, "hit", "hits"), builds, plural((uint64_t)builds, "build", "builds"), failed,
            eta);
    fflush(stderr);
    job->shown = 1;
}

static int compile_report(const tool *t, const file_result *results)
{
    static const char *const outcome[] = {"built", "hit", "hit (waited)"};
    int rc = EXIT_OK;
    cJSON *arr = t->json ? cJSON_CreateArray() : NULL;
    for (int i = 0; i < t->num_operands; i++) {
        const file_result *r = &results[i];
        const char *file = t->operands[i];
        const char *status = r->status == RESULT_PENDING ? "not compiled" : kpc_status_str(r->status);
        if (r->status != KPC_OK) {
            rc = EXIT_FAIL;
            fprintf(stderr, "kpc compile: %s: %s\n%s", file, status, r->log);
        }
        if (arr) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "file", file);
            cJSON_AddStringToObject(o, "status", status);
            cJSON_AddStringToObject(o, "result", r->status == KPC_OK ? (r->outcome == 0 ? "built" : "hit") : "failed");
            cJSON_AddBoolToObject(o, "waited", r->outcome == 2);
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
            human(size, sizeof size, r->size);
            printf("%-12s %9.3f ms %5s code  %s\n", outcome[r->outcome], r->seconds * 1e3, size, file);
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
        print_json(arr);
    return rc;
}

static int compile_option(tool *t, int c, const char *arg)
{
    switch (c) {
    case 't': t->target = arg; return EXIT_OK;
    case OPT_OPTION: t->options[t->num_options++] = arg; return EXIT_OK;
    case OPT_NAME_EXPR: t->exprs[t->num_exprs++] = arg; return EXIT_OK;
    case 'o': t->out = arg; return EXIT_OK;
    case 'j': {
        char *end;
        errno = 0;
        t->jobs = strtol(arg, &end, 10);
        if (errno || end == arg || *end != '\0' || t->jobs < 1 || t->jobs > 1024)
            return usage_error(t, "-j takes a number from 1 to 1024, not \"%s\"", arg);
        return EXIT_OK;
    }
    }
    return EXIT_USAGE;
}

static int cmd_compile(tool *t)
{
    if (t->num_operands > 1 && t->out) {
        struct stat st;
        if (stat(t->out, &st) != 0 || !S_ISDIR(st.st_mode))
            return usage_error(t, "with several files, -o names an existing directory: %s", t->out);
        /* DIR/NAME.co per file: two files of one name would overwrite each other */
        for (int i = 0; i < t->num_operands; i++)
            for (int j = 0; j < i; j++) {
                const char *a = strrchr(t->operands[i], '/'), *b = strrchr(t->operands[j], '/');
                a = a ? a + 1 : t->operands[i];
                if (strcmp(a, b ? b + 1 : t->operands[j]) == 0)
                    return usage_error(t, "-o DIR: two files named %s would be written to one file", a);
            }
    }
    /* a malformed environment is bad usage here too, not a failure of every file */
    int rc = tool_open(t);
    if (rc != EXIT_OK)
        return rc;
    compile_job job = {.t = t};
    size_t n = (size_t)t->num_operands;
    job.results = kpc_pool_alloc(n, sizeof *job.results);
    if (job.results == NULL) {
        fprintf(stderr, "kpc compile: cannot map %zu results: %s\n", n, strerror(errno));
        return EXIT_FAIL;
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
    rc = compile_report(t, job.results);
    kpc_pool_free(job.results, n, sizeof *job.results);
    return rc;
}

/* ---- stats -------------------------------------------------------------------------- */
/* The cluster tier's state ("not built", "off", "ok", "unreachable", "invalid"), its
 * redacted URL and the cluster-wide counters from Redis. */
static const char *remote_state(char *url, size_t cap, kpc_remote_counters *rc)
{
    const char *remote = getenv("KPC_REMOTE");
    memset(rc, 0, sizeof *rc);
    url[0] = '\0';
    if (!kpc_remote_built())
        return "not built (no hiredis)";
    if (remote == NULL || remote[0] == '\0')
        return "off";
    kpc_remote *r = NULL;
    if (kpc_remote_open(remote, &r) != KPC_OK)
        return "invalid";
    snprintf(url, cap, "%s", kpc_remote_describe(r));
    const char *state = kpc_remote_cluster_counters(r, rc) == KPC_OK ? "ok" : "unreachable";
    kpc_remote_close(r);
    return state;
}

static int cmd_stats(tool *t)
{
    int rc = tool_open(t);
    if (rc != EXIT_OK)
        return rc;
    kpc_index_counters ic = {0};
    char name[96] = "";
    const char *index_state = "absent";
    uint64_t bytes = 0, files = 0;
    if (t->root[0]) {
        kpc_index *ix = NULL;
        kpc_root_segment_name(t->root, name, sizeof name);
        kpc_status s = kpc_index_open_existing(t->root, &ix);
        if (s == KPC_OK) {
            kpc_index_counters_get(ix, &ic);
            /* a lock past its deadline or a truncated segment: logged, counters 0 */
            index_state = kpc_index_usable(ix) ? "ok" : "unusable";
            kpc_index_close(ix);
        } else if (s != KPC_E_NOT_FOUND)
            index_state = "damaged";
        kpc_store *st = NULL;
        if ((rc = tool_store(t, &st)) != EXIT_OK)
            return rc;
        kpc_store_usage(st, &bytes, &files);
        kpc_store_close(st);
    }
    const char *dir = t->root[0] ? t->root : t->set.cache_dir;
    char rurl[1600];
    kpc_remote_counters rcn;
    const char *rstate = remote_state(rurl, sizeof rurl, &rcn);
    if (t->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "cache_dir", dir);
        cJSON_AddStringToObject(o, "index", index_state);
        cJSON_AddStringToObject(o, "index_name", name);
        const struct { const char *k; uint64_t v; } f[] = {
            {"lookups", ic.lookups}, {"hits", ic.hits}, {"builds", ic.builds},
            {"build_failures", ic.build_failures}, {"waits", ic.waits}, {"takeovers", ic.takeovers},
            {"evictions", ic.evictions}, {"entries", ic.entries}, {"capacity", ic.capacity},
            {"attached", ic.attached}, {"disk_bytes", bytes}, {"disk_files", files},
            {"disk_max_bytes", t->set.disk_max_bytes}, {"wait_timeouts", ic.wait_timeouts},
            /* the cluster tier: cluster-wide, as the processes that closed it added them */
            {"remote_hits", rcn.hits}, {"remote_misses", rcn.misses}, {"remote_builds", rcn.builds},
            {"remote_waits", rcn.waits}, {"remote_takeovers", rcn.takeovers},
            {"remote_errors", rcn.errors}, {"remote_refused", rcn.refused}};
        for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
            cJSON_AddNumberToObject(o, f[i].k, (double)f[i].v);
        cJSON_AddStringToObject(o, "remote", rstate);
        cJSON_AddStringToObject(o, "remote_url", rurl);
        return print_json(o);
    }
    char hb[16], hm[16];
    human(hb, sizeof hb, bytes);
    human(hm, sizeof hm, t->set.disk_max_bytes);
    printf("cache dir      %s%s\n", dir, t->root[0] ? "" : " (does not exist)");
    printf("host index     %s%s%s\n", index_state, name[0] ? " " : "", name);
    printf("lookups        %llu\nhits           %llu\nbuilds         %llu\nbuild failures %llu\n"
           "waits          %llu\ntakeovers      %llu\nevictions      %llu\nentries        %llu / %llu\n"
           "attached       %llu\ndisk           %s in %llu %s (limit %s)\n"
           "wait timeouts  %llu\n",
           (unsigned long long)ic.lookups, (unsigned long long)ic.hits, (unsigned long long)ic.builds,
           (unsigned long long)ic.build_failures, (unsigned long long)ic.waits,
           (unsigned long long)ic.takeovers, (unsigned long long)ic.evictions,
           (unsigned long long)ic.entries, (unsigned long long)ic.capacity,
           (unsigned long long)ic.attached, hb, (unsigned long long)files, plural(files, "file", "files"), hm,
           (unsigned long long)ic.wait_timeouts);
    printf("remote         %s%s%s\n", rstate, rurl[0] ? " " : "", rurl);
    if (strcmp(rstate, "ok") == 0)
        printf("remote (cluster-wide)\n  hits         %llu\n  misses       %llu\n  builds       %llu\n"
               "  waits        %llu\n  takeovers    %llu\n  errors       %llu\n  refused      %llu\n",
               (unsigned long long)rcn.hits, (unsigned long long)rcn.misses, (unsigned long long)rcn.builds,
               (unsigned long long)rcn.waits, (unsigned long long)rcn.takeovers,
               (unsigned long long)rcn.errors, (unsigned long long)rcn.refused);
    return EXIT_OK;
}

/* ---- ls / verify -------------------------------------------------------------------- */
typedef struct ls_row {
    char key[33], target[64], source[80], kind[4];
    char *path; /* malloc'd: a cache dir's path may be long */
    uint64_t size, mtime_ns;
    bool bad, removed;
} ls_row;

typedef struct ls_acc {
    ls_row *rows;
    size_t n, cap;
} ls_acc;

static int collect_row(const kpc_store_entry *e, void *arg)
{
    ls_acc *a = arg;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 256;
        ls_row *r = realloc(a->rows, cap * sizeof *r);
        if (r == NULL)
            return 1;
        a->rows = r;
        a->cap = cap;
    }
    char *path = strdup(e->path);
    if (path == NULL)
        return 1;
    ls_row *r = &a->rows[a->n++];
    memset(r, 0, sizeof *r);
    r->path = path;
    const char *base = strrchr(e->path, '/') + 1;
    memcpy(r->key, base, 32);
    snprintf(r->kind, sizeof r->kind, "%s", strstr(base, ".log") ? "log" : strstr(base, ".mf") ? "mf" : "co");
    r->size = e->size;
    r->mtime_ns = e->mtime_ns;
    r->bad = e->status != KPC_OK;
    r->removed = e->removed;
    if (e->rec) {
        snprintf(r->target, sizeof r->target, "%s", e->rec->target);
        snprintf(r->source, sizeof r->source, "%s", e->rec->source_name);
    }
    return 0;
}

static int by_recent(const void *x, const void *y)
{
    const ls_row *a = x, *b = y;
    return a->mtime_ns > b->mtime_ns ? -1 : a->mtime_ns < b->mtime_ns;
}

static void iso_time(uint64_t ns, char *out, size_t cap)
{
    time_t t = (time_t)(ns / 1000000000u);
    struct tm tm;
    strftime(out, cap, "%Y-%m-%dT%H:%M:%S", localtime_r(&t, &tm));
}

/* Every record of the cache dir, newest first; with `verify`, the walk checks each one and
 * removes the damaged. */
static int walk_rows(const tool *t, bool verify, ls_acc *acc, kpc_status *walked)
{
    *walked = KPC_OK;
    if (t->root[0]) {
        kpc_store *st;
        int rc = tool_store(t, &st);
        if (rc != EXIT_OK)
            return rc;
        /* an error the walk met (an unreadable directory) is logged by the walk and fails
         * the command: what was not read was not checked */
        *walked = kpc_store_walk(st, verify, collect_row, acc);
        kpc_store_close(st);
    }
    if (acc->n > 1) /* qsort wants a non-NULL array, even of none */
        qsort(acc->rows, acc->n, sizeof *acc->rows, by_recent);
    return EXIT_OK;
}

static void free_rows(ls_acc *acc)
{
    for (size_t i = 0; i < acc->n; i++)
        free(acc->rows[i].path);
    free(acc->rows);
}

static int cmd_ls(tool *t)
{
    ls_acc acc = {0};
    kpc_status walked = KPC_OK;
    int rc = tool_open(t);
    if (rc == EXIT_OK)
        rc = walk_rows(t, false, &acc, &walked);
    if (rc != EXIT_OK)
        return rc;
    cJSON *arr = t->json ? cJSON_CreateArray() : NULL;
    if (!arr) /* SIZE is the file's: the record header plus the code `kpc compile` reports */
        printf("%-32s %-4s %-24s %9s %-19s %s\n", "KEY", "KIND", "TARGET", "FILE SIZE", "LAST USE", "SOURCE");
    for (size_t i = 0; i < acc.n; i++) {
        const ls_row *r = &acc.rows[i];
        if (arr) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "key", r->key);
            cJSON_AddStringToObject(o, "kind", r->kind);
            cJSON_AddStringToObject(o, "target", r->bad ? "" : r->target);
            cJSON_AddNumberToObject(o, "size", (double)r->size);
            cJSON_AddNumberToObject(o, "last_use", (double)(r->mtime_ns / 1000000000u));
            cJSON_AddStringToObject(o, "source", r->source);
            cJSON_AddBoolToObject(o, "damaged", r->bad);
            cJSON_AddItemToArray(arr, o);
            continue;
        }
        char when[32], size[16];
        iso_time(r->mtime_ns, when, sizeof when);
        human(size, sizeof size, r->size);
        printf("%-32s %-4s %-24s %9s %-19s %s\n", r->key, r->kind, r->bad ? "(damaged)" : r->target, size, when,
               r->source);
    }
    free_rows(&acc);
    rc = arr ? print_json(arr) : EXIT_OK;
    if (walked != KPC_OK) {
        fprintf(stderr, "kpc ls: %s: the walk met errors (above): not every file was listed\n", t->root);
        return EXIT_FAIL;
    }
    return rc;
}

static int cmd_verify(tool *t)
{
    ls_acc acc = {0};
    int rc = tool_open(t);
    if (rc != EXIT_OK)
        return rc;
    if (!t->root[0] && !t->json)
        return say_absent(t);
    kpc_status walked = KPC_OK;
    if ((rc = walk_rows(t, true, &acc, &walked)) != EXIT_OK)
        return rc;
    size_t removed = 0, failed_removals = 0;
    cJSON *arr = t->json ? cJSON_CreateArray() : NULL;
    for (size_t i = 0; i < acc.n; i++) {
        const ls_row *r = &acc.rows[i];
        if (!r->bad)
            continue;
        bool ok = r->removed; /* the walk removed it while it still held what it checked */
        ok ? removed++ : failed_removals++;
        if (arr) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "path", r->path);
            cJSON_AddBoolToObject(o, "removed", ok);
            cJSON_AddItemToArray(arr, o);
        } else
            printf("%s %s\n", ok ? "removed" : "could not remove", r->path);
    }
    if (arr) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "checked", (double)acc.n);
        cJSON_AddNumberToObject(o, "removed", (double)removed);
        cJSON_AddItemToObject(o, "damaged", arr);
        print_json(o);
    } else
        printf("checked %zu %s, removed %zu damaged\n", acc.n, plural(acc.n, "file", "files"), removed);
    free_rows(&acc);
    if (walked != KPC_OK)
        fprintf(stderr, "kpc verify: %s: the walk met errors (above): not every file was checked\n",
                t->root);
    return walked != KPC_OK || removed || failed_removals ? EXIT_FAIL : EXIT_OK;
}

/* ---- prune / clear ------------------------------------------------------------------ */
static int prune_option(tool *t, int c, const char *arg)
{
    if (c == OPT_STALE)
        t->stale = true;
    else
        t->max_size = arg;
    return EXIT_OK;
}

static int cmd_prune(tool *t)
{
    int rc = tool_open(t);
    if (rc != EXIT_OK)
        return rc;
    uint64_t max = t->set.disk_max_bytes;
    if (t->max_size && kpc_config_parse_size(t->max_size, &max) != KPC_OK) {
        if (strcmp(t->max_size, "0") != 0)
            return usage_error(t, "--max-size takes a size such as 512M or 2G, not \"%s\"", t->max_size);
        max = 0;
    }
    kpc_prune_result res = {0};
    kpc_status s = KPC_OK;
    if (!t->root[0] && !t->json)
        return say_absent(t);
    if (t->root[0]) { /* else --json: an absent cache is an empty one, all zeros */
        kpc_store *st;
        if ((rc = tool_store(t, &st)) != EXIT_OK)
            return rc;
        uint8_t id[16];
        char desc[512];
        if (t->stale) {
            /* the identity a context would key with now (the compiler is loaded only if its
             * files changed since the last process remembered it) */
            s = kpc_platform_get()->identity(kpc_store_root(st), id, desc, sizeof desc);
            if (s != KPC_OK) {
                fprintf(stderr, "kpc prune: --stale needs the installed compiler's identity: %s\n",
                        kpc_status_str(s));
                kpc_store_close(st);
                return EXIT_FAIL;
            }
        }
        /* wait for a library process that is pruning: its limit may be higher than ours */
        s = kpc_store_prune_wait(st, max, t->stale ? id : NULL, &res);
        kpc_store_close(st);
    }
    if (t->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "files_before", (double)res.files_before);
        cJSON_AddNumberToObject(o, "bytes_before", (double)res.bytes_before);
        cJSON_AddNumberToObject(o, "files_removed", (double)res.files_removed);
        cJSON_AddNumberToObject(o, "bytes_removed", (double)res.bytes_removed);
        cJSON_AddNumberToObject(o, "temp_removed", (double)res.temp_removed);
        cJSON_AddNumberToObject(o, "max_bytes", (double)max);
        print_json(o);
    } else {
        char b[16], m[16];
        human(b, sizeof b, res.bytes_removed);
        human(m, sizeof m, max);
        printf("removed %llu of %llu %s (%s); limit %s\n", (unsigned long long)res.files_removed,
               (unsigned long long)res.files_before, plural(res.files_before, "file", "files"), b, m);
    }
    return s == KPC_OK ? EXIT_OK : EXIT_FAIL;
}

static int cmd_clear(tool *t)
{
    int rc = tool_open(t);
    if (rc != EXIT_OK)
        return rc;
    if (!t->root[0] && !t->json)
        return say_absent(t);
    uint64_t removed = 0, failed = 0;
    kpc_status s = KPC_OK;
    if (t->root[0]) {
        kpc_store *st;
        if ((rc = tool_store(t, &st)) != EXIT_OK)
            return rc;
        /* each failed removal or walk error is logged; the command then fails, whatever it
         * did remove (issue 13 point 11) */
        s = kpc_store_clear(st, &removed, &failed);
        kpc_store_close(st);
    }
    if (t->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "removed", (double)removed);
        cJSON_AddNumberToObject(o, "failed", (double)failed);
        print_json(o);
    } else
        printf("removed %llu %s\n", (unsigned long long)removed, plural(removed, "file", "files"));
    if (s != KPC_OK) {
        fprintf(stderr, "kpc clear: %s: %llu %s could not be removed%s (above)\n", t->root,
                (unsigned long long)failed, plural(failed, "file", "files"), failed ? "" : ", the walk met errors");
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

/* ---- replay, pack (src/tools/replay.c, src/tools/pack.c) ------------------------------ */
static int replay_option(tool *t, int c, const char *arg)
{
    if (c == OPT_FROM_TARGET) {
        t->from_target = arg;
        return EXIT_OK;
    }
    return compile_option(t, c, arg); /* --target, -j */
}

static int cmd_replay(tool *t)
{
    kpc_tool_replay_args a = {.cache_dir = t->cache_dir, .target = t->target, .from = t->from_target,
                              .jobs = t->jobs, .json = t->json};
    return kpc_tool_replay(&a);
}

static int pack_option(tool *t, int c, const char *arg)
{
    (void)c;
    if (t->num_targets == sizeof t->targets / sizeof t->targets[0])
        return usage_error(t, "at most 64 --target options, not \"%s\"", arg);
    t->targets[t->num_targets++] = arg;
    return EXIT_OK;
}

static int cmd_pack(tool *t)
{
    if (t->num_operands != 2)
        return usage_error(t, "pack takes a verb (create, verify, ls) and one FILE");
    return kpc_tool_pack(t->operands[0], t->operands[1], t->targets, t->num_targets, t->cache_dir, t->json);
}

/* ---- the table ---------------------------------------------------------------------- */
static const struct option compile_options[] = {
    {"target", required_argument, NULL, 't'},    {"option", required_argument, NULL, OPT_OPTION},
    {"name-expr", required_argument, NULL, OPT_NAME_EXPR}, {"output", required_argument, NULL, 'o'},
    {"jobs", required_argument, NULL, 'j'},      {NULL, 0, NULL, 0}};
static const struct option replay_options[] = {
    {"target", required_argument, NULL, 't'}, {"from-target", required_argument, NULL, OPT_FROM_TARGET},
    {"jobs", required_argument, NULL, 'j'},   {NULL, 0, NULL, 0}};
static const struct option pack_options[] = {{"target", required_argument, NULL, 't'}, {NULL, 0, NULL, 0}};
static const struct option prune_options[] = {
    {"max-size", required_argument, NULL, OPT_MAX_SIZE}, {"stale", no_argument, NULL, OPT_STALE},
    {NULL, 0, NULL, 0}};

static const command commands[] = {
    {"compile", cmd_compile, compile_options, "t:o:j:", compile_option, true,
     "[--target T] [--option OPT]... [--name-expr E]... [-o OUT] [-j N] FILE...",
     "get each file's code object through the cache; print hit or built",
     "Get each FILE's code object through the cache (built once per host, then hit), as an\n"
     "application would, and print per file: built or hit, the time, the size of the code\n"
     "object itself (`kpc ls` shows the file, which adds a header) and the file name.\n"
     "  -t, --target T     compile for target T (gfx90a, sm_90): no GPU needed; default: the\n"
     "                     target of GPU 0\n"
     "  --option OPT       a compiler option (repeatable)\n"
     "  --name-expr E      a name expression to lower, e.g. 'scale<float>' (repeatable)\n"
     "  -o, --output OUT   write the code object to OUT (with several files: OUT/NAME.co)\n"
     "  -j, --jobs N       compile in N processes (default: one per core); on a terminal a\n"
     "                     progress line shows done/total, hits, builds, failures and ETA\n"},
    {"stats", cmd_stats, NULL, "", NULL, false, "", "host-wide counters from the shm index, and disk usage",
     "Print the host index's counters (lookups, hits, builds, ...) and the disk usage.\n"},
    {"ls", cmd_ls, NULL, "", NULL, false, "", "one row per cached code object (file sizes)",
     "List every cached record, newest first: key, kind (co or log), target, the file's size\n"
     "(a record header plus the code object), last use, source name.\n"},
    {"verify", cmd_verify, NULL, "", NULL, false, "", "check every cached file; remove and report the bad ones",
     "Check every cached file (header, checksum, size); remove the damaged ones and name them.\n"
     "Exits 1 when it found damage.\n"},
    {"prune", cmd_prune, prune_options, "", prune_option, false, "[--max-size SIZE] [--stale]",
     "evict least recently used files down to SIZE",
     "Evict the least recently used files until the cache fits in SIZE.\n"
     "  --max-size SIZE    the size to prune to, e.g. 512M or 2G (default: KPC_CACHE_MAX_SIZE, 2G)\n"
     "  --stale            also remove every object built by another compiler\n"},
    {"replay", cmd_replay, replay_options, "t:j:", replay_option, false, "[--target T] [--from-target S] [-j N]",
     "rebuild the recorded requests for a new compiler (or target S's for target T)",
     "Rebuild, in N worker processes, every recorded request whose compiler is not the\n"
     "installed one (after an upgrade), or with --from-target S every request recorded for\n"
     "target S, for target T. Requests that no longer compile are listed, not fatal; a\n"
     "progress line shows done/total, rate and ETA on a terminal. Then `kpc prune --stale`.\n"
     "  -t, --target T       the target to build for (alone: only T's stale requests)\n"
     "  --from-target S      replay the requests recorded for S (needs --target)\n"
     "  -j, --jobs N         worker processes (default: one per core)\n"},
    {"pack", cmd_pack, pack_options, "t:", pack_option, true, "create OUT.kpack [--target T]... | verify FILE | ls FILE",
     "pre-built records in one file, read through KPC_PACK_PATH",
     "create: write the cache's code records (of the targets given) into one pack file;\n"
     "verify: check a pack and every entry (exit 1 if any is damaged); ls: list its entries.\n"
     "  -t, --target T       create: only records of target T (repeatable)\n"},
    {"clear", cmd_clear, NULL, "", NULL, false, "", "remove every cached code object",
     "Remove every cached code object and build log (the host index stays: see kpc-shm-reset).\n"},
};
#define NUM_COMMANDS (sizeof commands / sizeof commands[0])

static const command *find_command(const char *name)
{
    for (size_t i = 0; i < NUM_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

static void print_main_help(FILE *f)
{
    fprintf(f, "usage: kpc COMMAND [OPTIONS] [FILE...]\n"
               "       kpc help COMMAND | kpc COMMAND --help | kpc --version\n"
               "The kpc code-object cache: compile through it, inspect it, trim it.\n\nCommands:\n");
    for (size_t i = 0; i < NUM_COMMANDS; i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nEvery command takes --cache-dir DIR, --json (where it prints data) and -h/--help.\n"
               "Exit status: 0 success, 1 failure, 2 bad usage. See kpc(1) and kpc-shm-reset(1).\n");
}

static void print_command_help(const command *c)
{
    printf("usage: kpc %s [--cache-dir DIR] [--json]%s%s\n%s%s", c->name, c->synopsis[0] ? " " : "", c->synopsis,
           c->help, common_help);
}

/* Read the command's options and the common ones into *t; operands follow them. Returns
 * -1 to go on, else the exit status (help printed, or a usage error). */
static int parse(tool *t, int argc, char **argv)
{
    const command *c = t->cmd;
    struct option opts[32];
    size_t n = 0;
    for (const struct option *o = c->options; o && o->name; o++)
        opts[n++] = *o;
    for (const struct option *o = common_options; o->name; o++)
        opts[n++] = *o;
    opts[n] = (struct option){NULL, 0, NULL, 0};
    char shortopts[32];
    snprintf(shortopts, sizeof shortopts, ":%sh", c->shortopts); /* ':': we word the errors */
    opterr = 0;
    optind = 1;
    int ch;
    while ((ch = getopt_long(argc, argv, shortopts, opts, NULL)) != -1) {
        switch (ch) {
        case OPT_CACHE_DIR: t->cache_dir = optarg; break;
        case OPT_JSON: t->json = true; break;
        case 'h': print_command_help(c); return EXIT_OK;
        case ':':
            return usage_error(t, "option '%s' needs a value", argv[optind - 1]);
        case '?':
            if (optopt && optopt < OPT_CACHE_DIR)
                return usage_error(t, "unknown option '-%c'", optopt);
            return usage_error(t, "unknown option '%s'", argv[optind - 1]);
        default:
            if (c->option(t, ch, optarg) != EXIT_OK)
                return EXIT_USAGE;
        }
    }
    t->operands = argv + optind;
    t->num_operands = argc - optind;
    if (c->operands && t->num_operands == 0)
        return usage_error(t, "%s needs at least one FILE", c->name);
    if (!c->operands && t->num_operands > 0)
        return usage_error(t, "%s takes no operands, not \"%s\"", c->name, t->operands[0]);
    return -1;
}

/* The output helpers, for the subcommands in their own files (tools/tool.h). */
void kpc_tool_human(char *buf, size_t len, uint64_t bytes) { human(buf, len, bytes); }
int kpc_tool_print_json(cJSON *j) { return print_json(j); }

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: kpc COMMAND [OPTIONS] [FILE...]\n");
        return usage_error(NULL, "missing COMMAND");
    }
    const char *name = argv[1];
    if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0 ||
        (strcmp(name, "help") == 0 && argc == 2)) {
        print_main_help(stdout);
        return EXIT_OK;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0) {
        printf("kpc %s\n", KPC_TOOL_VERSION);
        return EXIT_OK;
    }
    tool t = {0};
    if (strcmp(name, "help") == 0) {
        if (argc > 3)
            return usage_error(NULL, "help takes one COMMAND");
        if ((t.cmd = find_command(argv[2])) == NULL)
            return usage_error(NULL, "unknown command \"%s\"", argv[2]);
        print_command_help(t.cmd);
        return EXIT_OK;
    }
    if ((t.cmd = find_command(name)) == NULL) {
        if (name[0] == '-')
            return usage_error(NULL, "options follow the command (kpc COMMAND %s ...)", name);
        return usage_error(NULL, "unknown command \"%s\"", name);
    }
    /* room for every argument as an --option or --name-expr */
    t.options = calloc((size_t)argc, sizeof *t.options);
    t.exprs = calloc((size_t)argc, sizeof *t.exprs);
    if (t.options == NULL || t.exprs == NULL)
        return EXIT_FAIL;
    /* getopt_long sees the subcommand as argv[0] */
    int rc = parse(&t, argc - 1, argv + 1);
    if (rc < 0)
        rc = t.cmd->run(&t);
    free(t.options);
    free(t.exprs);
    return rc;
}
