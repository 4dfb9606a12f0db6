/*
 * test_core_compile.c - the core library through real compiles: the
 * compile path (targets, options, headers, name expressions, lowered names, logs), the
 * key over every input (and the working directory in it only where it counts, by each
 * compiler's rule), the compiler identity.
 */
#define _GNU_SOURCE
#include "support.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/request.h"
#include "base/hash.h"
#include "core_support.h"

START_TEST(compiles_real_code_objects)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    const char *targets[] = {ts_target(), ts_target2()};
    void *first[2];
    size_t first_size[2];
    for (int t = 0; t < 2; t++) {
        kpc_context *ctx = NULL;
        ck_assert_int_eq(kpc_context_create_for_target(c, targets[t], &ctx), KPC_OK);
        ck_assert_str_eq(kpc_context_target(ctx), targets[t]);
        for (int i = 0; i < 2; i++) {
            kpc_source src = ts_src(ts_kernel_source(i), "k.hip");
            size_t size;
            uint64_t t0 = kpc__now_ns();
            void *code = ts_get_code(ctx, &src, &size);
            if (t == 0 && i == 0)
                printf("one compile: %.1f ms (%zu bytes)\n", (double)(kpc__now_ns() - t0) / 1e6, size);
            ck_assert_msg(ts_is_code_object(code, size), "not a code object for %s", targets[t]);
            if (i == 0) {
                first[t] = code;
                first_size[t] = size;
            } else
                free(code);
        }
        kpc_context_destroy(ctx);
    }
    /* two targets, one source: two different objects */
    ck_assert(first_size[0] != first_size[1] || memcmp(first[0], first[1], first_size[0]) != 0);
    free(first[0]);
    free(first[1]);
    kpc_stats st = stats_of(c);
    ck_assert_uint_eq(st.builds, 4);
    ck_assert_uint_eq(st.mem_misses, 4);
    kpc_cache_close(c);
}
END_TEST

START_TEST(memory_hit_returns_the_same_program)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source src = ts_src(ts_kernel_source(3), "k3.hip");
    kpc_program *a, *b;
    ck_assert_int_eq(kpc_program_get(ctx, &src, &a), KPC_OK);
    enum { N = 100000 };
    uint64_t t0 = kpc__now_ns();
    int failures = 0; /* no ck_assert in the loop: each one writes to Check's pipe */
    for (int i = 0; i < N; i++) {
        failures += kpc_program_get(ctx, &src, &b) != KPC_OK;
        kpc_program_release(b);
    }
    printf("in-memory hit: %.0f ns\n", (double)(kpc__now_ns() - t0) / N);
    ck_assert_int_eq(failures, 0);
    ck_assert_int_eq(kpc_program_get(ctx, &src, &b), KPC_OK);
    ck_assert_ptr_eq(a, b);
    kpc_stats st = stats_of(c);
    ck_assert_uint_eq(st.builds, 1);
    ck_assert_uint_eq(st.mem_hits, N + 1);
    kpc_program_release(a);
    kpc_program_release(b);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

START_TEST(options_and_headers_change_the_object)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    const char *code = "#include \"scale.h\"\n"
                       "extern \"C\" __global__ void k(float *a) { a[threadIdx.x] *= SCALE * OFFSET; }\n";
    const char *hn[] = {"scale.h"}, *h1[] = {"#define SCALE 3.0f\n"}, *h2[] = {"#define SCALE 5.0f\n"};
    const char *o1[] = {"-DOFFSET=2.0f"}, *o2[] = {"-DOFFSET=7.0f"};
    kpc_source s = ts_src(code, "scaled.hip");
    s.header_names = hn;
    s.num_headers = 1;
    s.num_options = 1;
    void *obj[3];
    size_t size[3];
    s.header_sources = h1, s.options = o1;
    obj[0] = ts_get_code(ctx, &s, &size[0]);
    s.header_sources = h2, s.options = o1;
    obj[1] = ts_get_code(ctx, &s, &size[1]);
    s.header_sources = h1, s.options = o2;
    obj[2] = ts_get_code(ctx, &s, &size[2]);
    for (int i = 0; i < 3; i++)
        ck_assert(ts_is_code_object(obj[i], size[i]));
    ck_assert(size[0] != size[1] || memcmp(obj[0], obj[1], size[0]) != 0);
    ck_assert(size[0] != size[2] || memcmp(obj[0], obj[2], size[0]) != 0);
    ck_assert_uint_eq(stats_of(c).builds, 3);
    for (int i = 0; i < 3; i++)
        free(obj[i]);
    /* an option that sets the target is refused: the context decides it */
    const char *arch[] = {"--gpu-architecture=gfx906"};
    s.options = arch;
    kpc_program *p = NULL;
    ck_assert_int_eq(kpc_program_get(ctx, &s, &p), KPC_E_INVALID);
    ck_assert_ptr_null(p);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

START_TEST(lowered_names_of_templates)
{
    const char *code = "template<typename T> __global__ void scale(T *a, T s) { a[threadIdx.x] *= s; }\n"
                       "namespace ns { template<int N> __global__ void fill(int *a) { a[threadIdx.x] = N; } }\n";
    const char *exprs[] = {"scale<float>", "scale<int>", "ns::fill<7>"};
    kpc_source s = ts_src(code, "templates.hip");
    s.name_expressions = exprs;
    s.num_name_expressions = 3;
    char lowered[3][128];
    for (int round = 0; round < 2; round++) { /* round 1: a new cache handle reads the disk */
        kpc_cache *c = ts_open(dir, 0, 0);
        kpc_context *ctx = ts_context(c);
        kpc_program *p;
        ck_assert_int_eq(kpc_program_get(ctx, &s, &p), KPC_OK);
        for (int i = 0; i < 3; i++) {
            const char *low = kpc_program_lowered_name(p, exprs[i]);
            ck_assert_ptr_nonnull(low);
            ck_assert_msg(strncmp(low, "_Z", 2) == 0, "%s lowered to %s", exprs[i], low);
            if (round == 0)
                snprintf(lowered[i], sizeof lowered[i], "%s", low);
            else
                ck_assert_str_eq(low, lowered[i]);
        }
        ck_assert_str_eq(lowered[0], "_Z5scaleIfEvPT_S0_");
        ck_assert_str_eq(lowered[1], "_Z5scaleIiEvPT_S0_");
        ck_assert_str_eq(lowered[2], "_ZN2ns4fillILi7EEEvPi");
        ck_assert_ptr_null(kpc_program_lowered_name(p, "scale<double>"));
        ck_assert_ptr_null(kpc_program_lowered_name(p, NULL));
        ck_assert_ptr_null(kpc_program_lowered_name(NULL, "scale<float>"));
        kpc_stats st = stats_of(c);
        ck_assert_uint_eq(st.builds, round == 0 ? 1 : 0);
        ck_assert_uint_eq(st.disk_hits, round == 0 ? 0 : 1);
        kpc_program_release(p);
        kpc_context_destroy(ctx);
        kpc_cache_close(c);
    }
}
END_TEST

START_TEST(compile_error_gives_the_log)
{
    /* without the host index: the index shares a fresh failure host-wide (test_index_*) */
    kpc_cache *c = ts_open(dir, KPC_NO_SHM, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source s = ts_src(ts_bad_source(), "broken.hip");
    kpc_program *p = (kpc_program *)1;
    ck_assert_int_eq(kpc_program_get(ctx, &s, &p), KPC_E_COMPILE);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(kpc_last_log(), "undeclared_thing") != NULL, "log: %s", kpc_last_log());
    /* a later request tries again */
    ck_assert_int_eq(kpc_program_get(ctx, &s, &p), KPC_E_COMPILE);
    ck_assert_uint_eq(stats_of(c).build_failures, 2);
    /* a good request clears nothing it should not, and the log is per request */
    kpc_source good = ts_src(ts_kernel_source(0), "k0.hip");
    ck_assert_int_eq(kpc_program_get(ctx, &good, &p), KPC_OK);
    kpc_program_release(p);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

/* ---- the key ---- */
START_TEST(key_covers_every_input)
{
    uint8_t id[16] = {1}, id2[16] = {2};
    kpc_source v[TS_REQUEST_VARIANTS + 2];
    ts_request_variants(v);
    kpc_source base = v[0];
    v[9] = v[10] = base;
    v[9].code = "codex", v[9].code_len = 4; /* only the first 4 bytes count */
    v[10].name = NULL;
    kpc_key k[16];
    for (int i = 0; i < 11; i++)
        kpc_key_compute(id, "amd", "gfx90a", &v[i], &k[i]);
    kpc_key_compute(id2, "amd", "gfx90a", &base, &k[11]);
    kpc_key_compute(id, "amd", "gfx906", &base, &k[12]);
    kpc_key_compute(id, "nvidia", "gfx90a", &base, &k[13]);
    kpc_key_compute(id, "amd", "gfx90a", &base, &k[14]);
    ck_assert_mem_eq(k[14].bytes, k[0].bytes, 16); /* deterministic */
    ck_assert_mem_eq(k[9].bytes, k[0].bytes, 16);  /* code_len honoured */
    for (int i = 0; i < 14; i++)
        for (int j = i + 1; j < 14; j++)
            if (i != 9 && j != 9 && !(i == 0 && j == 9))
                ck_assert_msg(memcmp(k[i].bytes, k[j].bytes, 16) != 0, "keys %d and %d collide", i, j);
    char hex[KPC_KEY_HEX];
    kpc_key_hex(&k[0], hex);
    kpc_key back;
    ck_assert(kpc_key_parse(hex, &back));
    ck_assert_mem_eq(back.bytes, k[0].bytes, 16);
    ck_assert(!kpc_key_parse("zz", &back));
}
END_TEST

/* The request path computes its key once, the working directory given or not: the key
 * of a request read (kpc_key_compute_read) is the bytes kpc_key_compute gives, with the
 * directory's digest exactly where it counts (a relative -I), never elsewhere. */
START_TEST(key_read_once_holds_the_directory_only_where_it_counts)
{
    uint8_t id[16] = {1}, cwd[16];
    kpc_key_prefix pre;
    kpc_key_prefix_init(&pre, id, "amd", "gfx90a");
    kpc__cwd_digest(cwd);
    const char *abs[] = {"-I/abs/headers"}, *rel[] = {"-I./headers"};
    kpc_source s = ts_src("#include \"h.h\"\ncode", "n.hip");
    kpc_key without, with, full;
    s.options = abs, s.num_options = 1;
    ck_assert(!kpc_request_needs_cwd(&s, pre.options));
    kpc_key_compute_read(&pre, &s, NULL, &without);
    kpc_key_compute(id, "amd", "gfx90a", &s, &full);
    ck_assert_mem_eq(without.bytes, full.bytes, 16);
    s.options = rel;
    ck_assert(kpc_request_needs_cwd(&s, pre.options));
    kpc_key_compute_read(&pre, &s, NULL, &without);
    kpc_key_compute_read(&pre, &s, cwd, &with);
    kpc_key_compute(id, "amd", "gfx90a", &s, &full);
    ck_assert(memcmp(without.bytes, full.bytes, 16) != 0); /* the directory counts */
    ck_assert_mem_eq(with.bytes, full.bytes, 16);
}
END_TEST

#ifndef KPC_PLATFORM_NVIDIA
START_TEST(identity_is_real)
{
    /* no remembered identity (NULL dir): computed from the loaded libraries' build ids */
    uint8_t a[16], b[16], c[16];
    char desc[512];
    ck_assert_int_eq(kpc_platform_builtin.identity(NULL, a, desc, sizeof desc), KPC_OK);
#ifdef KPC_PLATFORM_COMGR /* comgr alone: no HIP runtime, no hipRTC builtins */
    ck_assert_msg(strstr(desc, "libamd_comgr:") && strstr(desc, "libLLVM") && !strstr(desc, "libamdhip64:"),
                  "identity: %s", desc);
#else
    ck_assert_msg(strstr(desc, "libamdhip64:") && strstr(desc, "libamd_comgr:") &&
                  strstr(desc, "libLLVM") && strstr(desc, "libhiprtc-builtins:"), "identity: %s", desc);
#endif
    /* remembered in the cache dir, then recalled without loading anything new */
    mkdir(dir, 0700);
    kpc_root *root;
    ck_assert_int_eq(kpc_root_open(dir, &root), KPC_OK);
    ck_assert_int_eq(kpc_platform_builtin.identity(root, b, desc, sizeof desc), KPC_OK);
    ck_assert_mem_eq(a, b, 16);
    ck_assert_int_eq(kpc_platform_builtin.identity(root, b, desc, sizeof desc), KPC_OK);
    ck_assert_str_eq(desc, ""); /* recalled: nothing was hashed */
    ck_assert_mem_eq(a, b, 16);
    /* hipRTC's hidden options change every key (under hipRTC), but not the identity records carry (so
     * `kpc prune --stale` run with another environment never calls objects stale) */
    setenv("GPU_ENABLE_WAVE32_MODE", "1", 1);
    ck_assert_int_eq(kpc_platform_builtin.identity(root, c, desc, sizeof desc), KPC_OK);
    ck_assert_mem_eq(a, c, 16);
    kpc_root_close(root);
    kpc_cache *cache = ts_open(dir, 0, 0);
    kpc_context *wave32, *plain, *empty;
    ck_assert_int_eq(kpc_context_create_for_target(cache, "gfx1030", &wave32), KPC_OK);
    unsetenv("GPU_ENABLE_WAVE32_MODE");
    ck_assert_int_eq(kpc_context_create_for_target(cache, "gfx1030", &plain), KPC_OK);
    setenv("GPU_ENABLE_WAVE32_MODE", "", 1);
    ck_assert_int_eq(kpc_context_create_for_target(cache, "gfx1030", &empty), KPC_OK);
    unsetenv("GPU_ENABLE_WAVE32_MODE");
    ck_assert_mem_eq(wave32->compiler_id, a, 16);
    ck_assert_mem_eq(plain->compiler_id, a, 16);
    kpc_source src = {.code = "extern \"C\" __global__ void k(int *p) { *p = 1; }", .name = "k.hip"};
    kpc_key kw, kp;
    ts_key(wave32, &src, &kw);
    ts_key(plain, &src, &kp);
#ifdef KPC_PLATFORM_COMGR /* hipRTC's environment, which comgr alone never reads: one key */
    ck_assert_mem_eq(wave32->key_id, plain->key_id, 16);
    ck_assert_mem_eq(empty->key_id, plain->key_id, 16);
    ck_assert_mem_eq(kw.bytes, kp.bytes, 16);
#else
    ck_assert(memcmp(wave32->key_id, plain->key_id, 16) != 0);
    ck_assert(memcmp(empty->key_id, plain->key_id, 16) != 0); /* set but empty is not unset */
    ck_assert(memcmp(kw.bytes, kp.bytes, 16) != 0);
#endif
    kpc_context_destroy(wave32);
    kpc_context_destroy(plain);
    kpc_context_destroy(empty);
    kpc_cache_close(cache);
}
END_TEST
#endif

/* The working-directory rule of a request (core/request.h, kpc_request_needs_cwd), per
 * compiler: a relative path to search or read counts; under NVRTC a relative source name
 * whose texts include something counts too. */
START_TEST(working_directory_counts_where_a_relative_path_is_read)
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
        ck_assert_msg(kpc_request_needs_cwd(&s, kpc_options_for("amd")) == cases[i].want, "case %zu", i);
    }
    /* NVRTC searches the source's directory: a relative name counts, unless told not to
     * or the texts include nothing */
    kpc_source s = ts_src("x", "k.cu");
    const kpc_option_table *nv = kpc_options_for("nvidia");
    ck_assert(!kpc_request_needs_cwd(&s, nv));
    s = ts_src("#include \"h.h\"\nx", "k.cu");
    ck_assert(!kpc_request_needs_cwd(&s, kpc_options_for("amd")));
    ck_assert(kpc_request_needs_cwd(&s, nv));
    const char *hs[] = {"#include \"g.h\"\n"}, *hn[] = {"h.h"};
    kpc_source sh = ts_src("x", "k.cu");
    sh.header_sources = hs;
    sh.header_names = hn;
    sh.num_headers = 1;
    ck_assert(kpc_request_needs_cwd(&sh, nv));
    const char *nsi[] = {"--no-source-include"};
    s.options = nsi;
    s.num_options = 1;
    ck_assert(!kpc_request_needs_cwd(&s, nv));
    s = ts_src("#include \"h.h\"\nx", "/abs/k.cu");
    ck_assert(!kpc_request_needs_cwd(&s, nv));
}
END_TEST

/* The working directory enters a key as its whole path's XXH3-128: one short, one of
 * 650 bytes (a deep build tree). */
START_TEST(working_directory_digest_is_of_its_whole_path)
{
    char back[4200], *root = ts_tmpdir(), path[4200];
    ck_assert_ptr_nonnull(getcwd(back, sizeof back));
    ck_assert_int_eq(mkdir(root, 0700), 0);
    ck_assert_ptr_nonnull(realpath(root, path)); /* getcwd spells it resolved */
    size_t n = strlen(path);
    for (int i = 0; n < 600; i++) {
        n += (size_t)snprintf(path + n, sizeof path - n, "/a-directory-name-of-forty-characters-%02d", i);
        ck_assert_int_eq(mkdir(path, 0700), 0);
    }
    const char *dirs[] = {root, path};
    for (int i = 0; i < 2; i++) {
        char want_path[4200];
        ck_assert_int_eq(chdir(dirs[i]), 0);
        ck_assert_ptr_nonnull(realpath(".", want_path));
        uint8_t got[16], want[16];
        kpc__cwd_digest(got);
        XXH128_canonicalFromHash((XXH128_canonical_t *)want, XXH3_128bits(want_path, strlen(want_path)));
        ck_assert_msg(memcmp(got, want, 16) == 0, "the digest of %s (%zu bytes)", want_path, strlen(want_path));
    }
    ck_assert_int_eq(chdir(back), 0);
    ts_cleanup(root);
}
END_TEST

int main(void)
{
    const TTest *tests[] = {compiles_real_code_objects, memory_hit_returns_the_same_program,
                            options_and_headers_change_the_object, lowered_names_of_templates,
                            compile_error_gives_the_log, key_covers_every_input,
                            key_read_once_holds_the_directory_only_where_it_counts,
                            working_directory_counts_where_a_relative_path_is_read,
                            working_directory_digest_is_of_its_whole_path,
#ifndef KPC_PLATFORM_NVIDIA
                            identity_is_real,
#endif
                            NULL};
    return ts_main_case("core", "compile", 120, setup, teardown, tests);
}
