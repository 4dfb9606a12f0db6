/*
 * tool_support.h - what the kpc tool's tests (tests/test_tool_*.c) share: the case's
 * cache directory, running `kpc` (with extra environment, bounded in time), its JSON's
 * fields, records built into the cache.
 */
#ifndef KPC_TEST_TOOL_SUPPORT_H
#define KPC_TEST_TOOL_SUPPORT_H

#include "support.h"

extern char *dir;
extern const char *tool;
void setup(void);
void teardown(void);

/* Run `kpc ARGS...` (NULL-terminated); stdout and stderr into *out / *err (may be NULL). */
int kpc(char **out, char **err, ...);

cJSON *parse(const char *text);

double num(const cJSON *o, const char *field);

const char *str(const cJSON *o, const char *field);

bool boolean(const cJSON *o, const char *field);

/* A file next to the cache dir holding text; returns its path (malloc'd). */
char *side_file(const char *name, const char *text);

bool is_absent(const char *path);

/* ---- stats --json ---------------------------------------------------------------------- */
extern const char *const stats_fields[];

cJSON *stats_json(void);

/* ---- errors the walk meets -------------------------------------------------------------- */
/* `kpc CMD --cache-dir DIR [--json]` as a user the tree's modes bind: as root (whom modes
 * do not bind) the tree is handed to uid 65534 and the tool runs as it (setpriv); the
 * exit status, stdout and stderr. */
int kpc_bound_args(char **out, char **err, const char *const *args);

#endif
