/*
 * kpc - the cache tool: compile, stats, ls, verify, prune, clear.
 *
 * Every subcommand takes --cache-dir DIR (else the environment), --json where it prints
 * data, and -h/--help; it exits 0 on success, 1 on failure, 2 on bad usage. Only
 * `compile` (and `prune --stale`, which needs the installed compiler's identity) ever
 * loads the compiler; the others read the disk tree and the host index, so they run on
 * a login node with no ROCm at all.
 */
#define _GNU_SOURCE
#include "base/log.h"
#include "base/root.h"
#include "core/config.h"
#include "core/key.h"
#include "platform/platform.h"
#include "storage/index.h"
#include "storage/remote.h"
#include "storage/store.h"
#include "tools/tool.h"

#include <bsd/libutil.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

/* options every subcommand shares */
typedef struct common {
    const char *cache_dir;
    bool json;
} common;

enum { OPT_CACHE_DIR = 1000, OPT_JSON, OPT_MAX_SIZE, OPT_STALE, OPT_OPTION, OPT_NAME_EXPR };

static const char *const usage_text =
    "usage: kpc COMMAND [OPTIONS]\n"
    "  compile --target T [--option OPT]... [--name-expr E]... [-o OUT] [-j N] FILE...\n"
    "                     get each file's code object through the cache; print hit or built\n"
    "  stats              host-wide counters from the shm index, and disk usage\n"
    "  ls                 one row per cached code object\n"
    "  verify             check every cached file; remove and report the bad ones\n"
    "  prune [--max-size SIZE] [--stale]\n"
    "                     evict least recently used files down to SIZE (default: the limit);\n"
    "                     --stale also removes every object built by another compiler\n"
    "  clear              remove every cached code object\n"
    "  replay [--target T] [--from-target S] [-j N]\n"
    "                     rebuild the recorded requests of another compiler (or those of\n"
    "                     target S for target T) in N worker processes\n"
    "  pack create OUT.kpack [--target T]... | pack verify FILE | pack ls FILE\n"
    "                     pre-built records in one file, read through KPC_PACK_PATH\n"
    "Every command takes --cache-dir DIR, --json (where it prints data) and -h/--help.\n"
    "Exit status: 0 success, 1 failure, 2 bad usage. Manual: docs/manual.md\n";

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "kpc: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", usage_text);
    return EXIT_USAGE;
}

/* "955B", "4.2KB", "2.0GB": humanize_number scales only as far as the width needs, so
 * the width (6 characters) is what asks for the short form. */
static void human(char *buf, size_t len, uint64_t bytes)
{
    humanize_number(buf, len < 7 ? len : 7, (int64_t)bytes, "B", HN_AUTOSCALE, HN_DECIMAL | HN_NOSPACE);
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

/* Resolve settings; returns NULL-free root path (realpath) or "" if the dir is absent. */
static int resolve(const common *co, kpc_settings *set, char *root, size_t cap)
{
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = co->cache_dir};
    if (kpc_config_resolve(&cfg, set) != KPC_OK)
        return EXIT_USAGE;
    if (set->cache_dir[0] == '\0') {
        fprintf(stderr, "kpc: no cache directory: set KPC_CACHE_DIR or HOME, or give --cache-dir\n");
        return EXIT_FAIL;
    }
    root[0] = '\0';
    if (!kpc_root_realpath(set->cache_dir, root, cap))
        root[0] = '\0';
    return EXIT_OK;
}

static int open_store(const kpc_settings *set, kpc_store **st)
{
    if (kpc_store_open(set->cache_dir, set->disk_max_bytes, st) != KPC_OK) {
        fprintf(stderr, "kpc: cannot use cache directory %s (see the log above)\n", set->cache_dir);
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

/* ---- compile ------------------------------------------------------------------------ */
#define LOG_MAX 8192
#define LOWERED_MAX 32768 /* the lowered names of a file, one after another, each with its NUL */

/* A file's status until its worker finishes with it: a worker that dies leaves it so. */
#define RESULT_PENDING (-1)

typedef struct file_result {
    int status;       /* kpc_status, or RESULT_PENDING */
    int outcome;      /* 0 built, 1 hit, 2 waited (another process built it) */
    double seconds;
    uint64_t size;
    char lowered[LOWERED_MAX]; /* a name that does not fit is left empty (and said so) */
    char log[LOG_MAX];
} file_result;

/* The lowered name of expression e of a result: names are packed in order. */
static const char *lowered_name(const file_result *r, size_t e)
{
    const char *p = r->lowered;
    while (e-- > 0)
        p += strlen(p) + 1;
    return p;
}

typedef struct compile_job {
    const common *co;
    const char *target;
    const char **options;
    size_t num_options;
    const char **exprs;
    size_t num_exprs;
    const char *out;
    char **files;
    int num_files;
    file_result *results; /* shared with the workers */
} compile_job;

static char *read_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    void *buf = NULL;
    kpc_status s = kpc__read_fd(fd, 256u << 20, &buf, len);
    close(fd);
    return s == KPC_OK ? buf : NULL;
}

static int write_out(const compile_job *job, int i, kpc_program *p)
{
    char path[4096];
    if (job->num_files == 1)
        snprintf(path, sizeof path, "%s", job->out);
    else {
        char *copy = strdup(job->files[i]);
        snprintf(path, sizeof path, "%s/%s.co", job->out, basename(copy));
        free(copy);
    }
    size_t size;
    const void *code = kpc_program_code(p, &size);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || kpc__write_all(fd, code, size) != 0) {
        fprintf(stderr, "kpc: cannot write %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

/* Compile one file; its status is stored last, so a worker killed before that leaves it
 * RESULT_PENDING. */
static void compile_one(const compile_job *job, kpc_cache *cache, kpc_context *ctx, int i)
{
    file_result *r = &job->results[i];
    size_t len;
    char *code = read_file(job->files[i], &len);
    if (code == NULL) {
        snprintf(r->log, sizeof r->log, "cannot read %s: %s\n", job->files[i], strerror(errno));
        r->status = KPC_E_IO;
        return;
    }
    char *name_copy = strdup(job->files[i]);
    kpc_source src = {.code = code, .code_len = len, .name = basename(name_copy),
                      .options = job->options, .num_options = job->num_options,
                      .name_expressions = job->exprs, .num_name_expressions = job->num_exprs};
    kpc_stats before, after;
    kpc_stats_get(cache, &before);
    kpc_program *p = NULL;
    uint64_t t0 = kpc__now_ns();
    kpc_status s = kpc_program_get(ctx, &src, &p);
    r->seconds = (double)(kpc__now_ns() - t0) / 1e9;
    kpc_stats_get(cache, &after);
    r->outcome = after.builds + after.build_failures > before.builds + before.build_failures ? 0
                 : after.waits > before.waits                                              ? 2
                                                                                           : 1;
    if (s == KPC_OK) {
        size_t size;
        kpc_program_code(p, &size);
        r->size = size;
        size_t used = 0;
        for (size_t e = 0; e < job->num_exprs; e++) {
            const char *low = kpc_program_lowered_name(p, job->exprs[e]);
            size_t n = low ? strlen(low) : 0;
            /* room for this name and an empty one for each expression after it */
            if (used + n + 1 + (job->num_exprs - e - 1) > sizeof r->lowered)
                n = 0, low = NULL;
            memcpy(r->lowered + used, low ? low : "", n);
            r->lowered[used + n] = '\0';
            used += n + 1;
        }
        if (job->out && write_out(job, i, p) != 0)
            s = KPC_E_IO;
    } else
        snprintf(r->log, sizeof r->log, "%s", kpc_last_log());
    kpc_program_release(p);
    free(name_copy);
    free(code);
    r->status = s;
}

/* Compile files i = first, first + step, ... in this process. */
static void compile_some(const compile_job *job, int first, int step)
{
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = job->co->cache_dir};
    kpc_cache *cache = NULL;
    kpc_context *ctx = NULL;
    kpc_status s = kpc_cache_open(&cfg, &cache);
    if (s == KPC_OK)
        s = job->target ? kpc_context_create_for_target(cache, job->target, &ctx)
                        : kpc_context_create(cache, 0, &ctx);
    for (int i = first; i < job->num_files; i += step) {
        if (s == KPC_OK)
            compile_one(job, cache, ctx, i);
        else
            job->results[i].status = s;
    }
    kpc_context_destroy(ctx);
    kpc_cache_close(cache);
}

static int compile_report(const compile_job *job)
{
    static const char *const outcome[] = {"built", "hit", "hit (waited)"};
    int rc = EXIT_OK;
    cJSON *arr = job->co->json ? cJSON_CreateArray() : NULL;
    for (int i = 0; i < job->num_files; i++) {
        const file_result *r = &job->results[i];
        const char *status = r->status == RESULT_PENDING ? "not compiled" : kpc_status_str(r->status);
        if (r->status != KPC_OK) {
            rc = EXIT_FAIL;
            fprintf(stderr, "kpc: %s: %s\n%s", job->files[i], status, r->log);
        }
        if (arr) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "file", job->files[i]);
            cJSON_AddStringToObject(o, "status", status);
            cJSON_AddStringToObject(o, "result", r->status == KPC_OK ? (r->outcome == 0 ? "built" : "hit") : "failed");
            cJSON_AddBoolToObject(o, "waited", r->outcome == 2);
            cJSON_AddNumberToObject(o, "seconds", r->seconds);
            cJSON_AddNumberToObject(o, "size", (double)r->size);
            cJSON *low = cJSON_AddObjectToObject(o, "lowered_names");
            for (size_t e = 0; e < job->num_exprs; e++)
                cJSON_AddStringToObject(low, job->exprs[e], lowered_name(r, e));
            if (r->status != KPC_OK)
                cJSON_AddStringToObject(o, "log", r->log);
            cJSON_AddItemToArray(arr, o);
        } else if (r->status == KPC_OK) {
            char size[16];
            human(size, sizeof size, r->size);
            printf("%-12s %9.3f ms %8s  %s\n", outcome[r->outcome], r->seconds * 1e3, size, job->files[i]);
            for (size_t e = 0; e < job->num_exprs; e++) {
                const char *low = lowered_name(r, e);
                printf("    %s -> %s\n", job->exprs[e], low[0] ? low : "(not found, or too long to report)");
            }
        } else
            printf("%-12s %9.3f ms %8s  %s\n", "failed", r->seconds * 1e3, "-", job->files[i]);
    }
    if (arr)
        print_json(arr);
    return rc;
}

static int cmd_compile(int argc, char **argv, common *co)
{
    static const struct option opts[] = {
        {"target", required_argument, NULL, 't'}, {"option", required_argument, NULL, OPT_OPTION},
        {"name-expr", required_argument, NULL, OPT_NAME_EXPR}, {"output", required_argument, NULL, 'o'},
        {"jobs", required_argument, NULL, 'j'}, {"cache-dir", required_argument, NULL, OPT_CACHE_DIR},
        {"json", no_argument, NULL, OPT_JSON}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    compile_job job = {.co = co};
    job.options = calloc((size_t)argc, sizeof *job.options);
    job.exprs = calloc((size_t)argc, sizeof *job.exprs);
    long jobs = sysconf(_SC_NPROCESSORS_ONLN);
    int c;
    while ((c = getopt_long(argc, argv, "t:o:j:h", opts, NULL)) != -1) {
        switch (c) {
        case 't': job.target = optarg; break;
        case OPT_OPTION: job.options[job.num_options++] = optarg; break;
        case OPT_NAME_EXPR: job.exprs[job.num_exprs++] = optarg; break;
        case 'o': job.out = optarg; break;
        case 'j': {
            char *end;
            jobs = strtol(optarg, &end, 10);
            if (*end != '\0' || jobs < 1 || jobs > 1024)
                return usage_error("-j takes a number from 1 to 1024, not \"%s\"", optarg);
            break;
        }
        case OPT_CACHE_DIR: co->cache_dir = optarg; break;
        case OPT_JSON: co->json = true; break;
        case 'h': fputs(usage_text, stdout); return EXIT_OK;
        default: return usage_error("%s", "bad option for compile");
        }
    }
    job.files = argv + optind;
    job.num_files = argc - optind;
    if (job.num_files == 0)
        return usage_error("%s", "compile needs at least one FILE");
    if (job.num_files > 1 && job.out) {
        struct stat st;
        if (stat(job.out, &st) != 0 || !S_ISDIR(st.st_mode))
            return usage_error("with several files, -o names an existing directory: %s", job.out);
        /* DIR/NAME.co per file: two files of one name would overwrite each other */
        for (int i = optind; i < argc; i++)
            for (int j = optind; j < i; j++) {
                const char *a = strrchr(argv[i], '/'), *b = strrchr(argv[j], '/');
                if (strcmp(a ? a + 1 : argv[i], b ? b + 1 : argv[j]) == 0)
                    return usage_error("-o DIR: two files named %s would be written to one file",
                                       a ? a + 1 : argv[i]);
            }
    }
    /* a malformed environment is bad usage here too, not a failure of every file */
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = co->cache_dir};
    kpc_settings set;
    if (kpc_config_resolve(&cfg, &set) != KPC_OK)
        return EXIT_USAGE;
    if (jobs > job.num_files)
        jobs = job.num_files;
    job.results = mmap(NULL, sizeof(file_result) * (size_t)job.num_files, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (job.results == MAP_FAILED)
        return EXIT_FAIL;
    for (int i = 0; i < job.num_files; i++)
        job.results[i].status = RESULT_PENDING;
    if (jobs <= 1) {
        compile_some(&job, 0, 1);
    } else {
        /* hipRTC compiles one source at a time per process: parallel builds need
         * processes. Fork before anything loads the compiler. */
        fflush(NULL);
        pid_t pids[1024];
        int started = 0;
        for (; started < jobs; started++) {
            pids[started] = fork();
            if (pids[started] == 0) {
                compile_some(&job, started, (int)jobs);
                _exit(0);
            }
            if (pids[started] < 0) { /* the shares of the workers not started stay pending */
                perror("kpc: fork");
                break;
            }
        }
        for (int w = 0; w < started; w++) {
            int st;
            while (waitpid(pids[w], &st, 0) < 0 && errno == EINTR)
                ;
            if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
                continue;
            for (int i = w; i < job.num_files; i += (int)jobs)
                if (job.results[i].status == RESULT_PENDING) {
                    if (WIFSIGNALED(st))
                        snprintf(job.results[i].log, LOG_MAX, "its worker process %d was killed by signal %d\n",
                                 (int)pids[w], WTERMSIG(st));
                    else
                        snprintf(job.results[i].log, LOG_MAX, "its worker process %d exited with status %d\n",
                                 (int)pids[w], WEXITSTATUS(st));
                }
        }
        for (int w = started; w < jobs; w++)
            for (int i = w; i < job.num_files; i += (int)jobs)
                snprintf(job.results[i].log, LOG_MAX, "no worker process could be started for it\n");
    }
    return compile_report(&job);
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

static int cmd_stats(int argc, char **argv, common *co)
{
    (void)argc, (void)argv;
    kpc_settings set;
    char root[4096];
    int rc = resolve(co, &set, root, sizeof root);
    if (rc != EXIT_OK)
        return rc;
    kpc_index_counters ic = {0};
    kpc_index *ix = NULL;
    char name[96] = "";
    const char *index_state = "absent";
    if (root[0]) {
        kpc_root_segment_name(root, name, sizeof name);
        kpc_status s = kpc_index_open_existing(root, &ix);
        if (s == KPC_OK) {
            kpc_index_counters_get(ix, &ic);
            /* a lock past its deadline or a truncated segment: logged, counters 0 */
            index_state = kpc_index_usable(ix) ? "ok" : "unusable";
            kpc_index_close(ix);
        } else if (s != KPC_E_NOT_FOUND)
            index_state = "damaged";
    }
    uint64_t bytes = 0, files = 0;
    kpc_store *st = NULL;
    if (root[0]) {
        /* a directory the library would refuse (another owner, not a directory) is a
         * failure, not an empty cache */
        if ((rc = open_store(&set, &st)) != EXIT_OK)
            return rc;
        kpc_store_usage(st, &bytes, &files);
        kpc_store_close(st);
    }
    char rurl[1600];
    kpc_remote_counters rcn;
    const char *rstate = remote_state(rurl, sizeof rurl, &rcn);
    if (co->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "cache_dir", root[0] ? root : set.cache_dir);
        cJSON_AddStringToObject(o, "index", index_state);
        cJSON_AddStringToObject(o, "index_name", name);
        const struct { const char *k; uint64_t v; } f[] = {
            {"lookups", ic.lookups}, {"hits", ic.hits}, {"builds", ic.builds},
            {"build_failures", ic.build_failures}, {"waits", ic.waits}, {"takeovers", ic.takeovers},
            {"evictions", ic.evictions}, {"entries", ic.entries}, {"capacity", ic.capacity},
            {"attached", ic.attached}, {"disk_bytes", bytes}, {"disk_files", files},
            {"disk_max_bytes", set.disk_max_bytes}, {"wait_timeouts", ic.wait_timeouts},
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
    human(hm, sizeof hm, set.disk_max_bytes);
    printf("cache dir      %s\n", root[0] ? root : set.cache_dir);
    printf("host index     %s %s\n", index_state, name);
    printf("lookups        %llu\nhits           %llu\nbuilds         %llu\nbuild failures %llu\n"
           "waits          %llu\ntakeovers      %llu\nevictions      %llu\nentries        %llu / %llu\n"
           "attached       %llu\ndisk           %s in %llu files (limit %s)\n"
           "wait timeouts  %llu\n",
           (unsigned long long)ic.lookups, (unsigned long long)ic.hits, (unsigned long long)ic.builds,
           (unsigned long long)ic.build_failures, (unsigned long long)ic.waits,
           (unsigned long long)ic.takeovers, (unsigned long long)ic.evictions,
           (unsigned long long)ic.entries, (unsigned long long)ic.capacity,
           (unsigned long long)ic.attached, hb, (unsigned long long)files, hm,
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
    snprintf(r->kind, sizeof r->kind, "%s", strstr(base, ".log") ? "log" : "co");
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

static int list_or_verify(common *co, bool verify)
{
    kpc_settings set;
    char root[4096];
    int rc = resolve(co, &set, root, sizeof root);
    if (rc != EXIT_OK)
        return rc;
    ls_acc acc = {0};
    if (root[0]) {
        kpc_store *st;
        if ((rc = open_store(&set, &st)) != EXIT_OK)
            return rc;
        kpc_store_walk(st, verify, collect_row, &acc);
        kpc_store_close(st);
    }
    if (acc.n > 1) /* qsort wants a non-NULL array, even of none */
        qsort(acc.rows, acc.n, sizeof *acc.rows, by_recent);
    size_t removed = 0, failed_removals = 0;
    cJSON *arr = co->json ? cJSON_CreateArray() : NULL;
    if (!co->json && !verify)
        printf("%-32s %-4s %-24s %8s %-19s %s\n", "KEY", "KIND", "TARGET", "SIZE", "LAST USE", "SOURCE");
    for (size_t i = 0; i < acc.n; i++) {
        ls_row *r = &acc.rows[i];
        char when[32], size[16];
        iso_time(r->mtime_ns, when, sizeof when);
        human(size, sizeof size, r->size);
        if (verify) {
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
            continue;
        }
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
        } else
            printf("%-32s %-4s %-24s %8s %-19s %s\n", r->key, r->kind, r->bad ? "(damaged)" : r->target,
                   size, when, r->source);
    }
    if (verify && arr) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "checked", (double)acc.n);
        cJSON_AddNumberToObject(o, "removed", (double)removed);
        cJSON_AddItemToObject(o, "damaged", arr);
        arr = o;
    } else if (verify)
        printf("checked %zu files, removed %zu damaged\n", acc.n, removed);
    for (size_t i = 0; i < acc.n; i++)
        free(acc.rows[i].path);
    free(acc.rows);
    if (arr)
        print_json(arr);
    return verify && (removed || failed_removals) ? EXIT_FAIL : EXIT_OK;
}

/* ---- prune / clear ------------------------------------------------------------------ */
static int cmd_prune(common *co, const char *max_size, bool stale)
{
    kpc_settings set;
    char root[4096];
    int rc = resolve(co, &set, root, sizeof root);
    if (rc != EXIT_OK)
        return rc;
    uint64_t max = set.disk_max_bytes;
    if (max_size && kpc_config_parse_size(max_size, &max) != KPC_OK) {
        if (strcmp(max_size, "0") != 0)
            return usage_error("--max-size takes a size such as 512M or 2G, not \"%s\"", max_size);
        max = 0;
    }
    kpc_prune_result res = {0};
    kpc_status s = KPC_OK;
    if (!root[0] && !co->json) {
        printf("no cache directory %s: nothing to prune\n", set.cache_dir);
        return EXIT_OK;
    }
    if (root[0]) { /* else --json: an absent cache is an empty one, all zeros */
        kpc_store *st;
        if ((rc = open_store(&set, &st)) != EXIT_OK)
            return rc;
        uint8_t id[16];
        char desc[512];
        if (stale) {
            /* the identity a context would key with now (the compiler is loaded only if its
             * files changed since the last process remembered it) */
            s = kpc_platform_get()->identity(kpc_store_root(st), id, desc, sizeof desc);
            if (s != KPC_OK) {
                fprintf(stderr, "kpc: --stale needs the installed compiler's identity: %s\n", kpc_status_str(s));
                kpc_store_close(st);
                return EXIT_FAIL;
            }
        }
        /* wait for a library process that is pruning: its limit may be higher than ours */
        s = kpc_store_prune_wait(st, max, stale ? id : NULL, &res);
        kpc_store_close(st);
    }
    if (co->json) {
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
        printf("removed %llu of %llu files (%s); limit %s\n", (unsigned long long)res.files_removed,
               (unsigned long long)res.files_before, b, m);
    }
    return s == KPC_OK ? EXIT_OK : EXIT_FAIL;
}

static int cmd_clear(common *co)
{
    kpc_settings set;
    char root[4096];
    int rc = resolve(co, &set, root, sizeof root);
    if (rc != EXIT_OK)
        return rc;
    uint64_t removed = 0;
    if (root[0]) {
        kpc_store *st;
        if ((rc = open_store(&set, &st)) != EXIT_OK)
            return rc;
        kpc_status s = kpc_store_clear(st, &removed);
        kpc_store_close(st);
        if (s != KPC_OK)
            return EXIT_FAIL;
    }
    if (co->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "removed", (double)removed);
        return print_json(o);
    }
    printf("removed %llu files\n", (unsigned long long)removed);
    return EXIT_OK;
}

/* Options of the data commands: --cache-dir, --json, -h, and prune's own. */
static int cmd_simple(const char *cmd, int argc, char **argv, common *co)
{
    static const struct option opts[] = {
        {"cache-dir", required_argument, NULL, OPT_CACHE_DIR}, {"json", no_argument, NULL, OPT_JSON},
        {"max-size", required_argument, NULL, OPT_MAX_SIZE}, {"stale", no_argument, NULL, OPT_STALE},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    const char *max_size = NULL;
    bool stale = false, is_prune = strcmp(cmd, "prune") == 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_CACHE_DIR: co->cache_dir = optarg; break;
        case OPT_JSON: co->json = true; break;
        case OPT_MAX_SIZE:
        case OPT_STALE:
            if (!is_prune)
                return usage_error("%s takes no --max-size or --stale", cmd);
            if (c == OPT_STALE)
                stale = true;
            else
                max_size = optarg;
            break;
        case 'h': fputs(usage_text, stdout); return EXIT_OK;
        default: return usage_error("bad option for %s", cmd);
        }
    }
    if (optind != argc)
        return usage_error("%s takes no operands", cmd);
    if (strcmp(cmd, "stats") == 0)
        return cmd_stats(argc, argv, co);
    if (strcmp(cmd, "ls") == 0)
        return list_or_verify(co, false);
    if (strcmp(cmd, "verify") == 0)
        return list_or_verify(co, true);
    if (is_prune)
        return cmd_prune(co, max_size, stale);
    return cmd_clear(co);
}

/* The output helpers, for the subcommands in their own files (tools/tool.h). */
void kpc_tool_human(char *buf, size_t len, uint64_t bytes) { human(buf, len, bytes); }
int kpc_tool_print_json(cJSON *j) { return print_json(j); }

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage_error("%s", "missing COMMAND");
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage_text, stdout);
        return EXIT_OK;
    }
    common co = {0};
    /* getopt_long sees the subcommand as argv[0] */
    if (strcmp(cmd, "compile") == 0)
        return cmd_compile(argc - 1, argv + 1, &co);
    if (strcmp(cmd, "replay") == 0)
        return kpc_tool_replay(argc - 1, argv + 1);
    if (strcmp(cmd, "pack") == 0)
        return kpc_tool_pack(argc - 1, argv + 1);
    static const char *const simple[] = {"stats", "ls", "verify", "prune", "clear"};
    for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++)
        if (strcmp(cmd, simple[i]) == 0)
            return cmd_simple(cmd, argc - 1, argv + 1, &co);
    return usage_error("unknown command \"%s\"", cmd);
}
