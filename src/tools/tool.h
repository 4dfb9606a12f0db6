/*
 * tool.h - the subcommands of the kpc tool that live in their own files (replay.c,
 * pack.c). Each takes the arguments after the subcommand's name (argv[0] is the
 * subcommand, as getopt_long wants it) and returns the tool's exit status: 0 success,
 * 1 failure, 2 bad usage. src/tools/kpc.c parses their options (its command table).
 */
#ifndef KPC_TOOL_H
#define KPC_TOOL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { KPC_TOOL_OK = 0, KPC_TOOL_FAIL = 1, KPC_TOOL_USAGE = 2 };

/* Shared output (src/tools/kpc.c): a size as "4.2KB"; print a JSON value on stdout and
 * free it (KPC_TOOL_OK, or KPC_TOOL_FAIL when it cannot be printed). */
void kpc_tool_human(char *buf, size_t len, uint64_t bytes);
int kpc_tool_print_json(cJSON *j);

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
