/*
 * tool.h - the subcommands of the kpc tool that live in their own files (replay.c,
 * pack.c). Each takes the arguments after the subcommand's name (argv[0] is the
 * subcommand, as getopt_long wants it) and returns the tool's exit status: 0 success,
 * 1 failure, 2 bad usage.
 */
#ifndef KPC_TOOL_H
#define KPC_TOOL_H

enum { KPC_TOOL_OK = 0, KPC_TOOL_FAIL = 1, KPC_TOOL_USAGE = 2 };

int kpc_tool_replay(int argc, char **argv);
int kpc_tool_pack(int argc, char **argv);

#endif
