/*
 * test_gpu_platform.c - the NVIDIA platform's compile-only specifics
 * (NVIDIA builds): NVRTC targets and suffixes, cubin against PTX, the compiler identity,
 * arch options, no driver. Needs no GPU.
 */
#define _GNU_SOURCE
#include "support.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu_support.h"

/* ---- the NVIDIA platform without a GPU ------------------------------------------------ */
#ifdef KPC_PLATFORM_NVIDIA
START_TEST(nvrtc_targets)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = NULL;
    /* well formed but not an architecture NVRTC has: refused with the list */
    ts_log_begin(KPC_LOG_ERROR);
    kpc_status s = kpc_context_create_for_target(c, "sm_91", &ctx);
    char *log = ts_log_end();
    ck_assert_int_eq(s, KPC_E_INVALID);
    ck_assert_ptr_null(ctx);
    ck_assert_msg(strstr(log, "not supported by NVRTC") && strstr(log, " 90") && strstr(log, "80"),
                  "log: %s", log);
    free(log);
    const char *good[] = {"sm_90", "sm_80", "compute_90", "sm_90a", "compute_90a"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        ck_assert_msg(kpc_context_create_for_target(c, good[i], &ctx) == KPC_OK, "%s", good[i]);
        ck_assert_str_eq(kpc_context_target(ctx), good[i]);
        kpc_context_destroy(ctx);
    }
    /* a suffix the architecture lacks: NVRTC is asked */
    const char *bad[] = {"sm_80a", "sm_9", "sm_090", "sm_1000", "sm_90b", "compute_90aa", "SM_90",
                         "sm90", "gfx90a", "sm_90:xnack+", "compute_91"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ctx = (kpc_context *)1;
        ck_assert_msg(kpc_context_create_for_target(c, bad[i], &ctx) == KPC_E_INVALID, "%s", bad[i]);
        ck_assert_ptr_null(ctx);
    }
    kpc_cache_close(c);
    /* a later process with a warm target list: the same verdicts */
    c = ts_open(dir, 0, 0);
    ck_assert_int_eq(kpc_context_create_for_target(c, "sm_91", &ctx), KPC_E_INVALID);
    ck_assert_int_eq(kpc_context_create_for_target(c, "sm_80a", &ctx), KPC_E_INVALID);
    ck_assert_int_eq(kpc_context_create_for_target(c, "sm_90a", &ctx), KPC_OK);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

START_TEST(cubin_and_ptx)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *sm = NULL, *ptx = NULL, *sma = NULL;
    ck_assert_int_eq(kpc_context_create_for_target(c, "sm_90", &sm), KPC_OK);
    ck_assert_int_eq(kpc_context_create_for_target(c, "compute_90", &ptx), KPC_OK);
    ck_assert_int_eq(kpc_context_create_for_target(c, "sm_90a", &sma), KPC_OK);
    kpc_source s = axpby_src();
    size_t n1, n2, n3;
    unsigned char *cubin = ts_get_code(sm, &s, &n1);
    char *text = ts_get_code(ptx, &s, &n2);
    unsigned char *cubin_a = ts_get_code(sma, &s, &n3);
    /* a cubin: ELF for EM_CUDA */
    ck_assert(ts_is_code_object(cubin, n1));
    ck_assert_mem_eq(cubin, "\x7f" "ELF", 4);
    ck_assert_uint_eq(cubin[18] | cubin[19] << 8, 190);
    ck_assert(ts_is_code_object(cubin_a, n3));
    ck_assert(n1 != n3 || memcmp(cubin, cubin_a, n1) != 0);
    /* PTX: text, NUL-terminated (cuModuleLoadData takes it as is), for that target */
    ck_assert(ts_is_code_object(text, n2));
    ck_assert_int_eq(text[n2 - 1], '\0');
    ck_assert_uint_eq(strlen(text), n2 - 1);
    ck_assert_msg(strstr(text, ".target sm_90") != NULL, "PTX: %.200s", text);
    ck_assert_msg(strstr(text, ".entry _Z5axpbyIdEviT_PKS0_S0_PS0_") != NULL, "PTX: %.2000s", text);
    /* lowered names come from NVRTC */
    kpc_program *p;
    ck_assert_int_eq(kpc_program_get(sm, &s, &p), KPC_OK);
    ck_assert_str_eq(kpc_program_lowered_name(p, "axpby<float>"), "_Z5axpbyIfEviT_PKS0_S0_PS0_");
    ck_assert_str_eq(kpc_program_lowered_name(p, "axpby<int>"), "_Z5axpbyIiEviT_PKS0_S0_PS0_");
    kpc_program_release(p);
    ck_assert_uint_eq(stats_of(c).builds, 3);
    kpc_context_destroy(sm);
    kpc_context_destroy(ptx);
    kpc_context_destroy(sma);
    kpc_cache_close(c);
    /* another process reads both back, byte for byte, and compiles nothing */
    c = ts_open(dir, 0, 0);
    ck_assert_int_eq(kpc_context_create_for_target(c, "sm_90", &sm), KPC_OK);
    ck_assert_int_eq(kpc_context_create_for_target(c, "compute_90", &ptx), KPC_OK);
    size_t m1, m2;
    void *again1 = ts_get_code(sm, &s, &m1), *again2 = ts_get_code(ptx, &s, &m2);
    ck_assert_uint_eq(m1, n1);
    ck_assert_mem_eq(again1, cubin, n1);
    ck_assert_uint_eq(m2, n2);
    ck_assert_mem_eq(again2, text, n2);
    kpc_stats st = stats_of(c);
    ck_assert_uint_eq(st.builds, 0);
    ck_assert_uint_eq(st.disk_hits, 2);
    free(again1);
    free(again2);
    free(cubin);
    free(text);
    free(cubin_a);
    kpc_context_destroy(sm);
    kpc_context_destroy(ptx);
    kpc_cache_close(c);
}
END_TEST

START_TEST(identity_names_nvrtc)
{
    uint8_t a[16], b[16];
    char desc[512];
    ck_assert_int_eq(kpc_platform_builtin.identity(NULL, a, desc, sizeof desc), KPC_OK);
    ck_assert_msg(strncmp(desc, "nvrtc ", 6) == 0 && strstr(desc, "libnvrtc.so:") &&
                  strstr(desc, "libnvrtc-builtins.so:"), "identity: %s", desc);
    bool driver = strstr(desc, " driver ") != NULL;
    printf("identity: %s\n", desc);
    /* remembered with the files it came from, then recalled without loading anything */
    mkdir(dir, 0700);
    kpc_root *root;
    ck_assert_int_eq(kpc_root_open(dir, &root), KPC_OK);
    ck_assert_int_eq(kpc_platform_builtin.identity(root, b, desc, sizeof desc), KPC_OK);
    ck_assert_mem_eq(a, b, 16);
    ck_assert_int_eq(kpc_platform_builtin.identity(root, b, desc, sizeof desc), KPC_OK);
    ck_assert_str_eq(desc, "");
    ck_assert_mem_eq(a, b, 16);
    kpc_root_close(root);
    char path[4200];
    snprintf(path, sizeof path, "%s/v1/compiler-nvidia.id", dir);
    size_t size;
    char *text = ts_read_file(path, &size);
    ck_assert_ptr_nonnull(text);
    ck_assert_msg(strstr(text, "libnvrtc.so") && strstr(text, "libnvrtc-builtins.so"), "%s", text);
    ck_assert(driver == (strstr(text, "libcuda.so") != NULL));
    free(text);
}
END_TEST

START_TEST(options_on_nvrtc)
{
    kpc_cache *c = ts_open(dir, KPC_NO_SHM, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source s = saxpy_src();
    kpc_program *p = (kpc_program *)1;
    /* the context decides the architecture */
    const char *arch[][1] = {{"-arch=sm_80"}, {"--gpu-architecture=compute_80"}, {"-arch"}};
    for (int i = 0; i < 3; i++) {
        s.options = arch[i], s.num_options = 1;
        ck_assert_int_eq(kpc_program_get(ctx, &s, &p), KPC_E_INVALID);
        ck_assert_ptr_null(p);
    }
    /* an option NVRTC does not know is the request's compile error, with NVRTC's log */
    const char *unknown[] = {"--no-such-option"};
    s.options = unknown;
    ck_assert_int_eq(kpc_program_get(ctx, &s, &p), KPC_E_COMPILE);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(kpc_last_log(), "no-such-option") != NULL, "log: %s", kpc_last_log());
    /* NVRTC's own options change the object */
    const char *fast[] = {"--use_fast_math"}, *plain[] = {"-DUNUSED=1"};
    size_t n1, n2;
    s.options = plain;
    void *o1 = ts_get_code(ctx, &s, &n1);
    s.options = fast;
    s.code = "extern \"C\" __global__ void k(float *a) { a[threadIdx.x] = sinf(a[threadIdx.x]) / a[1]; }\n";
    void *o2 = ts_get_code(ctx, &s, &n2);
    s.options = plain;
    size_t n3;
    void *o3 = ts_get_code(ctx, &s, &n3);
    ck_assert(n2 != n3 || memcmp(o2, o3, n2) != 0);
    free(o1);
    free(o2);
    free(o3);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

START_TEST(no_driver_means_no_device)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h != NULL) {
        printf("an NVIDIA driver is installed: the GPU suite covers device contexts\n");
        dlclose(h);
        return;
    }
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = (kpc_context *)1;
    ts_log_begin(KPC_LOG_ERROR);
    kpc_status s = kpc_context_create(c, 0, &ctx);
    char *log = ts_log_end();
    ck_assert_int_eq(s, KPC_E_NO_DEVICE);
    ck_assert_ptr_null(ctx);
    ck_assert_msg(strstr(log, "no GPU") && strstr(log, "libcuda.so.1"), "log: %s", log);
    free(log);
    /* compile-only contexts do not need it */
    ctx = ts_context(c);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST
#endif

int main(void)
{
    const TTest *tests[] = {
        nvrtc_targets,
        cubin_and_ptx,
        identity_names_nvrtc,
        options_on_nvrtc,
        no_driver_means_no_device,
        NULL,
    };
    return ts_main_case("platform", "compile-only", 120, setup, teardown, tests);
}
