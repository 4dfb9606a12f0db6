/*
 * test_request_path.c - the path of one request through src/core, as it runs. This test
 * links a copy of the library built with -finstrument-functions at -O0 with no inlining
 * (tests/cmake/path.cmake): every call into one of its functions reaches the hook below
 * with the function and its call site, and addr2line names the source file of each.
 *
 * A file of src/core is entered when one of its functions is called from another file.
 * A hit (in memory, with or without files to check) and a miss (a build, a hit from the
 * disk in a new process, a hit through a manifest, a build behind one) enter each file
 * once: the map resolves a miss and publishes it in the one call (core/map.h,
 * kpc_map_get), and a manifest is looked at (core/manifest.c, core/manifest_decode.c)
 * and recorded into (core/manifest_record.c) by files of their own. A hit whose program
 * went stale enters what a miss does and stale_steps more. The fake platform's
 * "// dep=PATH" line makes a compile that read a header. The path of each is printed.
 */
#define _GNU_SOURCE
#include "support.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the record of calls --------------------------------------------------------- */
#define MAX_CALLS 65536

typedef struct call {
    void *fn, *site;
} call;

static call calls[MAX_CALLS];
static size_t num_calls;
static bool lost_calls;
static _Thread_local bool tracing; /* this thread's calls only: the request's */
static unsigned twice;               /* paths that entered a file too often */

void __cyg_profile_func_enter(void *fn, void *site) __attribute__((no_instrument_function));
void __cyg_profile_func_exit(void *fn, void *site) __attribute__((no_instrument_function));

void __cyg_profile_func_enter(void *fn, void *site)
{
    if (!tracing)
        return;
    if (num_calls == MAX_CALLS) {
        lost_calls = true;
        return;
    }
    calls[num_calls++] = (call){fn, site};
}

void __cyg_profile_func_exit(void *fn, void *site)
{
    (void)fn, (void)site;
}

/* ---- addresses to files ---------------------------------------------------------- */
typedef struct place {
    uintptr_t addr;
    char file[96]; /* "core/request.c", or "" outside src/core */
    char fn[256];  /* the function's name (for the entered function: its start) */
} place;

static int by_addr(const void *a, const void *b)
{
    uintptr_t x = ((const place *)a)->addr, y = ((const place *)b)->addr;
    return x < y ? -1 : x > y;
}

/* The file of each address (an offset into this executable), through one addr2line. */
static void name_places(place *p, size_t n)
{
    char dir[] = "/tmp/kpc-path-XXXXXX", in[64], exe[PATH_MAX], cmd[PATH_MAX + 256];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(in, sizeof in, "%s/addresses", dir);
    FILE *f = fopen(in, "w");
    ck_assert_ptr_nonnull(f);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%#lx\n", (unsigned long)p[i].addr);
    fclose(f);
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    ck_assert_int_gt(len, 0);
    exe[len] = '\0';
    snprintf(cmd, sizeof cmd, "addr2line -f -e '%s' < '%s'", exe, in);
    FILE *out = popen(cmd, "r");
    ck_assert_ptr_nonnull(out);
    char line[PATH_MAX + 64], fn[256];
    size_t i = 0;
    while (i < n && fgets(fn, sizeof fn, out) && fgets(line, sizeof line, out)) {
        fn[strcspn(fn, "\n")] = '\0';
        snprintf(p[i].fn, sizeof p[i].fn, "%s", fn);
        p[i].file[0] = '\0';
        char *core = strstr(line, "/src/core/");
        if (core) {
            core += strlen("/src/");
            core[strcspn(core, ":")] = '\0';
            snprintf(p[i].file, sizeof p[i].file, "%s", core);
        }
        i++;
    }
    ck_assert_int_eq(pclose(out), 0);
    ck_assert_uint_eq(i, n);
    unlink(in);
    rmdir(dir);
}

static const place *place_of(const place *p, size_t n, uintptr_t addr)
{
    place k = {.addr = addr};
    const place *hit = bsearch(&k, p, n, sizeof *p, by_addr);
    ck_assert_ptr_nonnull(hit);
    return hit;
}

/* The three kinds of path: a hit; a miss; and a hit whose program went stale (a file it
 * read changed), which then misses. */
enum path_kind { PATH_HIT, PATH_MISS, PATH_STALE };

/* What a stale hit enters before it misses, over a miss: the program's files checked
 * and, once found changed, the program let go of. Not one request's path read once:
 * it is held here so that it grows no further. */
static const struct {
    const char *file;
    unsigned more;
} stale_steps[] = {
    {"core/program.c", 3},  /* the hit's reference taken; the map's dropped, the hit's released */
    {"core/manifest.c", 2}, /* the files checked; the stale program's list freed */
};

/* How often a request may enter file: once, and a stale hit stale_steps more. */
static unsigned allowed(const char *file, enum path_kind kind)
{
    unsigned n = 1;
    for (size_t i = 0; kind == PATH_STALE && i < sizeof stale_steps / sizeof stale_steps[0]; i++)
        if (strcmp(file, stale_steps[i].file) == 0)
            n += stale_steps[i].more;
    return n;
}

/* The files of src/core the traced calls entered, in order, into path (one per line,
 * with the function entered); into over, each file entered more often than allowed. */
static void entered_files(enum path_kind kind, char *path, size_t cap, char *over, size_t over_cap)
{
    ck_assert(!lost_calls);
    Dl_info info;
    ck_assert(dladdr((void *)entered_files, &info) != 0);
    uintptr_t base = (uintptr_t)info.dli_fbase;
    place *p = calloc(2 * num_calls + 1, sizeof *p);
    size_t n = 0;
    for (size_t i = 0; i < num_calls; i++) {
        p[n++].addr = (uintptr_t)calls[i].fn - base;
        p[n++].addr = (uintptr_t)calls[i].site - 1 - base; /* the call, not the return */
    }
    qsort(p, n, sizeof *p, by_addr);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        if (u == 0 || p[u - 1].addr != p[i].addr)
            p[u++] = p[i];
    name_places(p, u);

    const char *seen[64];
    unsigned count[64], num_seen = 0;
    path[0] = over[0] = '\0';
    for (size_t i = 0; i < num_calls; i++) {
        const place *callee = place_of(p, u, (uintptr_t)calls[i].fn - base);
        const char *to = callee->file;
        const char *from = place_of(p, u, (uintptr_t)calls[i].site - 1 - base)->file;
        if (to[0] == '\0' || strcmp(to, from) == 0)
            continue;
        unsigned k = 0;
        while (k < num_seen && strcmp(seen[k], to) != 0)
            k++;
        if (k == num_seen) {
            ck_assert_uint_lt(num_seen, 64);
            seen[num_seen] = to;
            count[num_seen++] = 0;
        }
        count[k]++;
        size_t used = strlen(path);
        snprintf(path + used, cap - used, "%s%s (%s)", used ? "\n  -> " : "", to + strlen("core/"), callee->fn);
    }
    for (unsigned k = 0; k < num_seen; k++)
        if (count[k] > allowed(seen[k], kind)) {
            size_t used = strlen(over);
            snprintf(over + used, over_cap - used, "%s%s %u times", used ? ", " : "", seen[k], count[k]);
        }
    free(p);
}

/* kpc_program_get of src on ctx, traced: a hit (no program made) or a miss; the path is
 * printed, and a file entered more often than allowed() counted in `twice`. Returns the
 * number of compiles it made. */
static unsigned traced_get(const char *what, enum path_kind kind, kpc_context *ctx, const kpc_source *src)
{
    unsigned before = ts_fake_compiles();
    kpc_program *prog;
    num_calls = 0;
    lost_calls = false;
    tracing = true;
    kpc_status s = kpc_program_get(ctx, src, &prog);
    tracing = false;
    ck_assert_int_eq(s, KPC_OK);
    kpc_program_release(prog);
    char path[8192], over[512];
    entered_files(kind, path, sizeof path, over, sizeof over);
    printf("%s:\n  %s\n", what, path);
    if (over[0]) { /* the others still run: each path is printed */
        printf("%s: entered too often: %s\n", what, over);
        twice++;
    }
    fflush(stdout);
    ck_assert_msg(strncmp(path, "request.c", strlen("request.c")) == 0, "%s: starts elsewhere: %s", what, path);
    return ts_fake_compiles() - before;
}

static char *dir;

static void setup(void)
{
    dir = ts_tmpdir();
    ts_fake_install();
    twice = 0;
}

static void teardown(void)
{
    ts_fake_remove();
    ts_cleanup(dir);
}

/* One get of a traced path: what it is, whether it is a hit, the compiles it makes. */
typedef struct traced_step {
    const char *what;
    enum path_kind kind;
    unsigned compiles;
} traced_step;

/* A new cache on dir and a context on it (a new process's, as far as the path goes:
 * the map is empty), the n steps of src traced on it, in order. */
static void trace_in_new_cache(const kpc_source *src, const traced_step *steps, size_t n)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    for (size_t i = 0; i < n; i++)
        ck_assert_uint_eq(traced_get(steps[i].what, steps[i].kind, ctx, src), steps[i].compiles);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}

/* A request without options: the miss that builds, the hit in memory, and the hit from
 * the disk in a new context of a new cache (the host index's entry, then the record). */
START_TEST(plain_request_path)
{
    kpc_source src = ts_src("kernel plain\n", "plain.hip");
    trace_in_new_cache(&src, (traced_step[]){{"miss, built", PATH_MISS, 1}, {"hit in memory", PATH_HIT, 0}}, 2);
    trace_in_new_cache(&src, (traced_step[]){{"hit from disk", PATH_MISS, 0}}, 1);
    ck_assert_msg(twice == 0, "%u of the paths above entered a file of src/core too often", twice);
}
END_TEST

enum { PATH_CAP = 4300, CODE_CAP = 4400 };

/* A request of kernel `name` whose compile reads the header made under dir (its path in
 * header), found through -I (opt, the one option in opts); older than the race window
 * (core/manifest.h) when this returns, so its outcome is stored. */
static kpc_source header_request(const char *name, char header[PATH_CAP], char opt[PATH_CAP], char code[CODE_CAP],
                                 const char *opts[1])
{
    ts_include_dir(dir, header, opt, PATH_CAP);
    opts[0] = opt;
    snprintf(code, CODE_CAP, "kernel %s\n// dep=%s\n", name, header);
    kpc_source src = ts_src(code, "m.hip");
    src.options = opts;
    src.num_options = 1;
    usleep(1100 * 1000);
    return src;
}

/* A request with -I whose compile read a header: the build that writes the manifest,
 * the hit in memory (the header's stat), the hit through the manifest in a new cache,
 * and, after the header changed, the build behind the manifest that records into it. */
START_TEST(request_behind_a_manifest_path)
{
    char header[PATH_CAP], opt[PATH_CAP], code[CODE_CAP];
    const char *opts[1];
    kpc_source src = header_request("behind", header, opt, code, opts);
    trace_in_new_cache(&src, (traced_step[]){{"miss with -I, built", PATH_MISS, 1},
                                             {"hit with -I in memory", PATH_HIT, 0}}, 2);
    trace_in_new_cache(&src, (traced_step[]){{"hit through the manifest", PATH_MISS, 0}}, 1);
    ts_write_file(header, "#define H 22\n", 13);
    usleep(1100 * 1000);
    trace_in_new_cache(&src, (traced_step[]){{"miss behind the manifest, built", PATH_MISS, 1}}, 1);
    ck_assert_msg(twice == 0, "%u of the paths above entered a file of src/core too often", twice);
}
END_TEST

/* A request whose -I is relative: its key holds the working directory, which the
 * request's reading takes itself (no other file is entered for it on a hit). */
START_TEST(relative_request_path)
{
    char header[4300], opt[4300], code[4400], here[4200];
    ts_include_dir(dir, header, opt, sizeof header);
    const char *opts[] = {"-I./inc"};
    snprintf(code, sizeof code, "kernel relative\n// dep=%s\n", header);
    kpc_source src = ts_src(code, "r.hip");
    src.options = opts;
    src.num_options = 1;
    usleep(1100 * 1000); /* older than the race window (core/manifest.h): stored */
    ck_assert_ptr_nonnull(getcwd(here, sizeof here));
    ck_assert_int_eq(chdir(dir), 0);
    trace_in_new_cache(&src, (traced_step[]){{"miss with -I./inc, built", PATH_MISS, 1},
                                             {"hit with -I./inc in memory", PATH_HIT, 0}}, 2);
    ck_assert_int_eq(chdir(here), 0);
    ck_assert_msg(twice == 0, "%u of the paths above entered a file of src/core too often", twice);
}
END_TEST

/* A hit in memory whose file changed since it was built: the stale program let go of,
 * the map asked again, the build behind the manifest recording into it, the outcome
 * published; then a hit of the new program. */
START_TEST(changed_file_path)
{
    char header[PATH_CAP], opt[PATH_CAP], code[CODE_CAP];
    const char *opts[1];
    kpc_source src = header_request("changed", header, opt, code, opts);
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    ck_assert_uint_eq(traced_get("miss with -I, built", PATH_MISS, ctx, &src), 1);
    ts_write_file(header, "#define H 23\n", 13);
    usleep(1100 * 1000);
    ck_assert_uint_eq(traced_get("the hit's file changed, built again", PATH_STALE, ctx, &src), 1);
    ck_assert_uint_eq(traced_get("hit after the change, in memory", PATH_HIT, ctx, &src), 0);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ck_assert_msg(twice == 0, "%u of the paths above entered a file of src/core too often", twice);
}
END_TEST

int main(void)
{
    const TTest *tests[] = {plain_request_path, request_behind_a_manifest_path, relative_request_path, changed_file_path,
                            NULL};
    return ts_main_case("core", "request_path", 60, setup, teardown, tests);
}
