/*
 * tool.h - the subcommands of the kpc tool that live in their own files (replay.c,
 * pack.c). Each takes the arguments after the subcommand's name (argv[0] is the
 * subcommand, as getopt_long wants it) and returns the tool's exit status: 0 success,
 * 1 failure, 2 bad usage.
 */
#ifndef KPC_TOOL_H
#define KPC_TOOL_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

enum { KPC_TOOL_OK = 0, KPC_TOOL_FAIL = 1, KPC_TOOL_USAGE = 2 };

/* Shared output (src/tools/kpc.c): a size as "4.2KB"; print a JSON value on stdout and
 * free it (KPC_TOOL_OK, or KPC_TOOL_FAIL when it cannot be printed). */
void kpc_tool_human(char *buf, size_t len, uint64_t bytes);
int kpc_tool_print_json(cJSON *j);

int kpc_tool_replay(int argc, char **argv);
int kpc_tool_pack(int argc, char **argv);

#endif
