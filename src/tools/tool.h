/*
 * tool.h - the subcommands of the kpc tool that live in their own files (compile.c,
 * tree.c, replay.c, pack.c) and what they share with src/tools/kpc.c. Each returns the
 * tool's exit status: 0 success, 1 failure, 2 bad usage. src/tools/kpc.c parses their
 * options (its command table) into a kpc_tool; replay.c and pack.c take plain arguments
 * instead.
 */
#ifndef KPC_TOOL_H
#define KPC_TOOL_H

#include "base/settings.h"
#include "core/config.h"
#include "storage/store.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { KPC_TOOL_OK = 0, KPC_TOOL_FAIL = 1, KPC_TOOL_USAGE = 2 };

/* A target this build compiles for, for help texts and hints: an AMD build refuses sm_90
 * and an NVIDIA build gfx90a. */
#ifdef KPC_PLATFORM_NVIDIA
#define KPC_TOOL_EXAMPLE_TARGET "sm_90"
#else
#define KPC_TOOL_EXAMPLE_TARGET "gfx90a"
#endif

/* getopt_long's values of the long options without a letter (kpc.c's table). */
enum {
    KPC_TOOL_OPT_CACHE_DIR = 1000, KPC_TOOL_OPT_JSON, KPC_TOOL_OPT_MAX_SIZE, KPC_TOOL_OPT_STALE,
    KPC_TOOL_OPT_OPTION, KPC_TOOL_OPT_NAME_EXPR, KPC_TOOL_OPT_VERSION, KPC_TOOL_OPT_FROM_TARGET,
    KPC_TOOL_OPT_MAX_IDLE, KPC_TOOL_OPT_PROMETHEUS
};

struct command;

/* One run of the tool: the chosen command, its options, and (after kpc_tool_open) the cache. */
typedef struct kpc_tool {
    const struct command *cmd; /* kpc.c's table row */
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
    /* remote prune */
    const char *max_idle;
    /* stats, remote stats: the Prometheus text format instead of the table */
    bool prometheus;
    /* replay (target and jobs above), pack create */
    const char *from_target;
    const char *targets[64];
    size_t num_targets;
    /* operands */
    char **operands;
    int num_operands;
    /* kpc_tool_open: the settings, the realpath of the cache dir ("" when it does not exist) */
    kpc_settings set;
    char root[4096];
} kpc_tool;

/* Shared output (src/tools/kpc.c): a size as "4.2KB"; print a JSON value on stdout and
 * free it (KPC_TOOL_OK, or KPC_TOOL_FAIL when it cannot be printed); `one` or `many` by n;
 * a usage error's one line and hint (returns KPC_TOOL_USAGE). */
void kpc_tool_human(char *buf, size_t len, uint64_t bytes);
int kpc_tool_print_json(cJSON *j);
const char *kpc_tool_plural(uint64_t n, const char *one, const char *many);
int kpc_tool_usage_error(const kpc_tool *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The one reader of a numeric argument of every subcommand (-j, --max-size, --max-idle):
 * the settings' own rule (kpc__parse_number: no sign, no space, nothing empty, past the
 * range or past 2^64 - 1) for a number of the given type from min to max. KPC_TOOL_OK
 * and *out; else a usage error naming the option and the form it takes (KPC_TOOL_USAGE). */
int kpc_tool_number(const kpc_tool *t, const char *option, const char *arg, enum kpc_setting_type type,
                    uint64_t min, uint64_t max, uint64_t *out);

/* One sample of `--prometheus` (src/tools/metrics.c): its name (kpc_..._total for a
 * counter), its kind, its HELP text. kpc_tool_prometheus prints the n metrics in the
 * Prometheus text format, each sample labelled with LABELS (name, value pairs, then NULL)
 * and host (this host's name); KPC_TOOL_FAIL when stdout cannot take them. */
typedef struct kpc_tool_metric {
    const char *name;
    bool counter;
    const char *help;
    uint64_t value;
} kpc_tool_metric;
int kpc_tool_prometheus(const char *const *labels, const kpc_tool_metric *m, size_t n);
/* --prometheus, for the commands that take it (stats, remote); a usage error beside
 * --json (kpc_tool_prometheus_checked, once the options are read) */
int kpc_tool_prometheus_option(kpc_tool *t, int c, const char *arg);
int kpc_tool_prometheus_checked(const kpc_tool *t);

/* The common set-up (src/tools/kpc.c): resolve the settings and the cache dir's realpath;
 * open the store of an existing cache dir; say that the cache dir is absent. */
int kpc_tool_open(kpc_tool *t);
int kpc_tool_store(const kpc_tool *t, kpc_store **st);
int kpc_tool_say_absent(const kpc_tool *t);

/* `kpc compile` (src/tools/compile.c); its option handler (also replay's --target, -j). */
int kpc_tool_compile(kpc_tool *t);
int kpc_tool_compile_option(kpc_tool *t, int c, const char *arg);

/* The disk-tree commands (src/tools/tree.c): ls, verify, prune (and its options), clear. */
int kpc_tool_ls(kpc_tool *t);
int kpc_tool_verify(kpc_tool *t);
int kpc_tool_prune(kpc_tool *t);
int kpc_tool_prune_option(kpc_tool *t, int c, const char *arg);
int kpc_tool_clear(kpc_tool *t);

/* `kpc remote keygen|stats|ls|prune|clear` (src/tools/remote.c) and its option. */
int kpc_tool_remote(kpc_tool *t);
int kpc_tool_remote_option(kpc_tool *t, int c, const char *arg);

typedef struct kpc_tool_replay_args {
    const char *cache_dir; /* NULL: the environment's */
    const char *target;    /* --target, or NULL */
    const char *from;      /* --from-target, or NULL (then target is required) */
    long jobs;             /* 0: one per core */
    bool json;
} kpc_tool_replay_args;
int kpc_tool_replay(const kpc_tool_replay_args *a);
/* verb: create, verify or ls; targets: create's --target list. */
int kpc_tool_pack(const char *verb, const char *file, const char *const *targets, size_t ntargets,
                  const char *cache_dir, bool json);

#endif
