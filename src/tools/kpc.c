/*
 * kpc - the cache tool: compile, stats, ls, verify, prune, clear, replay, pack.
 *
 * This file owns the command table, parsing, help, usage, version, main(), `stats`, and
 * the small helpers the subcommands share (tools/tool.h); the subcommands live in
 * compile.c (compile), tree.c (ls, verify, prune, clear), replay.c and pack.c.
 *
 * Table-driven: each subcommand is one row of `commands` {name, run, its options, its
 * help}; main() finds the row, parse() reads the row's options plus the common ones
 * (--cache-dir, --json, -h/--help) into a `kpc_tool`, and the row's function runs. Adding
 * a subcommand is one function and one row.
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
#include "base/settings.h"
#include "core/config.h"
#include "shm/index.h"
#include "storage/remote.h"
#include "storage/store.h"
#include "tools/tool.h"

#include <bsd/libutil.h>
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef KPC_TOOL_VERSION
#define KPC_TOOL_VERSION "unknown"
#endif

typedef struct command {
    const char *name;
    int (*run)(kpc_tool *t);
    /* the command's own options (NULL-terminated; NULL: none) and their getopt letters */
    const struct option *options;
    const char *shortopts;
    int (*option)(kpc_tool *t, int c, const char *arg); /* one of the command's own options */
    bool operands;                                       /* takes FILE... (else none) */
    const char *synopsis;                                /* after "kpc NAME " */
    const char *summary;                                 /* one line for `kpc --help` */
    const char *help;                                    /* the options, for `kpc NAME --help` */
} command;

static const struct option common_options[] = {
    {"cache-dir", required_argument, NULL, KPC_TOOL_OPT_CACHE_DIR},
    {"json", no_argument, NULL, KPC_TOOL_OPT_JSON},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0}};

static const char *const common_help =
    "  --cache-dir DIR    the cache directory (else KPC_CACHE_DIR, else $XDG_CACHE_HOME/kpc,\n"
    "                     else ~/.cache/kpc)\n"
    "  --json             print the data as JSON\n"
    "  -h, --help         this text\n"
    "Exit status: 0 success, 1 failure, 2 bad usage. See kpc(1).\n";

/* The one line of a usage error and the hint; returns KPC_TOOL_USAGE. */
int kpc_tool_usage_error(const kpc_tool *t, const char *fmt, ...)
{
    const char *name = t && t->cmd ? t->cmd->name : NULL;
    fprintf(stderr, "kpc%s%s: ", name ? " " : "", name ? name : "");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nsee 'kpc%s%s --help'\n", name ? " " : "", name ? name : "");
    return KPC_TOOL_USAGE;
}

int kpc_tool_number(const kpc_tool *t, const char *option, const char *arg, enum kpc_setting_type type,
                    uint64_t min, uint64_t max, uint64_t *out)
{
    if (kpc__parse_number(type, arg, min, max, out) == KPC_OK)
        return KPC_TOOL_OK;
    char form[160];
    kpc__number_form(type, min, max, form, sizeof form);
    return kpc_tool_usage_error(t, "%s takes %s, not \"%s\"", option, form, arg ? arg : "");
}

/* "955B", "4.4K", "2.0G": humanize_number scales only as far as the width needs, so the
 * width (4 characters) is what asks for the short form; HN_B marks unscaled bytes. */
void kpc_tool_human(char *buf, size_t len, uint64_t bytes)
{
    humanize_number(buf, len < 5 ? len : 5, (int64_t)bytes, "", HN_AUTOSCALE, HN_B | HN_DECIMAL | HN_NOSPACE);
}

const char *kpc_tool_plural(uint64_t n, const char *one, const char *many)
{
    return n == 1 ? one : many;
}

int kpc_tool_print_json(cJSON *j)
{
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    if (s == NULL)
        return KPC_TOOL_FAIL;
    puts(s);
    free(s);
    return KPC_TOOL_OK;
}

/* ---- the common set-up: settings, the cache dir, the store ---------------------------- */

/* Resolve the settings into t->set and the cache dir's realpath into t->root ("" when it
 * does not exist). A malformed environment is bad usage (the library named it). */
int kpc_tool_open(kpc_tool *t)
{
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = t->cache_dir};
    if (kpc_config_resolve(&cfg, &t->set) != KPC_OK)
        return KPC_TOOL_USAGE;
    if (t->set.cache_dir[0] == '\0') {
        fprintf(stderr, "kpc %s: no cache directory: set KPC_CACHE_DIR or HOME, or give --cache-dir\n",
                t->cmd->name);
        return KPC_TOOL_FAIL;
    }
    if (!kpc_root_realpath(t->set.cache_dir, t->root, sizeof t->root))
        t->root[0] = '\0';
    return KPC_TOOL_OK;
}

/* The store of an existing cache dir; a directory the library refuses (another owner,
 * not a directory) is a failure, not an empty cache. */
int kpc_tool_store(const kpc_tool *t, kpc_store **st)
{
    if (kpc_store_open(t->set.cache_dir, t->set.disk_max_bytes, st) != KPC_OK) {
        fprintf(stderr, "kpc %s: cannot use the cache directory %s: the line above says why\n", t->cmd->name,
                t->set.cache_dir);
        return KPC_TOOL_FAIL;
    }
    return KPC_TOOL_OK;
}

/* The one wording of an absent cache dir, for the commands that change or check it. */
int kpc_tool_say_absent(const kpc_tool *t)
{
    printf("no cache directory %s: nothing to %s\n", t->set.cache_dir, t->cmd->name);
    return KPC_TOOL_OK;
}

/* ---- stats -------------------------------------------------------------------------- */
/* The cluster tier's state ("not built", "off", "ok", "unreachable", "invalid"), its
 * redacted URL, whether its records are authenticated, and the cluster-wide counters. */
static const char *remote_state(char *url, size_t cap, char *trust, size_t tcap, kpc_remote_counters *rc)
{
    const char *remote = kpc__setting_text(KPC_SET_REMOTE);
    memset(rc, 0, sizeof *rc);
    url[0] = trust[0] = '\0';
    if (!kpc_remote_built())
        return "not built (no hiredis)";
    if (remote == NULL)
        return "off";
    kpc_remote *r = NULL;
    if (kpc_remote_open(remote, &r) != KPC_OK)
        return "invalid";
    snprintf(url, cap, "%s", kpc_remote_describe(r));
    snprintf(trust, tcap, "%s", kpc_remote_trust(r));
    const char *state = kpc_remote_cluster_counters(r, rc) == KPC_OK ? "ok" : "unreachable";
    kpc_remote_close(r);
    return state;
}

static int cmd_stats(kpc_tool *t)
{
    int rc = kpc_tool_prometheus_checked(t);
    if (rc == KPC_TOOL_OK)
        rc = kpc_tool_open(t);
    if (rc != KPC_TOOL_OK)
        return rc;
    kpc_index_counters ic = {0};
    char name[KPC_INDEX_NAME_MAX] = "";
    const char *index_state = "absent";
    uint64_t bytes = 0, files = 0;
    if (t->root[0]) {
        /* a cache dir the library refuses (another owner, writable by others) is an
         * unusable cache: exit 1 with the reason, before the index is looked at */
        kpc_store *st = NULL;
        if ((rc = kpc_tool_store(t, &st)) != KPC_TOOL_OK)
            return rc;
        kpc_store_usage(st, &bytes, &files);
        kpc_store_close(st);
        kpc_index *ix = NULL;
        kpc_index_segment_name(t->root, name, sizeof name);
        kpc_status s = kpc_index_open_existing(t->root, &ix);
        if (s == KPC_OK) {
            kpc_index_counters_get(ix, &ic);
            /* a lock past its deadline or a truncated segment: logged, counters 0 */
            index_state = kpc_index_usable(ix) ? "ok" : "unusable";
            kpc_index_close(ix);
        } else if (s != KPC_E_NOT_FOUND)
            index_state = "damaged";
    }
    const char *dir = t->root[0] ? t->root : t->set.cache_dir;
    char rurl[1600], rtrust[160];
    kpc_remote_counters rcn;
    const char *rstate = remote_state(rurl, sizeof rurl, rtrust, sizeof rtrust, &rcn);
    if (t->prometheus) {
        /* this host's figures; the cluster-wide ones are `kpc remote stats --prometheus`'s,
         * which one host's collector reports for all */
        const char *labels[] = {"cache_dir", dir, NULL};
        const kpc_tool_metric m[] = {
            {"kpc_index_up", false, "1 when the host index is there and usable, else 0.",
             strcmp(index_state, "ok") == 0},
            {"kpc_index_lookups_total", true, "Lookups in the host index since it was made.", ic.lookups},
            {"kpc_index_hits_total", true, "Lookups the host index answered with a record.", ic.hits},
            {"kpc_index_builds_total", true, "Compiles the host index coordinated.", ic.builds},
            {"kpc_index_build_failures_total", true, "Compiles that failed (their logs are kept).",
             ic.build_failures},
            {"kpc_index_waits_total", true, "Waits for another process's compile.", ic.waits},
            {"kpc_index_takeovers_total", true, "Compiles taken over from a dead process.", ic.takeovers},
            {"kpc_index_evictions_total", true, "Entries evicted from the full host index.", ic.evictions},
            {"kpc_index_wait_timeouts_total", true, "Waits cut at KPC_BUILD_WAIT_MAX_MS.", ic.wait_timeouts},
            {"kpc_index_entries", false, "Entries in the host index.", ic.entries},
            {"kpc_index_capacity", false, "Entries the host index can hold.", ic.capacity},
            {"kpc_index_attached", false, "Processes attached to the host index.", ic.attached},
            {"kpc_disk_bytes", false, "Bytes of the cache's records on disk.", bytes},
            {"kpc_disk_files", false, "Record files on disk.", files},
            {"kpc_disk_limit_bytes", false, "The disk limit (KPC_CACHE_MAX_SIZE).", t->set.disk_max_bytes},
            {"kpc_remote_up", false, "1 when the cluster tier (KPC_REMOTE) answers, else 0.",
             strcmp(rstate, "ok") == 0}};
        return kpc_tool_prometheus(labels, m, sizeof m / sizeof m[0]);
    }
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
            {"remote_errors", rcn.errors}, {"remote_refused", rcn.refused},
            {"remote_wait_timeouts", rcn.wait_timeouts}, {"remote_unserved", rcn.unserved}};
        for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
            cJSON_AddNumberToObject(o, f[i].k, (double)f[i].v);
        cJSON_AddStringToObject(o, "remote", rstate);
        cJSON_AddStringToObject(o, "remote_url", rurl);
        cJSON_AddStringToObject(o, "remote_trust", rtrust);
        return kpc_tool_print_json(o);
    }
    char hb[16], hm[16];
    kpc_tool_human(hb, sizeof hb, bytes);
    kpc_tool_human(hm, sizeof hm, t->set.disk_max_bytes);
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
           (unsigned long long)ic.attached, hb, (unsigned long long)files, kpc_tool_plural(files, "file", "files"), hm,
           (unsigned long long)ic.wait_timeouts);
    printf("remote         %s%s%s\n", rstate, rurl[0] ? " " : "", rurl);
    if (rtrust[0])
        printf("remote records %s\n", rtrust);
    if (strcmp(rstate, "ok") == 0)
        printf("remote (cluster-wide)\n  hits         %llu\n  misses       %llu\n  builds       %llu\n"
               "  waits        %llu\n  takeovers    %llu\n  errors       %llu\n  refused      %llu\n"
               "  wait timeouts %llu\n  unserved     %llu\n",
               (unsigned long long)rcn.hits, (unsigned long long)rcn.misses, (unsigned long long)rcn.builds,
               (unsigned long long)rcn.waits, (unsigned long long)rcn.takeovers,
               (unsigned long long)rcn.errors, (unsigned long long)rcn.refused,
               (unsigned long long)rcn.wait_timeouts, (unsigned long long)rcn.unserved);
    return KPC_TOOL_OK;
}

/* ---- replay, pack (src/tools/replay.c, src/tools/pack.c) ------------------------------ */
static int replay_option(kpc_tool *t, int c, const char *arg)
{
    if (c == KPC_TOOL_OPT_FROM_TARGET) {
        t->from_target = arg;
        return KPC_TOOL_OK;
    }
    return kpc_tool_compile_option(t, c, arg); /* --target, -j */
}

static int cmd_replay(kpc_tool *t)
{
    kpc_tool_replay_args a = {.cache_dir = t->cache_dir, .target = t->target, .from = t->from_target,
                              .jobs = t->jobs, .json = t->json};
    return kpc_tool_replay(&a);
}

static int pack_option(kpc_tool *t, int c, const char *arg)
{
    (void)c;
    if (t->num_targets == sizeof t->targets / sizeof t->targets[0])
        return kpc_tool_usage_error(t, "at most 64 --target options, not \"%s\"", arg);
    t->targets[t->num_targets++] = arg;
    return KPC_TOOL_OK;
}

static int cmd_pack(kpc_tool *t)
{
    if (t->num_operands != 2)
        return kpc_tool_usage_error(t, "pack takes a verb (create, verify, ls) and one FILE");
    return kpc_tool_pack(t->operands[0], t->operands[1], t->targets, t->num_targets, t->cache_dir, t->json);
}

/* ---- the table ---------------------------------------------------------------------- */
static const struct option compile_options[] = {
    {"target", required_argument, NULL, 't'},    {"option", required_argument, NULL, KPC_TOOL_OPT_OPTION},
    {"name-expr", required_argument, NULL, KPC_TOOL_OPT_NAME_EXPR}, {"output", required_argument, NULL, 'o'},
    {"jobs", required_argument, NULL, 'j'},      {NULL, 0, NULL, 0}};
static const struct option replay_options[] = {
    {"target", required_argument, NULL, 't'}, {"from-target", required_argument, NULL, KPC_TOOL_OPT_FROM_TARGET},
    {"jobs", required_argument, NULL, 'j'},   {NULL, 0, NULL, 0}};
static const struct option pack_options[] = {{"target", required_argument, NULL, 't'}, {NULL, 0, NULL, 0}};
static const struct option prune_options[] = {
    {"max-size", required_argument, NULL, KPC_TOOL_OPT_MAX_SIZE}, {"stale", no_argument, NULL, KPC_TOOL_OPT_STALE},
    {NULL, 0, NULL, 0}};

static const struct option remote_options[] = {
    {"max-idle", required_argument, NULL, KPC_TOOL_OPT_MAX_IDLE},
    {"prometheus", no_argument, NULL, KPC_TOOL_OPT_PROMETHEUS}, {NULL, 0, NULL, 0}};
static const struct option stats_options[] = {
    {"prometheus", no_argument, NULL, KPC_TOOL_OPT_PROMETHEUS}, {NULL, 0, NULL, 0}};

static const command commands[] = {
    {"compile", kpc_tool_compile, compile_options, "t:o:j:", kpc_tool_compile_option, true,
     "[--target T] [--option OPT]... [--name-expr E]... [-o OUT] [-j N] FILE...",
     "get each file's code object through the cache; print hit or built",
     "Get each FILE's code object through the cache (built once per host, then hit), as an\n"
     "application would, and print per file: built or hit, the time, the size of the code\n"
     "object itself (`kpc ls` shows the file, which adds a header) and the file name.\n"
     "  -t, --target T     compile for target T (e.g. " KPC_TOOL_EXAMPLE_TARGET "): no GPU needed;\n"
     "                     default: the target of GPU 0\n"
     "  --option OPT       a compiler option (repeatable)\n"
     "  --name-expr E      a name expression to lower, e.g. 'scale<float>' (repeatable)\n"
     "  -o, --output OUT   write the code object to OUT (with several files: OUT/NAME.co)\n"
     "  -j, --jobs N       compile in N processes (default: one per core); on a terminal a\n"
     "                     progress line shows done/total, hits, builds, failures and ETA\n"},
    {"stats", cmd_stats, stats_options, "", kpc_tool_prometheus_option, false, "[--prometheus]",
     "host-wide counters from the shm index, and disk usage",
     "Print the host index's counters (lookups, hits, builds, ...) and the disk usage.\n"
     "  --prometheus       in the Prometheus text format (node_exporter's textfile collector)\n"},
    {"ls", kpc_tool_ls, NULL, "", NULL, false, "", "one row per cached code object (file sizes)",
     "List every cached record, newest first: key, kind (co or log), target, the file's size\n"
     "(a record header plus the code object), last use, source name.\n"},
    {"verify", kpc_tool_verify, NULL, "", NULL, false, "", "check every cached file; remove and report the bad ones",
     "Check every cached file (header, checksum, size); remove the damaged ones and name them.\n"
     "Exits 1 when it found damage.\n"},
    {"prune", kpc_tool_prune, prune_options, "", kpc_tool_prune_option, false, "[--max-size SIZE] [--stale]",
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
    {"remote", kpc_tool_remote, remote_options, "", kpc_tool_remote_option, true,
     "keygen | stats [--prometheus] | ls | prune --max-idle SECONDS | clear",
     "the cluster tier's Redis: secret, counters, records",
     "keygen: print a new secret (one line): kpc remote keygen > ~/.kpc-secret, then\n"
     "        KPC_REMOTE_SECRET_FILE=~/.kpc-secret on every host (chmod 600 it).\n"
     "The others talk to the Redis of KPC_REMOTE, to this group's keys only (its namespace\n"
     "and secret): stats: the server's memory, policy and clients, the records and the\n"
     "cluster-wide counters; ls: one row per record (size, time to live, idle time); prune:\n"
     "remove the records not read for SECONDS; clear: remove every key of the group.\n"
     "  --max-idle SECONDS   prune: the idle time past which a record goes\n"
     "  --prometheus         stats: in the Prometheus text format\n"},
    {"clear", kpc_tool_clear, NULL, "", NULL, false, "", "remove every cached code object",
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
    /* examples this build accepts: its own kind of target */
    char compile[64];
    snprintf(compile, sizeof compile, "kpc compile --target %s saxpy.hip", KPC_TOOL_EXAMPLE_TARGET);
    fprintf(f, "\nExamples:\n  %-38s %s\n  %-38s %s\n  %-38s %s\n", compile,
            "built once per host, then a hit; no GPU", "kpc stats", "this host's counters, the disk usage",
            "kpc prune --max-size 1G", "least recently used out, down to 1G");
}

static void print_command_help(const command *c)
{
    printf("usage: kpc %s [--cache-dir DIR] [--json]%s%s\n%s%s", c->name, c->synopsis[0] ? " " : "", c->synopsis,
           c->help, common_help);
}

/* Read the command's options and the common ones into *t; operands follow them. Returns
 * -1 to go on, else the exit status (help printed, or a usage error). */
static int parse(kpc_tool *t, int argc, char **argv)
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
        case KPC_TOOL_OPT_CACHE_DIR: t->cache_dir = optarg; break;
        case KPC_TOOL_OPT_JSON: t->json = true; break;
        case 'h': print_command_help(c); return KPC_TOOL_OK;
        case ':':
            return kpc_tool_usage_error(t, "option '%s' needs a value", argv[optind - 1]);
        case '?':
            if (optopt && optopt < KPC_TOOL_OPT_CACHE_DIR)
                return kpc_tool_usage_error(t, "unknown option '-%c'", optopt);
            return kpc_tool_usage_error(t, "unknown option '%s'", argv[optind - 1]);
        default:
            if (c->option(t, ch, optarg) != KPC_TOOL_OK)
                return KPC_TOOL_USAGE;
        }
    }
    t->operands = argv + optind;
    t->num_operands = argc - optind;
    if (c->operands && t->num_operands == 0)
        return kpc_tool_usage_error(t, "%s needs at least one FILE", c->name);
    if (!c->operands && t->num_operands > 0)
        return kpc_tool_usage_error(t, "%s takes no operands, not \"%s\"", c->name, t->operands[0]);
    return -1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: kpc COMMAND [OPTIONS] [FILE...]\n");
        return kpc_tool_usage_error(NULL, "missing COMMAND");
    }
    const char *name = argv[1];
    if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0 ||
        (strcmp(name, "help") == 0 && argc == 2)) {
        print_main_help(stdout);
        return KPC_TOOL_OK;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0) {
        printf("kpc %s\n", KPC_TOOL_VERSION);
        return KPC_TOOL_OK;
    }
    /* comgr's own cache (ROCm 6.4's comgr 3, on by default) caches only the link step of a
     * hipRTC compile, yet keeps a second copy of every object kpc stores, under a size
     * policy of its own: off for this tool's compiles (and its workers'), unless the user
     * set it (docs/benchmarks.md, figure 10) */
    setenv("AMD_COMGR_CACHE", "0", 0);
    kpc_tool t = {0};
    if (strcmp(name, "help") == 0) {
        if (argc > 3)
            return kpc_tool_usage_error(NULL, "help takes one COMMAND");
        if ((t.cmd = find_command(argv[2])) == NULL)
            return kpc_tool_usage_error(NULL, "unknown command \"%s\"", argv[2]);
        print_command_help(t.cmd);
        return KPC_TOOL_OK;
    }
    if ((t.cmd = find_command(name)) == NULL) {
        if (name[0] == '-')
            return kpc_tool_usage_error(NULL, "options follow the command (kpc COMMAND %s ...)", name);
        return kpc_tool_usage_error(NULL, "unknown command \"%s\"", name);
    }
    /* room for every argument as an --option or --name-expr */
    t.options = calloc((size_t)argc, sizeof *t.options);
    t.exprs = calloc((size_t)argc, sizeof *t.exprs);
    if (t.options == NULL || t.exprs == NULL)
        return KPC_TOOL_FAIL;
    /* getopt_long sees the subcommand as argv[0] */
    int rc = parse(&t, argc - 1, argv + 1);
    /* every KPC_ variable, whether this command reads it or not: a typo is heard at once
     * (the library logs each one with its accepted form) */
    if (rc < 0 && kpc_config_check_environment(NULL) != KPC_OK)
        rc = KPC_TOOL_USAGE;
    if (rc < 0)
        rc = t.cmd->run(&t);
    free(t.options);
    free(t.exprs);
    return rc;
}
