/*
 * test_manifest.c - the manifest module alone: dependency files parsed, dependency lists
 * recorded and checked against the file system (edits, deletions, symlinks, the race
 * rule), manifests encoded, decoded (and refused when damaged), their entry lists, the
 * object key, which options make the working directory part of the key, the include
 * scan NVRTC needs, and threads hitting a program whose header changes.
 */
#define _GNU_SOURCE
#include "core/manifest.h"
#ifndef KPC_PLATFORM_NVIDIA
#include "platform/amd_deps.h" /* built on the AMD platform only */
#endif
#include "platform/depfile.h"
#include "platform/include_scan.h"
#include "support.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define SEC 1000000000ull

static char *dir;

static void setup(void)
{
    dir = ts_tmpdir(); /* the cache directory's path, not made yet: the files go there */
    ck_assert_int_eq(kpc__mkdir_p(dir, 0700), 0);
}

static void teardown(void)
{
    ts_cleanup(dir);
}

static void put(const char *name, const char *text, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", dir, name);
    ts_write_file(path, text, strlen(text));
}

/* A start time two seconds from now: the files were written "long before" the compile. */
static uint64_t later(void)
{
    return kpc__wall_ns() + 2 * SEC;
}

/* ---- dependency files ------------------------------------------------------------- */
START_TEST(depfile_real_shape)
{
    /* what hipRTC 5.2 writes with kpc's options (6.4 names the input by the source's name) */
    const char *text = "kpc-deps: /tmp/comgr-311493/input/CompileSource \\\n"
                       "  /tmp/comgr-311493/include/hiprtc_runtime.h headers/test_header1.h \\\n"
                       "  headers/nested.h /tmp/comgr-311493/include/mem.h\n";
    char *target, **paths;
    size_t n;
    ck_assert_int_eq(kpc_depfile_parse(text, strlen(text), &target, &paths, &n), KPC_OK);
    ck_assert_str_eq(target, "kpc-deps");
    ck_assert_uint_eq(n, 5);
    ck_assert_str_eq(paths[0], "/tmp/comgr-311493/input/CompileSource");
    ck_assert_str_eq(paths[2], "headers/test_header1.h");
    ck_assert_str_eq(paths[4], "/tmp/comgr-311493/include/mem.h");
    free(target);
    kpc_depfile_paths_free(paths, n);

#ifndef KPC_PLATFORM_NVIDIA
    /* the platform's filter keeps what lies outside comgr's directory */
    char path[4200];
    put("dep.d", text, path, sizeof path);
    ck_assert_int_eq(kpc_amd_deps_collect(path, &paths, &n), KPC_OK);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(paths[0], "headers/test_header1.h");
    ck_assert_str_eq(paths[1], "headers/nested.h");
    kpc_depfile_paths_free(paths, n);
    ck_assert_int_ne(access(path, F_OK), 0); /* removed */
#endif
}
END_TEST

START_TEST(depfile_escapes)
{
    /* clang: ' ' -> "\ " (backslashes before it doubled), '#' -> "\#", '$' -> "$$" */
    const char *text = "out.o: a\\ b.h c\\#d.h e$$f.h g\\\\\\ h.h \\\n i.h\n"
                       "phony.h:\n";
    char *target, **paths;
    size_t n;
    ck_assert_int_eq(kpc_depfile_parse(text, strlen(text), &target, &paths, &n), KPC_OK);
    ck_assert_str_eq(target, "out.o");
    ck_assert_uint_eq(n, 5);
    ck_assert_str_eq(paths[0], "a b.h");
    ck_assert_str_eq(paths[1], "c#d.h");
    ck_assert_str_eq(paths[2], "e$f.h");
    ck_assert_str_eq(paths[3], "g\\ h.h");
    ck_assert_str_eq(paths[4], "i.h"); /* the first rule only: phony.h is another */
    free(target);
    kpc_depfile_paths_free(paths, n);

    ck_assert_int_eq(kpc_depfile_parse("", 0, &target, &paths, &n), KPC_E_CORRUPT);
    ck_assert_int_eq(kpc_depfile_parse("a b c", 5, &target, &paths, &n), KPC_E_CORRUPT);
#ifndef KPC_PLATFORM_NVIDIA
    /* an empty file (clang stopped on a fatal error): dependencies unknown */
    char path[4200];
    put("empty.d", "", path, sizeof path);
    ck_assert_int_eq(kpc_amd_deps_collect(path, &paths, &n), KPC_E_NOT_FOUND);
    /* a shape that is not comgr's: unknown too, never a guess */
    put("odd.d", "x.o: y.h z.h\n", path, sizeof path);
    ck_assert_int_eq(kpc_amd_deps_collect(path, &paths, &n), KPC_E_NOT_FOUND);
    /* comgr's shape under another target than kpc's: not the file kpc asked for */
    put("other.d", "/tmp/comgr-1/output/a.bc: /tmp/comgr-1/input/a.hip h.h\n", path, sizeof path);
    ck_assert_int_eq(kpc_amd_deps_collect(path, &paths, &n), KPC_E_NOT_FOUND);
#endif
}
END_TEST

/* ---- recording and checking ------------------------------------------------------- */
static kpc_deps *record1(const char *path)
{
    kpc_deps *d = NULL;
    const char *paths[] = {path};
    ck_assert_int_eq(kpc_manifest_deps_record(paths, 1, NULL, 0, NULL, later(), &d), KPC_OK);
    ck_assert_ptr_nonnull(d);
    return d;
}

START_TEST(record_and_match)
{
    char a[4200], b[4200];
    put("a.h", "typedef float real;\n", a, sizeof a);
    put("b.h", "#define N 1\n", b, sizeof b);
    /* relative paths are taken against the working directory given */
    const char *paths[] = {"a.h", b};
    kpc_deps *d = NULL;
    ck_assert_int_eq(kpc_manifest_deps_record(paths, 2, NULL, 0, dir, later(), &d), KPC_OK);
    ck_assert_uint_eq(d->count, 2);
    ck_assert_str_eq(d->files[0].path, a);
    ck_assert_uint_eq(d->files[0].size, strlen("typedef float real;\n"));
    ck_assert(kpc_manifest_deps_match(d));

    /* same size, other bytes: caught (the ctime moved, so it is re-hashed) */
    ts_write_file(a, "typedef doubl real;\n", strlen("typedef doubl real;\n"));
    ck_assert(!kpc_manifest_deps_match(d));
    /* the old bytes back: matches again (by content) */
    ts_write_file(a, "typedef float real;\n", strlen("typedef float real;\n"));
    ck_assert(kpc_manifest_deps_match(d));
    /* other bytes with the old mtime put back: the ctime still tells */
    ts_write_file(a, "typedef doubl real;\n", strlen("typedef doubl real;\n"));
    struct timespec times[2] = {{0, UTIME_OMIT}, {d->files[0].mtime_ns / SEC, d->files[0].mtime_ns % SEC}};
    ck_assert_int_eq(utimensat(AT_FDCWD, a, times, 0), 0);
    ck_assert(!kpc_manifest_deps_match(d));
    ts_write_file(a, "typedef float real;\n", strlen("typedef float real;\n"));
    /* touched, same bytes: still a match */
    ck_assert_int_eq(utimensat(AT_FDCWD, a, NULL, 0), 0);
    ck_assert(kpc_manifest_deps_match(d));
    /* gone: a mismatch, never a stale hit */
    ck_assert_int_eq(unlink(b), 0);
    ck_assert(!kpc_manifest_deps_match(d));
    /* a directory where the file was */
    ck_assert_int_eq(mkdir(b, 0700), 0);
    ck_assert(!kpc_manifest_deps_match(d));
    kpc_manifest_deps_free(d);

    /* a relative path without a working directory is refused */
    ck_assert_int_eq(kpc_manifest_deps_record(paths, 2, NULL, 0, NULL, later(), &d), KPC_E_INVALID);
    /* a missing file cannot be recorded */
    const char *missing[] = {"/nonexistent/kpc/x.h"};
    ck_assert_int_eq(kpc_manifest_deps_record(missing, 1, NULL, 0, NULL, later(), &d), KPC_E_NOT_FOUND);
    /* none: no list */
    ck_assert_int_eq(kpc_manifest_deps_record(NULL, 0, NULL, 0, NULL, later(), &d), KPC_OK);
    ck_assert_ptr_null(d);
    ck_assert(kpc_manifest_deps_match(NULL));
}
END_TEST

START_TEST(record_refuses_recent)
{
    /* written now and compiled now: the compiler may have read other bytes than the ones
     * hashed afterwards, so the outcome must not be recorded */
    char a[4200];
    put("a.h", "x", a, sizeof a);
    const char *paths[] = {a};
    kpc_deps *d = NULL;
    ck_assert_int_eq(kpc_manifest_deps_record(paths, 1, NULL, 0, NULL, kpc__wall_ns(), &d), KPC_E_NOT_FOUND);
    ck_assert_ptr_null(d);
    /* a compile that began more than a second after the write is fine */
    ck_assert_int_eq(kpc_manifest_deps_record(paths, 1, NULL, 0, NULL, kpc__wall_ns() + SEC + SEC / 10, &d),
                     KPC_OK);
    kpc_manifest_deps_free(d);
}
END_TEST

START_TEST(symlinked_header)
{
    char a[4200], b[4200], c[4200], link[4200];
    put("a.h", "#define V 1\n", a, sizeof a);
    put("b.h", "#define V 2\n", b, sizeof b);
    put("c.h", "#define V 1\n", c, sizeof c);
    snprintf(link, sizeof link, "%s/v.h", dir);
    ck_assert_int_eq(symlink(a, link), 0);
    kpc_deps *d = record1(link);
    ck_assert_str_eq(d->files[0].path, link); /* the link's path, not its target's */
    ck_assert(kpc_manifest_deps_match(d));
    /* re-pointed at other bytes: a mismatch */
    ck_assert_int_eq(unlink(link), 0);
    ck_assert_int_eq(symlink(b, link), 0);
    ck_assert(!kpc_manifest_deps_match(d));
    /* re-pointed at the same bytes elsewhere: a match (content decides) */
    ck_assert_int_eq(unlink(link), 0);
    ck_assert_int_eq(symlink(c, link), 0);
    ck_assert(kpc_manifest_deps_match(d));
    /* the target edited through the link */
    ts_write_file(c, "#define V 3\n", strlen("#define V 3\n"));
    ck_assert(!kpc_manifest_deps_match(d));
    /* dangling */
    ck_assert_int_eq(unlink(c), 0);
    ck_assert(!kpc_manifest_deps_match(d));
    kpc_manifest_deps_free(d);
}
END_TEST

/* ---- manifests ---------------------------------------------------------------------- */
START_TEST(encode_decode)
{
    char a[4200], b[4200];
    put("a.h", "one\n", a, sizeof a);
    put("b.h", "two\n", b, sizeof b);
    kpc_deps *da = record1(a), *db = record1(b);
    kpc_key req = {{1, 2, 3}}, oa, ob;
    kpc_manifest_object_key(&req, da, &oa);
    kpc_manifest_object_key(&req, db, &ob);
    ck_assert_mem_ne(oa.bytes, ob.bytes, 16);
    ck_assert_mem_ne(oa.bytes, req.bytes, 16);
    kpc_key same;
    kpc_manifest_object_key(&req, NULL, &same);
    ck_assert_mem_eq(same.bytes, req.bytes, 16);

    kpc_manifest m = {0};
    ck_assert_int_eq(kpc_manifest_add(&m, &oa, KPC_MANIFEST_CODE, da), KPC_OK);
    ck_assert_int_eq(kpc_manifest_add(&m, &ob, KPC_MANIFEST_LOG, db), KPC_OK);
    void *buf;
    size_t size;
    ck_assert_int_eq(kpc_manifest_encode(&m, &buf, &size), KPC_OK);
    kpc_manifest back;
    ck_assert_int_eq(kpc_manifest_decode(buf, size, &back), KPC_OK);
    ck_assert_uint_eq(back.count, 2);
    ck_assert_mem_eq(back.entries[0].object.bytes, ob.bytes, 16); /* newest first */
    ck_assert_uint_eq(back.entries[0].outcome, KPC_MANIFEST_LOG);
    ck_assert_str_eq(back.entries[1].deps->files[0].path, a);
    ck_assert_mem_eq(back.entries[1].deps->files[0].digest, da->files[0].digest, 16);
    ck_assert_int_eq(back.entries[1].deps->files[0].mtime_ns, da->files[0].mtime_ns);
    /* both match: the newest wins */
    ck_assert_ptr_eq(kpc_manifest_match(&back), &back.entries[0]);
    /* b changes: a's entry answers */
    ts_write_file(b, "TWO\n", 4);
    ck_assert_ptr_eq(kpc_manifest_match(&back), &back.entries[1]);
    ts_write_file(a, "ONE\n", 4);
    ck_assert_ptr_null(kpc_manifest_match(&back));
    kpc_manifest_free(&back);

    /* every truncation and a flipped byte in the header are refused, never misread */
    for (size_t cut = 0; cut < size; cut++)
        ck_assert_int_eq(kpc_manifest_decode(buf, cut, &back), KPC_E_CORRUPT);
    uint8_t *bytes = buf;
    bytes[3] ^= 1;
    ck_assert_int_eq(kpc_manifest_decode(buf, size, &back), KPC_E_CORRUPT);
    bytes[3] ^= 1;
    bytes[12] = 200; /* entry count past the maximum */
    ck_assert_int_eq(kpc_manifest_decode(buf, size, &back), KPC_E_CORRUPT);
    free(buf);
    kpc_manifest_free(&m);
    kpc_manifest_deps_free(da);
    kpc_manifest_deps_free(db);
}
END_TEST

START_TEST(entries_replace_and_cap)
{
    char a[4200];
    put("a.h", "x\n", a, sizeof a);
    kpc_deps *d = record1(a);
    kpc_manifest m = {0};
    kpc_key k[KPC_MANIFEST_MAX_ENTRIES + 3];
    for (size_t i = 0; i < KPC_MANIFEST_MAX_ENTRIES + 3; i++) {
        memset(&k[i], 0, sizeof k[i]);
        k[i].bytes[0] = (uint8_t)(i + 1);
        ck_assert_int_eq(kpc_manifest_add(&m, &k[i], KPC_MANIFEST_CODE, d), KPC_OK);
    }
    ck_assert_uint_eq(m.count, KPC_MANIFEST_MAX_ENTRIES);
    ck_assert_uint_eq(m.entries[0].object.bytes[0], KPC_MANIFEST_MAX_ENTRIES + 3);
    ck_assert_uint_eq(m.entries[KPC_MANIFEST_MAX_ENTRIES - 1].object.bytes[0], 4); /* 1..3 dropped */
    /* adding an object already listed moves it first, no duplicate */
    ck_assert_int_eq(kpc_manifest_add(&m, &k[5], KPC_MANIFEST_LOG, d), KPC_OK);
    ck_assert_uint_eq(m.count, KPC_MANIFEST_MAX_ENTRIES);
    ck_assert_uint_eq(m.entries[0].object.bytes[0], 6);
    ck_assert_uint_eq(m.entries[0].outcome, KPC_MANIFEST_LOG);
    size_t seen = 0;
    for (size_t i = 0; i < m.count; i++)
        seen += m.entries[i].object.bytes[0] == 6;
    ck_assert_uint_eq(seen, 1);
    kpc_manifest_free(&m);
    kpc_manifest_deps_free(d);
}
END_TEST

START_TEST(needs_cwd)
{
    struct {
        const char *opts[3];
        size_t n;
        bool want;
    } cases[] = {
        {{"-O3"}, 1, false},
        {{"-I/abs/headers"}, 1, false},
        {{"-I./headers"}, 1, true},
        {{"-Iheaders"}, 1, true},
        {{"-I", "headers"}, 2, true},
        {{"-I", "/abs"}, 2, false},
        {{"-isystem", "inc"}, 2, true},
        {{"-isystem/abs"}, 1, false},
        {{"-include", "pre.h"}, 2, true},
        {{"-include", "/abs/pre.h"}, 2, false},
        {{"--include-path=rel"}, 1, true},
        {{"--pre-include=/abs/x.h"}, 1, false},
        {{"-iquote", "q"}, 2, true},
        {{"-DX=1", "-I/a", "-Irel"}, 3, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kpc_source s = ts_src("x", "k.hip");
        s.options = cases[i].opts;
        s.num_options = cases[i].n;
        ck_assert_msg(kpc_manifest_needs_cwd(&s, kpc_options_for("amd")) == cases[i].want, "case %zu", i);
    }
    /* NVRTC searches the source's directory: a relative name counts, unless told not to
     * or the texts include nothing */
    kpc_source s = ts_src("x", "k.cu");
    const kpc_option_table *nv = kpc_options_for("nvidia");
    ck_assert(!kpc_manifest_needs_cwd(&s, nv));
    s = ts_src("#include \"h.h\"\nx", "k.cu");
    ck_assert(!kpc_manifest_needs_cwd(&s, kpc_options_for("amd")));
    ck_assert(kpc_manifest_needs_cwd(&s, nv));
    const char *hs[] = {"#include \"g.h\"\n"}, *hn[] = {"h.h"};
    kpc_source sh = ts_src("x", "k.cu");
    sh.header_sources = hs;
    sh.header_names = hn;
    sh.num_headers = 1;
    ck_assert(kpc_manifest_needs_cwd(&sh, nv));
    const char *nsi[] = {"--no-source-include"};
    s.options = nsi;
    s.num_options = 1;
    ck_assert(!kpc_manifest_needs_cwd(&s, nv));
    s = ts_src("#include \"h.h\"\nx", "/abs/k.cu");
    ck_assert(!kpc_manifest_needs_cwd(&s, nv));
}
END_TEST


/* ---- the include scan (NVRTC has no dependency output) ----------------------------- */
static bool listed(char **paths, size_t n, const char *path)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(paths[i], path) == 0)
            return true;
    return false;
}

START_TEST(include_scan)
{
    char p[4200], inc[4200], sub[4200];
    snprintf(inc, sizeof inc, "%s/inc", dir);
    snprintf(sub, sizeof sub, "%s/inc/sub", dir);
    ck_assert_int_eq(kpc__mkdir_p(sub, 0700), 0);
    put("inc/a.h", "#pragma once\n  #  include \"sub/b.h\"\n#include <mem.h>\n", p, sizeof p);
    put("inc/sub/b.h", "#include \"c.h\"\n#include <absent.h>\n", p, sizeof p);
    put("inc/sub/c.h", "#include \"../a.h\"\n", p, sizeof p); /* a cycle back to a.h */
    put("inc/pre.h", "#define PRE 1\n", p, sizeof p);
    put("mem.h", "on disk but given in memory\n", p, sizeof p);
    char opt_i[4300], opt_pre[4300];
    snprintf(opt_i, sizeof opt_i, "-I%s", inc);
    snprintf(opt_pre, sizeof opt_pre, "--pre-include=%s/pre.h", inc);
    const char *opts[] = {opt_i, opt_pre};
    const char *hn[] = {"mem.h"}, *hs[] = {"#include \"a.h\"\n"};
    kpc_source s = ts_src("#include \"a.h\"\n__global__ void k() {}\n", "k.cu");
    s.options = opts;
    s.num_options = 2;
    s.header_names = hn;
    s.header_sources = hs;
    s.num_headers = 1;
    char **paths;
    size_t n;
    bool unresolved;
    ck_assert_int_eq(kpc_include_scan(&s, &paths, &n, &unresolved), KPC_OK);
    ck_assert(unresolved); /* absent.h */
    char a[4300], b[4300], c[4300], pre[4300];
    snprintf(a, sizeof a, "%s/a.h", inc);
    snprintf(b, sizeof b, "%s/sub/b.h", inc);
    snprintf(c, sizeof c, "%s/sub/c.h", inc);
    snprintf(pre, sizeof pre, "%s/pre.h", inc);
    ck_assert(listed(paths, n, a));
    ck_assert(listed(paths, n, b)); /* nested, through the includer's directory */
    ck_assert(listed(paths, n, c));
    ck_assert(listed(paths, n, pre));
    /* c.h's "../a.h" is a.h by another path: listed (a path can be re-pointed), read once */
    snprintf(pre, sizeof pre, "%s/sub/../a.h", inc);
    ck_assert(listed(paths, n, pre));
    ck_assert_uint_eq(n, 5); /* mem.h is in memory, absent.h nowhere, each path once */
    kpc_depfile_paths_free(paths, n);

    /* a computed include: unknown, so not cached */
    kpc_source m = ts_src("#define H \"a.h\"\n#include H\n", "k.cu");
    ck_assert_int_eq(kpc_include_scan(&m, &paths, &n, &unresolved), KPC_E_NOT_FOUND);
    /* nothing included: no files */
    kpc_source none = ts_src("__global__ void k() {}\n", "k.cu");
    ck_assert_int_eq(kpc_include_scan(&none, &paths, &n, &unresolved), KPC_OK);
    ck_assert_uint_eq(n, 0);
    ck_assert(!unresolved);
    /* every include found (on disk or in memory): nothing unresolved */
    put("inc/sub/b.h", "#include \"c.h\"\n", p, sizeof p);
    ck_assert_int_eq(kpc_include_scan(&s, &paths, &n, &unresolved), KPC_OK);
    ck_assert(!unresolved);
    kpc_depfile_paths_free(paths, n);
}
END_TEST


/* ---- threads hitting a program whose header changes (the map's check, under TSan) ----- */
/* A platform whose compile reads the file named after "// dep=" in the source: the code
 * object embeds that file's bytes' hash, and the file is the build's one dependency. */
static _Atomic unsigned dep_compiles;

static kpc_status dep_identity(const kpc_root *root, uint8_t id[16], char *desc, size_t cap)
{
    (void)root;
    memset(id, 0x6b, 16);
    snprintf(desc, cap, "dep");
    return KPC_OK;
}

static kpc_status dep_normalize(const kpc_root *root, const uint8_t id[16], const char *t, char *out,
                                size_t cap)
{
    (void)root, (void)id;
    snprintf(out, cap, "%s", t);
    return KPC_OK;
}

static kpc_status dep_compile(const char *target, const kpc_source *src, kpc_build *b)
{
    (void)target;
    memset(b, 0, sizeof *b);
    atomic_fetch_add(&dep_compiles, 1);
    const char *at = strstr(src->code, "// dep=");
    char path[4096];
    snprintf(path, sizeof path, "%.*s", (int)strcspn(at + 7, "\n"), at + 7);
    size_t size;
    void *text = ts_read_file(path, &size);
    b->code_size = 128;
    unsigned char *c = calloc(1, b->code_size);
    memcpy(c, "\x7f" "ELF", 4);
    uint64_t h = text ? XXH3_64bits(text, size) : 0;
    memcpy(c + 64, &h, sizeof h);
    free(text);
    b->code = c;
    kpc_names_encode(NULL, NULL, 0, &b->names, &b->names_size);
    b->deps = calloc(1, sizeof *b->deps);
    b->deps[0] = strdup(path);
    b->num_deps = 1;
    return KPC_OK;
}

static const kpc_platform dep_platform = {
    .name = "dep",
    .identity = dep_identity,
    .target_normalize = dep_normalize,
    .compile = dep_compile,
};

#define VERSIONS 4
static uint64_t version_hash[VERSIONS]; /* of "version V\n", set before the threads start */

typedef struct hitter {
    kpc_context *ctx;
    kpc_source src;
    _Atomic int *version; /* stored after the file holds that version */
    _Atomic bool *stop;
    unsigned gets, stale;
} hitter;

static void *hit_loop(void *arg)
{
    hitter *h = arg;
    while (!atomic_load(h->stop)) {
        int before = atomic_load(h->version); /* the file is at least this new during the get */
        kpc_program *p = NULL;
        if (kpc_program_get(h->ctx, &h->src, &p) != KPC_OK) {
            h->stale++;
            continue;
        }
        size_t size;
        const unsigned char *code = kpc_program_code(p, &size);
        uint64_t got;
        memcpy(&got, code + 64, sizeof got);
        /* a get that began after a version was written never returns an older one */
        bool fresh = false;
        for (int v = before; v < VERSIONS; v++)
            fresh |= got == version_hash[v];
        h->stale += !fresh;
        h->gets++;
        kpc_program_release(p);
    }
    return NULL;
}

START_TEST(threads_see_a_header_change)
{
    kpc_platform_set(&dep_platform);
    char header[4200], code[4400];
    put("dep.h", "version 0\n", header, sizeof header);
    snprintf(code, sizeof code, "kernel\n// dep=%s\n", header);
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = NULL;
    ck_assert_int_eq(kpc_context_create_for_target(c, "fake", &ctx), KPC_OK);
    for (int v = 0; v < VERSIONS; v++) {
        char text[32];
        snprintf(text, sizeof text, "version %d\n", v);
        version_hash[v] = XXH3_64bits(text, strlen(text));
    }
    _Atomic int version = 0;
    _Atomic bool stop = false;
    usleep(1100 * 1000); /* old enough to be cached */
    hitter h[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        h[i] = (hitter){.ctx = ctx, .src = ts_src(code, "dep.hip"), .version = &version, .stop = &stop};
        ck_assert_int_eq(pthread_create(&t[i], NULL, hit_loop, &h[i]), 0);
    }
    for (int v = 1; v < VERSIONS; v++) {
        usleep(300 * 1000);
        char text[32], tmp[4300];
        snprintf(text, sizeof text, "version %d\n", v);
        /* whole, by rename: a compile never reads it half written (that is a torn read,
         * not a stale cache) */
        snprintf(tmp, sizeof tmp, "%s.tmp", header);
        ts_write_file(tmp, text, strlen(text));
        ck_assert_int_eq(rename(tmp, header), 0);
        atomic_store(&version, v);
        usleep(1100 * 1000); /* this version gets cached, and hit */
    }
    usleep(300 * 1000);
    atomic_store(&stop, true);
    unsigned gets = 0, stale = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        gets += h[i].gets;
        stale += h[i].stale;
    }
    ck_assert_uint_eq(stale, 0);
    ck_assert_uint_gt(gets, 100);
    /* each version was compiled, and hits were served in between: far fewer compiles than gets */
    unsigned compiles = atomic_load(&dep_compiles);
    ck_assert_uint_ge(compiles, 4);
    ck_assert_uint_lt(compiles, gets / 4);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    kpc_platform_set(NULL);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("manifest");
    TCase *tc = tcase_create("manifest");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, depfile_real_shape);
    tcase_add_test(tc, depfile_escapes);
    tcase_add_test(tc, record_and_match);
    tcase_add_test(tc, record_refuses_recent);
    tcase_add_test(tc, symlinked_header);
    tcase_add_test(tc, encode_decode);
    tcase_add_test(tc, entries_replace_and_cap);
    tcase_add_test(tc, needs_cwd);
    tcase_add_test(tc, include_scan);
    tcase_add_test(tc, threads_see_a_header_change);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return ts_run_suite(suite());
}
