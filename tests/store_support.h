/*
 * store_support.h - what the disk-tree tests (tests/test_store_*.c) share: the case's
 * cache directory, its fixtures, forked children, a record's validity, real sources.
 * They run through real hipRTC compiles; the fake platform is used only where hundreds
 * of objects are needed (size limit, prune race, the every-length truncation loop
 * through the whole API). The tool's exit codes and JSON are in test_tool_*.c.
 */
#ifndef KPC_TEST_STORE_SUPPORT_H
#define KPC_TEST_STORE_SUPPORT_H

#include "support.h"

extern char *dir;
void setup(void);
void teardown(void);

/* A check inside a forked child: report and exit nonzero (Check's asserts belong to the
 * test process). */
#define CHILD_REQUIRE(cond)                                                                    \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "%s:%d: child %d: check failed: %s\n", __FILE__, __LINE__,         \
                    (int)getpid(), #cond);                                                     \
            _exit(1);                                                                          \
        }                                                                                      \
    } while (0)

pid_t spawn(int (*fn)(void *), void *arg);

int reap(pid_t pid);

void *shared_mem(size_t size);

kpc_stats stats_of(kpc_cache *c);

bool is_absent(const char *path);

/* The record at key must be a valid regular file holding exactly code. */
void assert_record_valid(const char *d, const kpc_key *key, const void *code, size_t size);

/* ---- real sources -------------------------------------------------------------------- */
extern const char *const tmpl_code;
extern const char *const tmpl_exprs[];

kpc_source real_src(int i);

/* =====================================================================================
 * Damage.
 * ===================================================================================== */
typedef struct cached_obj {
    kpc_key key;
    char path[4400];
    void *code;
    size_t code_size;
    void *file; /* the pristine record file */
    size_t file_size;
} cached_obj;

/* Build src in a fresh cache handle and remember its record. */
void cache_obj(const char *d, const kpc_source *src, cached_obj *o);

extern char fake_code[320][48];
kpc_source fake_src(int i);
uint64_t file_mtime(const char *path, uint64_t *size);

/* Every *.co file under dir/v1: count and bytes (no estimate: the real tree). */
extern uint64_t tree_bytes, tree_files;
int tree_add(const char *path, const struct stat *sb, int flag, struct FTW *ftw);

void tree_usage(const char *d, uint64_t *bytes, uint64_t *files);

#endif
