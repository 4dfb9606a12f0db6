/*
 * replay.c - `kpc replay`: the cache rebuilt for a new compiler or a new target before
 * the job needs it, from the requests the records keep (request.c).
 *
 *   kpc replay [--target T] [--from-target S] [-j N]
 *     no --from-target  every recorded request whose compiler identity is not the
 *                       installed compiler's (after an upgrade), for its own target (or
 *                       only those of target T)
 *     --from-target S   every request recorded for target S, built for target T
 *
 * The parent walks the tree (headers only), reads each selected record to learn the
 * hidden-option environment its request was made under, and sorts the requests into
 * groups of one environment. For each group it forks N workers with that environment
 * set before anything loads the compiler (hipRTC reads those variables when it loads);
 * the workers take the next request from a shared cursor and get it through
 * kpc_program_get, so the host index spreads the work and the new records keep their
 * requests too. The identity of the installed compiler is computed in a child, so the
 * parent never loads the compiler before forking. Results live in shared memory: a
 * worker that dies leaves its request "not replayed". A request that no longer compiles
 * is listed with its log, not fatal: the exit status is 0 when every request was tried.
 */
#define _GNU_SOURCE
#include "base/log.h"
#include "base/util.h"
#include "core/cache.h"
#include "core/config.h"
#include "core/key.h"
#include "platform/platform.h"
#include "storage/request_codec.h"
#include "storage/store.h"
#include "tools/pool.h"
#include "tools/tool.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PENDING (-1)
#define MAX_JOBS 1024
#define LOG_KEEP 1024

typedef struct item {
    kpc_key key;
    char target[64];   /* the record's target */
    char name[80];     /* its source name */
    size_t group;      /* its environment group */
    /* written by the worker that takes it */
    int status;        /* kpc_status, or PENDING */
    bool built;        /* a compile ran (else the object was there already) */
    char log[LOG_KEEP];
} item;

typedef struct shared {
    atomic_size_t cursor, done;
} shared;

typedef struct job {
    const char *cache_dir;
    const char *target, *from;
    uint8_t id[16];
    size_t no_request; /* selected records that keep no request */
    item *items;       /* shared mapping */
    size_t n, cap;
    char **groups;     /* environment signatures: "NAME=value\n" or "NAME\n" (unset) */
    size_t ngroups;
    shared *sh;
    kpc_store *store;
} job;

static int usage(const char *msg)
{
    fprintf(stderr, "kpc replay: %s\nusage: kpc replay [--target T] [--from-target S] [-j N] "
            "[--cache-dir DIR] [--json]\n", msg);
    return KPC_TOOL_USAGE;
}

/* The installed compiler's identity, computed in a child: the parent forks workers
 * afterwards and must not have loaded the compiler. */
static kpc_status identity_in_child(const kpc_root *root, uint8_t id[16])
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return KPC_E_IO;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        return KPC_E_IO;
    }
    if (pid == 0) {
        char desc[512];
        uint8_t buf[17] = {0};
        buf[16] = (uint8_t)kpc_platform_get()->identity(root, buf, desc, sizeof desc);
        _exit(kpc__write_all(fds[1], buf, sizeof buf) == 0 ? 0 : 1);
    }
    close(fds[1]);
    uint8_t buf[17];
    size_t got = 0;
    while (got < sizeof buf) {
        ssize_t r = read(fds[0], buf + got, sizeof buf - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fds[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (got != sizeof buf)
        return KPC_E_UNAVAILABLE;
    memcpy(id, buf, 16);
    return (kpc_status)buf[16];
}

/* ---- selection ------------------------------------------------------------------------ */
static int select_record(const kpc_store_entry *e, void *arg)
{
    job *j = arg;
    const kpc_record *r = e->rec;
    if (r->kind != KPC_RECORD_CODE)
        return 0;
    bool chosen = j->from ? strcmp(r->target, j->from) == 0
                          : memcmp(r->compiler_id, j->id, 16) != 0 &&
                                (j->target == NULL || strcmp(r->target, j->target) == 0);
    if (!chosen)
        return 0;
    if (r->request_size == 0) {
        j->no_request++;
        return 0;
    }
    if (j->n == j->cap) {
        size_t cap = j->cap ? j->cap * 2 : 256;
        /* shared with the workers forked later: they write the results in place */
        item *grown = j->items ? mremap(j->items, j->cap * sizeof(item), cap * sizeof(item), MREMAP_MAYMOVE)
                               : mmap(NULL, cap * sizeof(item), PROT_READ | PROT_WRITE,
                                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (grown == MAP_FAILED)
            return 1;
        j->items = grown, j->cap = cap;
    }
    item *it = &j->items[j->n++];
    memset(it, 0, sizeof *it);
    it->key = r->key;
    snprintf(it->target, sizeof it->target, "%s", r->target);
    snprintf(it->name, sizeof it->name, "%s", r->source_name);
    it->status = PENDING;
    return 0;
}

/* The environment signature of a request. */
static char *env_signature(const kpc_request *rq)
{
    size_t len = 1;
    for (size_t i = 0; i < rq->num_env; i++)
        len += strlen(rq->env_names[i]) + (rq->env_values[i] ? strlen(rq->env_values[i]) + 1 : 0) + 1;
    char *s = malloc(len), *p = s;
    if (s == NULL)
        return NULL;
    *p = '\0';
    for (size_t i = 0; i < rq->num_env; i++)
        p += sprintf(p, rq->env_values[i] ? "%s=%s\n" : "%s\n", rq->env_names[i],
                     rq->env_values[i] ? rq->env_values[i] : "");
    return s;
}

/* Read a record and decode its request. */
static kpc_status load_request(kpc_store *st, const item *it, kpc_request *rq)
{
    kpc_record rec;
    kpc_status s = kpc_store_read(st, &it->key, it->target, KPC_RECORD_CODE, &rec);
    if (s != KPC_OK)
        return s;
    s = rec.request_size ? kpc_request_decode((uint8_t *)rec.payload + rec.code_size + rec.names_size,
                                              rec.request_size, rq)
                         : KPC_E_NOT_FOUND;
    kpc_record_free(&rec);
    return s;
}

static int by_group(const void *x, const void *y)
{
    const item *a = x, *b = y;
    return (a->group > b->group) - (a->group < b->group);
}

/* Sort the items into environment groups. */
static void group_items(job *j)
{
    for (size_t i = 0; i < j->n; i++) {
        item *it = &j->items[i];
        kpc_request rq;
        kpc_status s = load_request(j->store, it, &rq);
        if (s != KPC_OK) { /* gone (pruned) or damaged since the walk: reported */
            it->status = s;
            snprintf(it->log, sizeof it->log, "its record could not be read or its request decoded\n");
            it->group = SIZE_MAX;
            continue;
        }
        char *sig = env_signature(&rq);
        kpc_request_free(&rq);
        size_t g = 0;
        while (sig && g < j->ngroups && strcmp(j->groups[g], sig) != 0)
            g++;
        if (sig && g == j->ngroups) {
            char **grown = realloc(j->groups, (g + 1) * sizeof *grown);
            if (grown) {
                j->groups = grown;
                j->groups[j->ngroups++] = sig;
                sig = NULL;
            }
        }
        free(sig);
        it->group = g; /* g == ngroups only when out of memory: the empty environment */
    }
    if (j->n > 1)
        qsort(j->items, j->n, sizeof *j->items, by_group);
}

/* ---- workers ------------------------------------------------------------------------ */
static void apply_env(const char *sig)
{
    char *copy = kpc__strdup(sig ? sig : ""), *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(line, '=');
        if (eq) {
            *eq = '\0';
            setenv(line, eq + 1, 1);
        } else
            unsetenv(line);
    }
    free(copy);
}

typedef struct ctx_slot {
    char target[64];
    kpc_context *ctx;
    kpc_status status;
} ctx_slot;

static void replay_one(job *j, kpc_cache *cache, ctx_slot *ctxs, size_t *nctx, item *it)
{
    const char *target = j->target ? j->target : it->target;
    size_t c = 0;
    while (c < *nctx && strcmp(ctxs[c].target, target) != 0)
        c++;
    if (c == *nctx && c < 16) {
        snprintf(ctxs[c].target, sizeof ctxs[c].target, "%s", target);
        ctxs[c].status = kpc_context_create_for_target(cache, target, &ctxs[c].ctx);
        (*nctx)++;
    }
    if (c == 16 || ctxs[c].status != KPC_OK) {
        snprintf(it->log, sizeof it->log, "no context for target %s\n", target);
        it->status = c == 16 ? KPC_E_NOMEM : ctxs[c].status;
        return;
    }
    kpc_request rq;
    kpc_status s = cache->store ? load_request(cache->store, it, &rq) : KPC_E_IO;
    if (s != KPC_OK) {
        snprintf(it->log, sizeof it->log, "its record could not be read or its request decoded\n");
        it->status = s;
        return;
    }
    /* relative include paths (and include manifests) resolve from where the request was
     * made; the cache was opened by its real path, so this process may move */
    if (rq.cwd && chdir(rq.cwd) != 0)
        KPC_LOG(KPC_LOG_DEBUG, "replay: chdir(%s): %s: relative paths resolve from %s", rq.cwd,
                strerror(errno), "the replay's own directory");
    kpc_stats before, after;
    kpc_stats_get(cache, &before);
    kpc_program *p = NULL;
    s = kpc_program_get(ctxs[c].ctx, &rq.src, &p);
    kpc_stats_get(cache, &after);
    it->built = after.builds + after.build_failures > before.builds + before.build_failures;
    if (s != KPC_OK)
        snprintf(it->log, sizeof it->log, "%s", kpc_last_log());
    kpc_program_release(p);
    kpc_request_free(&rq);
    it->status = s; /* last: a worker killed before this leaves it PENDING */
}

static void worker(job *j, size_t first, size_t end)
{
    apply_env(j->groups && j->items[first].group < j->ngroups ? j->groups[j->items[first].group] : NULL);
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = j->cache_dir};
    kpc_cache *cache = NULL;
    kpc_status s = kpc_cache_open(&cfg, &cache);
    ctx_slot ctxs[16];
    size_t nctx = 0;
    for (;;) {
        size_t i = first + atomic_fetch_add(&j->sh->cursor, 1);
        if (i >= end)
            break;
        if (s == KPC_OK)
            replay_one(j, cache, ctxs, &nctx, &j->items[i]);
        else
            j->items[i].status = s;
        atomic_fetch_add(&j->sh->done, 1);
    }
    for (size_t c = 0; c < nctx; c++)
        kpc_context_destroy(ctxs[c].ctx);
    kpc_cache_close(cache);
}

static void progress(const job *j, size_t done, uint64_t t0, bool final)
{
    double secs = (double)(kpc__now_ns() - t0) / 1e9, rate = secs > 0 ? (double)done / secs : 0;
    char eta[32] = "-";
    if (rate > 0 && done < j->n)
        snprintf(eta, sizeof eta, "%.0f s", (double)(j->n - done) / rate);
    fprintf(stderr, "\rreplay: %zu/%zu done, %.1f/s, ETA %s   %s", done, j->n, rate, eta, final ? "\n" : "");
    fflush(stderr);
}

/* One group's run on the pool: every worker takes the next item from the shared cursor
 * (compiles differ in length), so the pool's striping is not used. */
typedef struct group_run {
    job *j;
    size_t first, end, base_done;
    uint64_t t0;
    bool tty;
} group_run;

static void group_work(void *arg, int w, int step)
{
    (void)w, (void)step;
    group_run *g = arg;
    worker(g->j, g->first, g->end);
}

static void group_tick(void *arg)
{
    group_run *g = arg;
    if (g->tty)
        progress(g->j, g->base_done + atomic_load(&g->j->sh->done), g->t0, false);
}

/* A dead worker's items stay PENDING: the report lists them as not replayed. */
static void group_lost(void *arg, int item, const char *why)
{
    (void)arg, (void)item, (void)why;
}

/* Run the items of each group on the pool (forked workers with the group's environment
 * set before anything loads the compiler); the parent draws the progress line. */
static void run(job *j, long jobs)
{
    static const kpc_pool_ops ops = {group_work, group_tick, group_lost, .always_fork = true};
    group_run g = {.j = j, .t0 = kpc__now_ns(), .tty = isatty(STDERR_FILENO)};
    for (size_t first = 0; first < j->n;) {
        size_t end = first;
        while (end < j->n && j->items[end].group == j->items[first].group)
            end++;
        if (j->items[first].group != SIZE_MAX) { /* SIZE_MAX: could not be read, reported */
            atomic_store(&j->sh->cursor, 0);
            atomic_store(&j->sh->done, 0);
            g.first = first, g.end = end;
            kpc_pool_run((int)(end - first), (int)jobs, &ops, &g);
        }
        g.base_done += end - first;
        first = end;
    }
    if (g.tty)
        progress(j, g.base_done, g.t0, true);
}

/* One request that did not succeed: into the JSON array, or a line of text. */
static void report_failure(const job *j, const item *it, cJSON *arr)
{
    char hex[KPC_KEY_HEX];
    kpc_key_hex(&it->key, hex);
    const char *status = it->status == PENDING ? "not replayed" : kpc_status_str(it->status);
    const char *to = j->target ? j->target : it->target;
    if (arr) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "key", hex);
        cJSON_AddStringToObject(f, "target", it->target);
        cJSON_AddStringToObject(f, "built_for", to);
        cJSON_AddStringToObject(f, "name", it->name);
        cJSON_AddStringToObject(f, "status", status);
        cJSON_AddStringToObject(f, "log", it->status == PENDING ? "its worker died\n" : it->log);
        cJSON_AddItemToArray(arr, f);
        return;
    }
    const char *nl = strchr(it->log, '\n');
    int first_line = nl ? (int)(nl - it->log) : (int)strlen(it->log);
    printf("  %s %s %s (%s -> %s): %s%s%.*s\n", it->status == PENDING ? "not replayed" : "failed", hex,
           it->name[0] ? it->name : "(unnamed)", it->target, to, status,
           it->status == PENDING ? ": its worker died" : first_line ? ": " : "",
           it->status == PENDING ? 0 : first_line, it->log);
}

static int report(const job *j, bool json, double secs)
{
    size_t built = 0, hit = 0, failed = 0, missed = 0;
    for (size_t i = 0; i < j->n; i++) {
        const item *it = &j->items[i];
        if (it->status == KPC_OK)
            it->built ? built++ : hit++;
        else if (it->status == PENDING)
            missed++;
        else
            failed++;
    }
    cJSON *o = NULL, *arr = NULL;
    if (json) {
        o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "requests", (double)j->n);
        cJSON_AddNumberToObject(o, "built", (double)built);
        cJSON_AddNumberToObject(o, "cached", (double)hit);
        cJSON_AddNumberToObject(o, "failed", (double)failed);
        cJSON_AddNumberToObject(o, "not_replayed", (double)missed);
        cJSON_AddNumberToObject(o, "without_request", (double)j->no_request);
        cJSON_AddNumberToObject(o, "seconds", secs);
        arr = cJSON_AddArrayToObject(o, "failures");
    } else {
        printf("replay: %zu requests in %.1f s: %zu built, %zu already cached, %zu failed, %zu not replayed",
               j->n, secs, built, hit, failed, missed);
        if (j->no_request)
            printf("; %zu records keep no request (not replayable)", j->no_request);
        printf("\n");
    }
    for (size_t i = 0; i < j->n; i++)
        if (j->items[i].status != KPC_OK)
            report_failure(j, &j->items[i], arr);
    if (o)
        kpc_tool_print_json(o);
    return missed ? KPC_TOOL_FAIL : KPC_TOOL_OK;
}

int kpc_tool_replay(const kpc_tool_replay_args *a)
{
    job j = {.cache_dir = a->cache_dir, .target = a->target, .from = a->from};
    bool json = a->json;
    long jobs = a->jobs > 0 ? a->jobs : sysconf(_SC_NPROCESSORS_ONLN);
    if (jobs > MAX_JOBS)
        jobs = MAX_JOBS;
    if (j.from && j.target == NULL)
        return usage("--from-target S needs --target T (the target to build for)");
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = j.cache_dir};
    kpc_settings set;
    if (kpc_config_resolve(&cfg, &set) != KPC_OK)
        return KPC_TOOL_USAGE;
    if (kpc_store_open(set.cache_dir, set.disk_max_bytes, &j.store) != KPC_OK) {
        fprintf(stderr, "kpc replay: cannot use cache directory %s\n", set.cache_dir);
        return KPC_TOOL_FAIL;
    }
    char root_path[4096]; /* the real path: workers chdir, and the store closes before they run */
    snprintf(root_path, sizeof root_path, "%s", kpc_root_path(kpc_store_root(j.store)));
    j.cache_dir = root_path;
    kpc_status s = j.from ? KPC_OK : identity_in_child(kpc_store_root(j.store), j.id);
    if (s != KPC_OK) {
        fprintf(stderr, "kpc replay: the installed compiler's identity is needed: %s\n", kpc_status_str(s));
        kpc_store_close(j.store);
        return KPC_TOOL_FAIL;
    }
    uint64_t t0 = kpc__now_ns();
    j.sh = mmap(NULL, sizeof *j.sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (j.sh == MAP_FAILED || kpc_store_walk(j.store, false, select_record, &j) != KPC_OK) {
        fprintf(stderr, "kpc replay: cannot walk the cache %s\n", set.cache_dir);
        kpc_store_close(j.store);
        return KPC_TOOL_FAIL;
    }
    group_items(&j);
    kpc_store_close(j.store);
    j.store = NULL;
    run(&j, jobs);
    int rc = report(&j, json, (double)(kpc__now_ns() - t0) / 1e9);
    for (size_t g = 0; g < j.ngroups; g++)
        free(j.groups[g]);
    free(j.groups);
    if (j.items)
        munmap(j.items, j.cap * sizeof(item));
    munmap(j.sh, sizeof *j.sh);
    return rc;
}
