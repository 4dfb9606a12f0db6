/*
 * test_house_faults.c - the failures that must never be shared: the compile steps map
 * each failure to its status once; a source refused before any compiler runs (a first
 * byte of NUL: KPC_E_INVALID, no crash; the fake platform, real hipRTC and the tool) and
 * a compile that fails for a reason of one process's own (an unusable TMPDIR: real
 * hipRTC, and the fake platform).
 */
#define _GNU_SOURCE
#include "support.h"
#include "platform/compile.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "house_support.h"

/* ---- a failure of one process's own is not shared ------------------------------------ */
static int local_fault_child(int i, void *arg)
{
    (void)i, (void)arg;
    setenv("KPC_FAKE_LOCAL_FAULT", "1", 1);
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source src = ts_src("a healthy source", "h.hip");
    kpc_program *p = NULL;
    kpc_status s = kpc_program_get(ctx, &src, &p);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    return s == KPC_E_COMPILE ? 0 : 1;
}

START_TEST(local_fault_is_not_shared_fake)
{
    ts_fake_install();
    ck_assert_int_eq(ts_run_children(1, local_fault_child, NULL), 1);
    ck_assert_uint_eq(ts_fake_compiles(), 1);
    /* a healthy process right after (well within the 30 s a FAILED answer lasts) */
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source src = ts_src("a healthy source", "h.hip");
    size_t size;
    void *code = ts_get_code(ctx, &src, &size);
    ck_assert(ts_is_code_object(code, size));
    free(code);
    ck_assert_uint_eq(ts_fake_compiles(), 2);
    /* a real compile error, by contrast, is shared: a second process does not compile */
    kpc_source bad = ts_src("#error shared", "b.hip");
    kpc_program *p = NULL;
    ck_assert_int_eq(kpc_program_get(ctx, &bad, &p), KPC_E_COMPILE);
    ck_assert_uint_eq(ts_fake_compiles(), 3);
    kpc_context *ctx2 = ts_context(c);
    ck_assert_int_eq(kpc_program_get(ctx2, &bad, &p), KPC_E_COMPILE);
    ck_assert_str_eq(kpc_last_log(), "fake: #error in source\n");
    ck_assert_uint_eq(ts_fake_compiles(), 3);
    kpc_context_destroy(ctx2);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

/* A first byte of NUL is an empty source to every compiler, whatever code_len says: refused
 * before any compiler runs, on every platform (comgr, unlike hipRTC, would compile it) */
START_TEST(nul_first_byte_is_invalid_fake)
{
    ts_fake_install();
    static const char nul_src[] = {'\0', 'x'};
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source src = {.code = nul_src, .code_len = sizeof nul_src, .name = "z.hip"};
    kpc_program *p = (kpc_program *)1;
    ts_log_begin(KPC_LOG_ERROR);
    kpc_status s = kpc_program_get(ctx, &src, &p);
    char *log = ts_log_end();
    ck_assert_int_eq(s, KPC_E_INVALID);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(log, "its first byte is NUL") != NULL, "%s", log);
    free(log);
    ck_assert_uint_eq(ts_fake_compiles(), 0);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

#ifndef KPC_PLATFORM_NVIDIA /* hipRTC's behaviours: NVRTC takes these otherwise */
/* Through real hipRTC and the tool: TMPDIR pointing to a file makes hipRTC fail without
 * diagnostics; that process fails, and a healthy one right after builds (before, it got
 * KPC_E_COMPILE with an empty log for 30 s). */
START_TEST(broken_tmpdir_does_not_poison_real)
{
    const char *tool = getenv("KPC_TOOL");
    ck_assert_ptr_nonnull(tool);
    char parent[4096], src_path[4200], notdir[4200], env_tmp[4300], env_dir[4300];
    snprintf(parent, sizeof parent, "%s", dir);
    *strrchr(parent, '/') = '\0';
    snprintf(src_path, sizeof src_path, "%s/ok.hip", parent);
    snprintf(notdir, sizeof notdir, "%s/not-a-dir", parent);
    ts_write_file(src_path, ts_kernel_source(3), strlen(ts_kernel_source(3)));
    ts_write_file(notdir, "x", 1);
    snprintf(env_tmp, sizeof env_tmp, "TMPDIR=%s", notdir);
    snprintf(env_dir, sizeof env_dir, "KPC_CACHE_DIR=%s", dir);
    const char *argv[] = {tool, "compile", "--target", ts_target(), src_path, NULL};
    const char *broken[] = {env_tmp, env_dir, NULL};
    const char *healthy[] = {env_dir, NULL};
    char *out = NULL, *err = NULL;
    int rc = ts_exec(argv, broken, &out, &err);
    ck_assert_msg(rc == 1, "broken TMPDIR: exit %d\n%s\n%s", rc, out, err);
    ck_assert_ptr_nonnull(strstr(err, "KPC_E_COMPILE"));
    free(out);
    free(err);
    rc = ts_exec(argv, healthy, &out, &err);
    ck_assert_msg(rc == 0, "healthy process after a broken one: exit %d\n%s\n%s", rc, out, err);
    ck_assert_msg(strstr(out, "built") != NULL, "%s", out);
    free(out);
    free(err);
}
END_TEST

/* ---- a request the compiler refuses before compiling ---------------------------------- */
START_TEST(nul_first_byte_is_invalid_real)
{
    static const char nul_src[] = {'\0', 'x'};
    kpc_cache *c = ts_open(dir, 0, 0); /* the host index on */
    ck_assert_ptr_nonnull(c->index);
    kpc_context *ctx = ts_context(c);
    kpc_source src = {.code = nul_src, .code_len = sizeof nul_src, .name = "z.hip"};
    kpc_program *p = NULL;
    ck_assert_int_eq(kpc_program_get(ctx, &src, &p), KPC_E_INVALID);
    ck_assert_ptr_null(p);
    kpc_stats st = stats_of(c);
    ck_assert_uint_eq(st.host_build_failures, 0); /* nothing shared as FAILED */
    /* another process asking for the same key is told the same, not a shared failure */
    int status;
    pid_t pid = fork();
    if (pid == 0) {
        kpc_cache *c2 = ts_open(dir, 0, 0);
        kpc_context *ctx2 = ts_context(c2);
        kpc_program *p2 = NULL;
        kpc_status s = kpc_program_get(ctx2, &src, &p2);
        kpc_context_destroy(ctx2);
        kpc_cache_close(c2);
        _exit(s == KPC_E_INVALID ? 0 : 1);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    /* and the cache still works */
    kpc_source good = ts_src(ts_kernel_source(5), "g.hip");
    size_t size;
    void *code = ts_get_code(ctx, &good, &size);
    ck_assert(ts_is_code_object(code, size));
    free(code);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

START_TEST(nul_first_byte_tool_real)
{
    const char *tool = getenv("KPC_TOOL");
    ck_assert_ptr_nonnull(tool);
    char parent[4096], path[4200], env_dir[4300];
    snprintf(parent, sizeof parent, "%s", dir);
    *strrchr(parent, '/') = '\0';
    snprintf(path, sizeof path, "%s/z.hip", parent);
    ts_write_file(path, "\0x", 2);
    snprintf(env_dir, sizeof env_dir, "KPC_CACHE_DIR=%s", dir);
    const char *argv[] = {tool, "compile", "--target", ts_target(), path, NULL};
    const char *env[] = {env_dir, NULL};
    char *out = NULL, *err = NULL;
    int rc = ts_exec(argv, env, &out, &err);
    ck_assert_msg(rc == 1, "exit %d (139 is the crash)\n%s\n%s", rc, out, err);
    ck_assert_msg(strstr(err, "KPC_E_INVALID") != NULL, "%s", err);
    free(out);
    free(err);
}
END_TEST
#endif

/* ---- the shared compile steps: every failure's status, and no call on a missing program */
enum { CC_OK = 0, CC_NOMEM = 7, CC_COMPILE = 8, CC_REFUSED = 9 };
static struct {
    int create, compile; /* what those steps answer */
    const char *log;
    int log_calls;
} cc;

static int cc_create(void **prog, const char *code, const char *name, const kpc_source *src)
{
    (void)code, (void)name, (void)src;
    if (cc.create != CC_OK)
        return cc.create; /* as hipRTC's create does for a NUL first byte: no program */
    *prog = &cc;
    return CC_OK;
}
static int cc_add_name(void *prog, const char *expr) { (void)prog, (void)expr; return CC_OK; }
static int cc_compile(void *prog, int n, const char **opts)
{
    ck_assert_ptr_eq(prog, &cc);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(opts[0], "--arch=t1");
    return cc.compile;
}
static int cc_log_size(void *prog, size_t *size)
{
    ck_assert_ptr_eq(prog, &cc); /* never asked of a program that does not exist */
    cc.log_calls++;
    *size = strlen(cc.log);
    return CC_OK;
}
static int cc_log(void *prog, char *out)
{
    ck_assert_ptr_eq(prog, &cc);
    memcpy(out, cc.log, strlen(cc.log)); /* not terminated, as hipRTC's */
    return CC_OK;
}
static int cc_code_size(void *prog, const char *target, size_t *size)
{
    (void)prog, (void)target;
    *size = 4;
    return CC_OK;
}
static int cc_code(void *prog, const char *target, void *out)
{
    (void)prog, (void)target;
    memcpy(out, "CODE", 4);
    return CC_OK;
}
static int cc_lowered(void *prog, const char *expr, const char **out)
{
    (void)prog, (void)expr;
    *out = "lowered";
    return CC_OK;
}
static void cc_destroy(void **prog) { ck_assert_ptr_eq(*prog, &cc); *prog = NULL; }
static enum kpc_compile_class cc_classify(int r)
{
    return r == CC_OK ? KPC_COMPILE_OK : r == CC_NOMEM ? KPC_COMPILE_NOMEM : KPC_COMPILE_FAILED;
}
static const char *cc_error(int r) { return r == CC_NOMEM ? "OUT_OF_MEMORY" : "ERROR"; }

static const kpc_compiler fake_compiler = {
    .name = "fakeRTC", .arch_option = "--arch=", .default_name = "f.hip", .lock = NULL,
    .create = cc_create, .add_name = cc_add_name, .compile = cc_compile, .log_size = cc_log_size,
    .log = cc_log, .code_size = cc_code_size, .code = cc_code, .lowered = cc_lowered,
    .destroy = cc_destroy, .classify = cc_classify, .error_string = cc_error,
};

static kpc_status run_cc(int create, int compile, const char *log, kpc_build *b)
{
    cc.create = create, cc.compile = compile, cc.log = log, cc.log_calls = 0;
    kpc_source src = ts_src("x", NULL);
    return kpc_compile_run(&fake_compiler, "t1", &src, b);
}

START_TEST(compile_steps_map_failures_once)
{
    kpc_build b;
    /* success: code, names, the log */
    ck_assert_int_eq(run_cc(CC_OK, CC_OK, "fine", &b), KPC_OK);
    ck_assert_uint_eq(b.code_size, 4);
    ck_assert_mem_eq(b.code, "CODE", 4);
    ck_assert(kpc_names_valid(b.names, b.names_size));
    ck_assert_str_eq(b.log, "fine");
    kpc_platform_build_free(&b);
    /* refused before compiling: KPC_E_INVALID, no log read from a program never made */
    ck_assert_int_eq(run_cc(CC_REFUSED, CC_OK, "", &b), KPC_E_INVALID);
    ck_assert_int_eq(cc.log_calls, 0);
    ck_assert_ptr_null(b.code);
    kpc_platform_build_free(&b);
    /* out of memory, at create or at compile: KPC_E_NOMEM, never a compile error */
    ck_assert_int_eq(run_cc(CC_NOMEM, CC_OK, "", &b), KPC_E_NOMEM);
    kpc_platform_build_free(&b);
    ck_assert_int_eq(run_cc(CC_OK, CC_NOMEM, "", &b), KPC_E_NOMEM);
    kpc_platform_build_free(&b);
    /* a compile error with diagnostics: shared; without: local, with the error's name */
    ck_assert_int_eq(run_cc(CC_OK, CC_COMPILE, "f.hip:1: error: x\n", &b), KPC_E_COMPILE);
    ck_assert(!b.local);
    ck_assert_str_eq(b.log, "f.hip:1: error: x\n");
    kpc_platform_build_free(&b);
    ck_assert_int_eq(run_cc(CC_OK, CC_COMPILE, " \n", &b), KPC_E_COMPILE);
    ck_assert(b.local);
    ck_assert_str_eq(b.log, "fakeRTC: ERROR\n");
    ck_assert_ptr_null(b.code);
    kpc_platform_build_free(&b);
}
END_TEST

int main(void)
{
    const TTest *tests[] = {compile_steps_map_failures_once, local_fault_is_not_shared_fake,
                            nul_first_byte_is_invalid_fake,
#ifndef KPC_PLATFORM_NVIDIA
                            broken_tmpdir_does_not_poison_real, nul_first_byte_is_invalid_real,
                            nul_first_byte_tool_real,
#endif
                            NULL};
    return ts_main_case("house", "faults", 120, setup, teardown, tests);
}
