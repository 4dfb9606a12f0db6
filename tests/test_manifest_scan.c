/*
 * test_manifest_scan.c - how the platforms learn the files a compile read: the
 * make-format dependency file clang writes (parsed, and filtered by the AMD platform) and
 * the include scan NVRTC needs (it has no dependency output), and the option rows those
 * rest on (read on every request). What is then recorded and checked: test_manifest.c.
 */
#define _GNU_SOURCE
#ifndef KPC_PLATFORM_NVIDIA
#include "platform/amd_deps.h" /* built on the AMD platform only */
#endif
#include "platform/depfile.h"
#include "platform/include_scan.h"
#include "platform/options.h"
#include "manifest_support.h"
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Write text to <work>/rel; its path in path. */
static void put_at(const char *rel, const char *text, char *path, size_t cap)
{
    mf_put(rel, text);
    snprintf(path, cap, "%s/%s", mf_work, rel);
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
    put_at("dep.d", text, path, sizeof path);
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
    put_at("empty.d", "", path, sizeof path);
    ck_assert_int_eq(kpc_amd_deps_collect(path, &paths, &n), KPC_E_NOT_FOUND);
    /* a shape that is not comgr's: unknown too, never a guess */
    put_at("odd.d", "x.o: y.h z.h\n", path, sizeof path);
    ck_assert_int_eq(kpc_amd_deps_collect(path, &paths, &n), KPC_E_NOT_FOUND);
    /* comgr's shape under another target than kpc's: not the file kpc asked for */
    put_at("other.d", "/tmp/comgr-1/output/a.bc: /tmp/comgr-1/input/a.hip h.h\n", path, sizeof path);
    ck_assert_int_eq(kpc_amd_deps_collect(path, &paths, &n), KPC_E_NOT_FOUND);
#endif
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
    snprintf(inc, sizeof inc, "%s/inc", mf_work);
    snprintf(sub, sizeof sub, "%s/inc/sub", mf_work);
    ck_assert_int_eq(kpc__mkdir_p(sub, 0700), 0);
    put_at("inc/a.h", "#pragma once\n  #  include \"sub/b.h\"\n#include <mem.h>\n", p, sizeof p);
    put_at("inc/sub/b.h", "#include \"c.h\"\n#include <absent.h>\n", p, sizeof p);
    put_at("inc/sub/c.h", "#include \"../a.h\"\n", p, sizeof p); /* a cycle back to a.h */
    put_at("inc/pre.h", "#define PRE 1\n", p, sizeof p);
    put_at("mem.h", "on disk but given in memory\n", p, sizeof p);
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
    put_at("inc/sub/b.h", "#include \"c.h\"\n", p, sizeof p);
    ck_assert_int_eq(kpc_include_scan(&s, &paths, &n, &unresolved), KPC_OK);
    ck_assert(!unresolved);
    kpc_depfile_paths_free(paths, n);
}
END_TEST

/* ---- the option rows, read on every request ----------------------------------------- */
/* The request asks every option whether it may name a path or the target before walking
 * a row (a look-up of its second byte): every spelling of a path or target row of either
 * table still gets its class, and options of no such row are answered at once. */
START_TEST(option_rows_read_on_their_second_byte)
{
    static const char *const targets[] = {"-march=gfx90a", "-mcpu=gfx90a", "--offload-arch=gfx90a",
                                          "--amdgpu-target=gfx90a", "-arch", "-arch=sm_80",
                                          "--gpu-architecture=sm_80", "--gpu-architecture"};
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++)
        ck_assert_msg(kpc_option_sets_target(targets[i]), "%s", targets[i]);
    static const char *const others[] = {"-DN=4", "-std=c++17", "-O3", "-mtune=native", "-I/x", "-w",
                                         "-fgpu-rdc", "x", "-"};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        ck_assert_msg(!kpc_option_sets_target(others[i]), "%s", others[i]);
    /* the second bytes are written out in options.c: they are the rows' own */
    ck_assert(kpc_option_names_match_rows());
    const kpc_option_table *amd = kpc_options_for("amd"), *nv = kpc_options_for("nvidia");
    static const struct {
        const char *opt[2];
        bool nvidia;
        enum kpc_option_class cls;
        const char *value;
        size_t used;
    } cases[] = {
        {{"-I./inc", NULL}, false, KPC_OPTION_SEARCH_DIR, "./inc", 1},
        {{"-iquote", "q"}, false, KPC_OPTION_SEARCH_DIR, "q", 2},
        {{"-cxx-isystem", "c"}, false, KPC_OPTION_SEARCH_DIR, "c", 2},
        {{"--include-path=p", NULL}, false, KPC_OPTION_SEARCH_DIR, "p", 1},
        {{"-include", "f.h"}, false, KPC_OPTION_READ_FILE, "f.h", 2},
        {{"--sysroot=/r", NULL}, false, KPC_OPTION_PATH, "/r", 1},
        {{"-no-source-include", NULL}, true, KPC_OPTION_NO_SOURCE_DIR, NULL, 1},
        {{"-DX=1", NULL}, false, KPC_OPTION_OTHER, NULL, 1},
        {{"-std=c++17", NULL}, true, KPC_OPTION_OTHER, NULL, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kpc_option o;
        size_t n = cases[i].opt[1] ? 2 : 1;
        kpc_option_classify_path(cases[i].nvidia ? nv : amd, cases[i].opt, n, 0, &o);
        ck_assert_msg(o.cls == cases[i].cls && o.used == cases[i].used, "case %zu: class %d", i, (int)o.cls);
        if (cases[i].value)
            ck_assert_str_eq(o.value, cases[i].value);
        else
            ck_assert_ptr_null(o.value);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("manifest_scan");
    TCase *tc = tcase_create("manifest_scan");
    tcase_add_checked_fixture(tc, mf_setup, mf_teardown);
    tcase_add_test(tc, depfile_real_shape);
    tcase_add_test(tc, depfile_escapes);
    tcase_add_test(tc, include_scan);
    tcase_add_test(tc, option_rows_read_on_their_second_byte);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return ts_run_suite(suite());
}
