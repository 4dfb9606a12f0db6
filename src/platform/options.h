/*
 * options.h - what each compiler option of a request means to kpc, decided in one place
 * (platform/options.c): one table per compiler, one row per option. Everything that
 * looks at options asks it: the request check (an option may not name the target), the
 * key (a relative path to search makes the working directory part of it), the include
 * scan (NVRTC's search path), the negative lookups of a manifest (the directories
 * searched before the one a header was found in), and the drop-ins (what they may key
 * and what they must forward to the real compiler).
 */
#ifndef KPC_PLATFORM_OPTIONS_H
#define KPC_PLATFORM_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

enum kpc_option_class {
    KPC_OPTION_OTHER,      /* not in the table: part of the key; the drop-ins forward it */
    KPC_OPTION_KEY,        /* changes only the compile and says it wholly in its text */
    KPC_OPTION_SEARCH_DIR, /* a directory searched for includes (value: the path) */
    KPC_OPTION_READ_FILE,  /* a file read whole (-include f; value: the path) */
    KPC_OPTION_PATH,       /* another path the compile reads under (a sysroot, a prefix) */
    KPC_OPTION_NO_SOURCE_DIR, /* stops the search of the source's own directory */
    KPC_OPTION_TARGET,     /* names the target (value, or NULL for a spelling kpc cannot
                              take the target from); the context decides it: a request may
                              not carry it */
    KPC_OPTION_DEPFILE,    /* the caller's own dependency output: what the compile read
                              is unknown then */
    KPC_OPTION_FORWARD,    /* never keyed: writes files, reads what no manifest records,
                              or changes what the program API hands back */
};

/* The search groups of include directories, in the order a compiler walks them. */
enum kpc_option_group { KPC_SEARCH_QUOTE, KPC_SEARCH_ANGLE, KPC_SEARCH_SYSTEM, KPC_SEARCH_AFTER };

typedef struct kpc_option {
    enum kpc_option_class cls;
    enum kpc_option_group group; /* KPC_OPTION_SEARCH_DIR */
    const char *value;           /* the path or target; NULL when it has none */
    size_t used;                 /* options taken: 1, or 2 when the value came separate */
} kpc_option;

typedef struct kpc_option_table kpc_option_table;

/* The table of a platform or drop-in by its name ("amd", "nvidia", or any name with
 * "hiprtc" or "nvrtc" in it, in any case);
 * any other name (a test's fake compiler) gets the built-in platform's. */
const kpc_option_table *kpc_options_for(const char *platform);
/* Whether the compiler searches the source's own directory for a quoted include
 * (NVRTC does, hipRTC compiles from a directory of its own). */
bool kpc_options_source_dir_searched(const kpc_option_table *t);
/* Classify opts[i] (opts[i + 1] may be its value): fills *out. A value that should follow
 * and does not: the class stays, value NULL, used 1. */
void kpc_option_classify(const kpc_option_table *t, const char *const *opts, size_t n, size_t i,
                         kpc_option *out);
/* The same, asking only the rows that name paths (SEARCH_DIR, READ_FILE, PATH,
 * NO_SOURCE_DIR; anything else is OTHER): a few compares per option, for the key of
 * every request. */
void kpc_option_classify_path(const kpc_option_table *t, const char *const *opts, size_t n, size_t i,
                              kpc_option *out);
/* False when opt can name no path and no target under any compiler kpc knows (its
 * second byte begins no such row): a few instructions, asked first of every option of
 * every request; true says only that the rows must be asked. */
bool kpc_option_may_name_path_or_target(const char *opt);
#ifdef KPC_TEST_HOOKS
/* Whether the table behind kpc_option_may_name_path_or_target is the one the rows make. */
bool kpc_option_names_match_rows(void);
#endif
/* True if opt names the target under any compiler kpc knows: a request may not. */
bool kpc_option_sets_target(const char *opt);

/* The system directories every clang searches after the request's own, in order: a
 * header found there is shadowed by one of that name in any of the request's directories. */
#define KPC_SYSTEM_INCLUDE_DIRS 2
extern const char *const kpc_system_include_dirs[KPC_SYSTEM_INCLUDE_DIRS];

/* The directories searched for includes, in search order (quote, angle, system, after;
 * the order given within a group): up to max paths into dirs, pointing into opts. */
size_t kpc_options_search_dirs(const kpc_option_table *t, const char *const *opts, size_t n,
                               const char **dirs, size_t max);

#endif /* KPC_PLATFORM_OPTIONS_H */
