/*
 * options.c - the option tables: one per compiler, one row per option, first match
 * wins (so a longer spelling goes before a shorter one it starts with, and a FORWARD
 * row before the KEY prefix it would fall under). Adding an option is adding its row.
 *
 * A row's form says where its value is:
 *   EXACT    the spelling alone, no value             -no-source-include
 *   PREFIX   any option that starts with it           -D..., -M...
 *   SEP      the spelling then the value as the next option, or "spelling=value"
 *                                                     --include-path dir, -arch=sm_90
 *   ANY      SEP, or the value attached ("-Idir"; only for a single-dash spelling)
 *
 * hipRTC hands its options to comgr's clang, whose -MD file lists every file read
 * through any search directory, so every clang search option is a SEARCH_DIR here;
 * NVRTC's include scan (platform/include_scan.c) follows exactly the rows of its table.
 */
#define _GNU_SOURCE
#include "platform/options.h"

#include <string.h>
#include <strings.h>

const char *const kpc_system_include_dirs[KPC_SYSTEM_INCLUDE_DIRS] = {"/usr/local/include", "/usr/include"};

enum form { EXACT, PREFIX, SEP, ANY };

typedef struct row {
    const char *spelling;
    enum form form;
    enum kpc_option_class cls;
    enum kpc_option_group group;
} row;

struct kpc_option_table {
    const char *name;
    bool source_dir_searched;
    const row *rows; /* ended by a NULL spelling; the rows that name paths come first,
                        then the target's, in one block */
};

#define KEY(s) {s, PREFIX, KPC_OPTION_KEY, 0}
#define FORWARD(s) {s, PREFIX, KPC_OPTION_FORWARD, 0}

static const row hiprtc_rows[] = {
    /* where includes are searched, in clang's groups */
    {"-iquote", ANY, KPC_OPTION_SEARCH_DIR, KPC_SEARCH_QUOTE},
    {"--include-directory-after", SEP, KPC_OPTION_SEARCH_DIR, KPC_SEARCH_AFTER},
    {"--include-directory", SEP, KPC_OPTION_SEARCH_DIR, KPC_SEARCH_ANGLE},
    {"--include-path", SEP, KPC_OPTION_SEARCH_DIR, KPC_SEARCH_ANGLE}, /* NVRTC's spelling */
    {"-I", ANY, KPC_OPTION_SEARCH_DIR, KPC_SEARCH_ANGLE},
    {"-isystem", ANY, KPC_OPTION_SEARCH_DIR, KPC_SEARCH_SYSTEM},
    {"-cxx-isystem", ANY, KPC_OPTION_SEARCH_DIR, KPC_SEARCH_SYSTEM},
    {"--system-include", SEP, KPC_OPTION_SEARCH_DIR, KPC_SEARCH_SYSTEM},
    {"-idirafter", ANY, KPC_OPTION_SEARCH_DIR, KPC_SEARCH_AFTER},
    /* files read whole, and paths the search is made under */
    {"--pre-include", SEP, KPC_OPTION_READ_FILE, 0},
    {"-include", ANY, KPC_OPTION_READ_FILE, 0},
    {"-imacros", ANY, KPC_OPTION_READ_FILE, 0},
    {"-iwithprefixbefore", ANY, KPC_OPTION_PATH, 0},
    {"-iwithprefix", ANY, KPC_OPTION_PATH, 0},
    {"-iprefix", ANY, KPC_OPTION_PATH, 0},
    {"-isysroot", ANY, KPC_OPTION_PATH, 0},
    {"--sysroot", SEP, KPC_OPTION_PATH, 0},
    /* the target: the context names it */
    {"--offload-arch", SEP, KPC_OPTION_TARGET, 0},
    {"--gpu-architecture", SEP, KPC_OPTION_TARGET, 0},
    {"--amdgpu-target", PREFIX, KPC_OPTION_TARGET, 0},
    {"-march", PREFIX, KPC_OPTION_TARGET, 0},
    {"-mcpu", PREFIX, KPC_OPTION_TARGET, 0},
    {"-arch", PREFIX, KPC_OPTION_TARGET, 0},
    /* the caller's own dependency output */
    {"-M", PREFIX, KPC_OPTION_DEPFILE, 0},
    /* never keyed */
    FORWARD("-fsave"), FORWARD("-fsanitize"), FORWARD("-fprofile"),
    FORWARD("-fcoverage"), FORWARD("-fplugin"), FORWARD("-fmodule"), FORWARD("-fdebug-prefix"),
    FORWARD("-fembed"), FORWARD("-Wp,"), FORWARD("-Wl,"), FORWARD("-Wa,"), FORWARD("-gsplit"),
    FORWARD("-save-temps"),
    /* known to change only the compile, said wholly in the option's text */
    KEY("-D"), KEY("-U"), KEY("-O"), KEY("-std="), KEY("--std="), KEY("-W"), KEY("-w"), KEY("-f"),
    KEY("-m"), KEY("-g"), KEY("--define-macro="), KEY("--undefine-macro="),
    /* a launch bound, and optimization remarks (they go to the log, kept with the object);
     * under -f and -m: -fgpu-rdc (its bitcode is a record flagged as such, storage/record.h)
     * and -mtune= (comgr's clang ignores it with a warning, which the log keeps) */
    KEY("--gpu-max-threads-per-block="), KEY("-Rpass"),
    {NULL, EXACT, KPC_OPTION_OTHER, 0}};

static const row nvrtc_rows[] = {
    {"--include-path", SEP, KPC_OPTION_SEARCH_DIR, KPC_SEARCH_ANGLE},
    {"-I", ANY, KPC_OPTION_SEARCH_DIR, KPC_SEARCH_ANGLE},
    {"--pre-include", SEP, KPC_OPTION_READ_FILE, 0},
    {"-include", ANY, KPC_OPTION_READ_FILE, 0},
    {"-no-source-include", EXACT, KPC_OPTION_NO_SOURCE_DIR, 0},
    {"--no-source-include", EXACT, KPC_OPTION_NO_SOURCE_DIR, 0},
    {"--gpu-architecture", SEP, KPC_OPTION_TARGET, 0},
    {"-arch", SEP, KPC_OPTION_TARGET, 0},
    {"-M", PREFIX, KPC_OPTION_DEPFILE, 0},
    {"--dependency-output", PREFIX, KPC_OPTION_DEPFILE, 0},
    {"--generate-dependencies", PREFIX, KPC_OPTION_DEPFILE, 0},
    KEY("-D"), KEY("-U"), KEY("-O"), KEY("-std="), KEY("--std="), KEY("-W"), KEY("-w"),
    KEY("--define-macro="), KEY("--undefine-macro="), KEY("-use_fast_math"), KEY("--use_fast_math"),
    KEY("-ftz="), KEY("--ftz="), KEY("-prec-div="), KEY("--prec-div="), KEY("-prec-sqrt="),
    KEY("--prec-sqrt="), KEY("-fmad="), KEY("--fmad="), KEY("-default-device"),
    KEY("--device-as-default-execution-space"), KEY("-lineinfo"), KEY("--generate-line-info"),
    KEY("-G"), KEY("--device-debug"), KEY("-restrict"), KEY("--restrict"), KEY("-maxrregcount="),
    KEY("--maxrregcount="), KEY("-ewp"), KEY("--extensible-whole-program"), KEY("-dopt="),
    KEY("--dopt="), KEY("-extra-device-vectorization"), KEY("--extra-device-vectorization"),
    KEY("--disable-warnings"), KEY("-rdc=false"), KEY("--relocatable-device-code=false"),
    KEY("-dw"), KEY("--device-w"),
    {NULL, EXACT, KPC_OPTION_OTHER, 0}};

static const kpc_option_table hiprtc = {"hiprtc", false, hiprtc_rows};
static const kpc_option_table nvrtc = {"nvrtc", true, nvrtc_rows};

const kpc_option_table *kpc_options_for(const char *platform)
{
    /* the platform's name, its compiler's ("NVRTC", "hipRTC") or a drop-in's ("kpc-nvrtc") */
    if (strcasecmp(platform, "nvidia") == 0 || strcasestr(platform, "nvrtc") != NULL)
        return &nvrtc;
    if (strcasecmp(platform, "amd") == 0 || strcasestr(platform, "hiprtc") != NULL)
        return &hiprtc;
#ifdef KPC_PLATFORM_NVIDIA
    return &nvrtc;
#else
    return &hiprtc;
#endif
}

bool kpc_options_source_dir_searched(const kpc_option_table *t)
{
    return t->source_dir_searched;
}

/* Whether opt is written by row r; its value (or NULL) and the options it takes. */
static bool matches(const row *r, const char *const *opts, size_t n, size_t i, const char **value,
                    size_t *used)
{
    const char *o = opts[i];
    *value = NULL;
    *used = 1;
    size_t len = strlen(r->spelling);
    if (strncmp(o, r->spelling, len) != 0)
        return false;
    switch (r->form) {
    case EXACT:
        return o[len] == '\0';
    case PREFIX:
        return true;
    case SEP:
    case ANY:
        if (o[len] == '\0') { /* the value is the next option */
            if (i + 1 < n && opts[i + 1] != NULL) {
                *value = opts[i + 1];
                *used = 2;
            }
            return true;
        }
        if (o[len] == '=') {
            *value = o + len + 1;
            return true;
        }
        /* "-Idir" is -I with dir; "--include-pathX" is another option */
        if (r->form == ANY && r->spelling[1] != '-') {
            *value = o + len;
            return true;
        }
        return false;
    }
    return false;
}

static bool names_path(enum kpc_option_class c)
{
    return c == KPC_OPTION_SEARCH_DIR || c == KPC_OPTION_READ_FILE || c == KPC_OPTION_PATH ||
           c == KPC_OPTION_NO_SOURCE_DIR;
}

/* The second bytes that begin a row naming a path or the target, in either table: an
 * option with any other (-D..., -O3, -std=...) is none of those, and the request, which
 * asks on every hit, is answered without walking a row. Written out rather than filled
 * from the rows at run time: a filled table is a write to a page a new process may not
 * have touched, on the first request with an option. kpc_option_names_match_rows (a
 * test's) holds it to the rows. */
static const bool names_path_or_target_at[256] = {
    ['-'] = true, ['I'] = true, ['a'] = true, ['c'] = true, ['i'] = true, ['m'] = true, ['n'] = true,
};

bool kpc_option_may_name_path_or_target(const char *opt)
{
    return opt != NULL && opt[0] == '-' && names_path_or_target_at[(unsigned char)opt[1]];
}

#ifdef KPC_TEST_HOOKS
bool kpc_option_names_match_rows(void)
{
    bool named[256] = {false};
    const row *const tables[] = {hiprtc_rows, nvrtc_rows};
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
        for (const row *r = tables[t]; r->spelling; r++)
            if (names_path(r->cls) || r->cls == KPC_OPTION_TARGET)
                named[(unsigned char)r->spelling[1]] = true;
    return memcmp(named, names_path_or_target_at, sizeof named) == 0;
}
#endif

static void classify(const kpc_option_table *t, bool paths_only, const char *const *opts, size_t n,
                     size_t i, kpc_option *out)
{
    *out = (kpc_option){KPC_OPTION_OTHER, 0, NULL, 1};
    const char *o = opts[i];
    if (o == NULL || o[0] != '-' || (paths_only && !kpc_option_may_name_path_or_target(o)))
        return;
    for (const row *r = t->rows; r->spelling && (!paths_only || names_path(r->cls)); r++)
        if (r->spelling[1] == o[1] && matches(r, opts, n, i, &out->value, &out->used)) {
            out->cls = r->cls;
            out->group = r->group;
            return;
        }
    out->value = NULL;
    out->used = 1;
}

void kpc_option_classify(const kpc_option_table *t, const char *const *opts, size_t n, size_t i,
                         kpc_option *out)
{
    classify(t, false, opts, n, i, out);
}

void kpc_option_classify_path(const kpc_option_table *t, const char *const *opts, size_t n, size_t i,
                              kpc_option *out)
{
    classify(t, true, opts, n, i, out);
}

bool kpc_option_sets_target(const char *opt)
{
    /* on every request, for every option: only the TARGET rows are asked */
    const char *const opts[] = {opt};
    const char *value;
    size_t used;
    for (int t = 0; t < 2 && kpc_option_may_name_path_or_target(opt); t++) {
        const row *r = t == 0 ? hiprtc_rows : nvrtc_rows;
        while (r->spelling && r->cls != KPC_OPTION_TARGET)
            r++;
        /* the target's rows are one block (see the tables): past it, no row names it */
        for (; r->spelling && r->cls == KPC_OPTION_TARGET; r++)
            if (r->spelling[1] == opt[1] && matches(r, opts, 1, 0, &value, &used))
                return true;
    }
    return false;
}

size_t kpc_options_search_dirs(const kpc_option_table *t, const char *const *opts, size_t n,
                               const char **dirs, size_t max)
{
    size_t count = 0;
    for (int group = KPC_SEARCH_QUOTE; group <= KPC_SEARCH_AFTER; group++)
        for (size_t i = 0; i < n; i += 1) {
            kpc_option o;
            kpc_option_classify(t, opts, n, i, &o);
            if (o.cls == KPC_OPTION_SEARCH_DIR && (int)o.group == group && o.value && count < max)
                dirs[count++] = o.value;
            i += o.used - 1;
        }
    return count;
}
