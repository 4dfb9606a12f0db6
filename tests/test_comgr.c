/*
 * test_comgr.c - the comgr platform (-DKPC_PLATFORM=comgr): HIP source compiled through
 * comgr alone, no hipRTC, no HIP runtime. Real compiles for gfx90a (no GPU needed): the
 * object is an AMDGPU ELF for that processor with the kernels' symbols and the lowered
 * names of its name expressions, built without loading the HIP runtime; the identity
 * covers comgr and the system's HIP headers; a fresh cache handle's get is a hit with the
 * same bytes; a header read from disk is a dependency (changed, it rebuilds); a compile
 * error keeps the log; an unknown target is refused before comgr sees it; there is no
 * device runtime; `kpc compile` builds and then hits; a comgr of another major than the
 * header's is refused.
 */
#define _GNU_SOURCE
#include "manifest_support.h"
#include "support.h"
#include "platform/amd_deps.h"
#include "platform/identity.h"

#include <amd_comgr.h>
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const kernels =
    "extern \"C\" __global__ void kpc_comgr_scale(float *x, float a)\n"
    "{\n  x[blockIdx.x * blockDim.x + threadIdx.x] *= a;\n}\n"
    "template <typename T> __global__ void kpc_comgr_twice(T *x) { x[threadIdx.x] += x[threadIdx.x]; }\n";

static kpc_stats stats_of(kpc_cache *c)
{
    kpc_stats st;
    ck_assert_int_eq(kpc_stats_get(c, &st), KPC_OK);
    return st;
}

/* The ELF checks of an AMDGPU HSA code object for gfx90a (e_flags' processor 0x3f). */
static void assert_gfx90a_object(const unsigned char *p, size_t size)
{
    ck_assert_uint_ge(size, sizeof(Elf64_Ehdr));
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)p;
    ck_assert_mem_eq(eh->e_ident, ELFMAG, SELFMAG);
    ck_assert_uint_eq(eh->e_ident[EI_CLASS], ELFCLASS64);
    ck_assert_uint_eq(eh->e_ident[EI_OSABI], 64); /* ELFOSABI_AMDGPU_HSA */
    ck_assert_uint_eq(eh->e_type, ET_DYN);
    ck_assert_uint_eq(eh->e_machine, 224); /* EM_AMDGPU */
    ck_assert_uint_eq(eh->e_flags & 0xff, 0x3f); /* EF_AMDGPU_MACH_AMDGCN_GFX90A */
    ck_assert_uint_le(eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr), size);
}

/* Whether the object's symbol table names sym (a defined symbol). */
static bool has_symbol(const unsigned char *p, size_t size, const char *sym)
{
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)p;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(p + eh->e_shoff);
    for (unsigned i = 0; i < eh->e_shnum; i++) {
        if ((sh[i].sh_type != SHT_SYMTAB && sh[i].sh_type != SHT_DYNSYM) || sh[i].sh_link >= eh->e_shnum)
            continue;
        const Elf64_Shdr *str = &sh[sh[i].sh_link];
        ck_assert_uint_le(sh[i].sh_offset + sh[i].sh_size, size);
        ck_assert_uint_le(str->sh_offset + str->sh_size, size);
        const Elf64_Sym *syms = (const Elf64_Sym *)(p + sh[i].sh_offset);
        for (size_t k = 0; k < sh[i].sh_size / sizeof *syms; k++)
            if (syms[k].st_name < str->sh_size && syms[k].st_shndx != SHN_UNDEF &&
                strcmp((const char *)p + str->sh_offset + syms[k].st_name, sym) == 0)
                return true;
    }
    return false;
}

START_TEST(compiles_a_gfx90a_object_with_the_kernels)
{
    kpc_cache *c = ts_open(mf_dir, 0, 0);
    kpc_context *ctx = ts_context(c); /* gfx90a: ts_target() */
    const char *exprs[] = {"kpc_comgr_twice<float>", "&kpc_comgr_twice<int>"};
    kpc_source src = ts_src(kernels, "scale.hip");
    src.name_expressions = exprs;
    src.num_name_expressions = 2;
    kpc_program *prog = NULL;
    ck_assert_int_eq(kpc_program_get(ctx, &src, &prog), KPC_OK);
    size_t size = 0;
    const unsigned char *code = kpc_program_code(prog, &size);
    assert_gfx90a_object(code, size);
    ck_assert(has_symbol(code, size, "kpc_comgr_scale"));
    ck_assert(has_symbol(code, size, "kpc_comgr_scale.kd")); /* its kernel descriptor */
    /* the name expressions: lowered to the instantiations' symbols, which are there */
    ck_assert_str_eq(kpc_program_lowered_name(prog, exprs[0]), "_Z15kpc_comgr_twiceIfEvPT_");
    ck_assert_str_eq(kpc_program_lowered_name(prog, exprs[1]), "_Z15kpc_comgr_twiceIiEvPT_");
    ck_assert(has_symbol(code, size, "_Z15kpc_comgr_twiceIfEvPT_"));
    ck_assert(has_symbol(code, size, "_Z15kpc_comgr_twiceIiEvPT_"));
    ck_assert_uint_eq(stats_of(c).builds, 1);
    /* compiled without the HIP runtime (hipRTC lives in it in ROCm 5.2) */
    uint8_t id[64];
    char path[512];
    ck_assert_uint_eq(kpc_identity_loaded_build_id("libamdhip64", id, sizeof id, path, sizeof path), 0);
    ck_assert_uint_eq(kpc_identity_loaded_build_id("libhiprtc", id, sizeof id, path, sizeof path), 0);
    kpc_program_release(prog);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

START_TEST(identity_is_comgr_and_the_hip_headers)
{
    uint8_t a[16], b[16];
    char desc[512], line[4400];
    ck_assert_int_eq(kpc_platform_builtin.identity(NULL, a, desc, sizeof desc), KPC_OK);
    ck_assert_msg(strstr(desc, "libamd_comgr:") && strstr(desc, "libLLVM") && !strstr(desc, "libamdhip64"),
                  "identity: %s", desc);
    /* remembered with the HIP headers every compile includes, then recalled */
    const char *hip = kpc_amd_deps_hip_headers();
    ck_assert_ptr_nonnull(hip);
    ck_assert_int_eq(kpc__mkdir_p(mf_dir, 0700), 0);
    kpc_root *root;
    ck_assert_int_eq(kpc_root_open(mf_dir, &root), KPC_OK);
    ck_assert_int_eq(kpc_platform_builtin.identity(root, b, desc, sizeof desc), KPC_OK);
    ck_assert_mem_eq(a, b, 16);
    FILE *memo = kpc_root_read_memo(root, "compiler-comgr.id");
    ck_assert_ptr_nonnull(memo);
    bool listed = false;
    while (fgets(line, sizeof line, memo))
        listed |= strstr(line, hip) != NULL;
    fclose(memo);
    ck_assert_msg(listed, "the memo does not name %s", hip);
    ck_assert_int_eq(kpc_platform_builtin.identity(root, b, desc, sizeof desc), KPC_OK);
    ck_assert_str_eq(desc, ""); /* recalled: nothing was hashed */
    ck_assert_mem_eq(a, b, 16);
    kpc_root_close(root);
}
END_TEST

START_TEST(second_get_is_a_hit_with_the_same_bytes)
{
    kpc_source src = ts_src(kernels, "scale.hip");
    void *first = NULL, *again = NULL;
    size_t first_size = 0, again_size = 0;
    for (int round = 0; round < 2; round++) { /* a fresh cache handle: the disk tier answers */
        kpc_cache *c = ts_open(mf_dir, 0, 0);
        kpc_context *ctx = ts_context(c); /* gfx90a: ts_target() */
        void *code = ts_get_code(ctx, &src, round ? &again_size : &first_size);
        *(round ? &again : &first) = code;
        ck_assert_uint_eq(stats_of(c).builds, round ? 0 : 1);
        kpc_context_destroy(ctx);
        kpc_cache_close(c);
    }
    ck_assert_uint_eq(first_size, again_size);
    ck_assert_mem_eq(first, again, first_size);
    free(first);
    free(again);
}
END_TEST

START_TEST(a_header_read_from_disk_is_a_dependency)
{
    char opt[4300];
    snprintf(opt, sizeof opt, "-I%s/inc", mf_work);
    const char *opts[] = {opt};
    kpc_source src = ts_src("#include \"factor.h\"\n"
                            "extern \"C\" __global__ void kpc_comgr_mul(int *x) { x[threadIdx.x] *= FACTOR; }\n",
                            "mul.hip");
    src.options = opts;
    src.num_options = 1;
    void *code[3];
    size_t size[3];
    const char *factors[] = {"#define FACTOR 3\n", "#define FACTOR 3\n", "#define FACTOR 5\n"};
    for (int round = 0; round < 3; round++) {
        if (round != 1) {
            mf_put("inc/factor.h", factors[round]);
            mf_settle();
        }
        kpc_cache *c = ts_open(mf_dir, 0, 0);
        kpc_context *ctx = ts_context(c); /* gfx90a: ts_target() */
        code[round] = ts_get_code(ctx, &src, &size[round]);
        /* built, then a hit while the header stands, then built again once it changed */
        ck_assert_uint_eq(stats_of(c).builds, round == 1 ? 0 : 1);
        kpc_context_destroy(ctx);
        kpc_cache_close(c);
    }
    ck_assert(size[0] == size[1] && memcmp(code[0], code[1], size[0]) == 0);
    ck_assert(size[0] != size[2] || memcmp(code[0], code[2], size[0]) != 0);
    for (int i = 0; i < 3; i++)
        free(code[i]);
}
END_TEST

START_TEST(in_memory_headers_are_included)
{
    kpc_cache *c = ts_open(mf_dir, 0, 0);
    kpc_context *ctx = ts_context(c); /* gfx90a: ts_target() */
    const char *names[] = {"offset.h"}, *bodies[] = {"#define OFFSET 7\n"};
    kpc_source src = ts_src("#include \"offset.h\"\n"
                            "extern \"C\" __global__ void kpc_comgr_add(int *x) { x[threadIdx.x] += OFFSET; }\n",
                            "add.hip");
    src.header_names = names;
    src.header_sources = bodies;
    src.num_headers = 1;
    size_t size;
    unsigned char *code = ts_get_code(ctx, &src, &size);
    assert_gfx90a_object(code, size);
    ck_assert(has_symbol(code, size, "kpc_comgr_add"));
    free(code);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

START_TEST(compile_error_returns_the_log)
{
    kpc_cache *c = ts_open(mf_dir, 0, 0);
    kpc_context *ctx = ts_context(c); /* gfx90a: ts_target() */
    /* a name with directories: comgr is given its base name (it writes the source there) */
    kpc_source src = ts_src("extern \"C\" __global__ void kpc_comgr_bad(int *x) { x[0] = kpc_no_such_name; }\n",
                            "../../src/bad.hip");
    kpc_program *prog = NULL;
    ck_assert_int_eq(kpc_program_get(ctx, &src, &prog), KPC_E_COMPILE);
    ck_assert_ptr_null(prog);
    const char *log = kpc_last_log();
    ck_assert_msg(strstr(log, "bad.hip:1:") && strstr(log, "kpc_no_such_name") && strstr(log, "error"),
                  "log: %s", log);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

START_TEST(unknown_target_is_invalid)
{
    kpc_cache *c = ts_open(mf_dir, 0, 0);
    const char *bad[] = {"gfx0000", "gfx90a:xnack*", "sm_90"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kpc_context *ctx = NULL;
        ts_log_begin(KPC_LOG_ERROR);
        kpc_status s = kpc_context_create_for_target(c, bad[i], &ctx);
        char *log = ts_log_end();
        ck_assert_int_eq(s, KPC_E_INVALID);
        ck_assert_ptr_null(ctx);
        ck_assert_msg(strstr(log, bad[i]) != NULL, "log: %s", log);
        if (i == 0) /* comgr's own list names what it takes */
            ck_assert_msg(strstr(log, "gfx90a") != NULL, "log: %s", log);
        free(log);
    }
    ck_assert_uint_eq(stats_of(c).builds, 0);
    kpc_cache_close(c);
}
END_TEST

START_TEST(no_device_runtime)
{
    kpc_cache *c = ts_open(mf_dir, 0, 0);
    kpc_context *ctx = NULL;
    ts_log_begin(KPC_LOG_ERROR);
    kpc_status s = kpc_context_create(c, 0, &ctx);
    char *log = ts_log_end();
    ck_assert_int_eq(s, KPC_E_NO_DEVICE);
    ck_assert_ptr_null(ctx);
    ck_assert_msg(strstr(log, "comgr platform only compiles") && strstr(log, "kpc_context_create_for_target"),
                  "log: %s", log);
    free(log);
    kpc_cache_close(c);
}
END_TEST

START_TEST(kpc_compile_builds_then_hits)
{
    const char *tool = getenv("KPC_TOOL");
    ck_assert_msg(tool != NULL, "KPC_TOOL is not set (run through ctest)");
    char file[4200], out[4200];
    snprintf(file, sizeof file, "%s/scale.hip", mf_work);
    snprintf(out, sizeof out, "%s/scale.co", mf_work);
    ts_write_file(file, kernels, strlen(kernels));
    const char *argv[] = {tool, "compile", "--cache-dir", mf_dir, "-t", "gfx90a",
                          "--name-expr", "kpc_comgr_twice<float>", "-o", out, file, NULL};
    for (int round = 0; round < 2; round++) {
        char *sout = NULL, *serr = NULL;
        ck_assert_int_eq(ts_exec(argv, NULL, &sout, &serr), 0);
        ck_assert_msg(strncmp(sout, round ? "hit" : "built", round ? 3 : 5) == 0, "out: %s err: %s", sout, serr);
        ck_assert_msg(strstr(sout, "kpc_comgr_twice<float> -> _Z15kpc_comgr_twiceIfEvPT_"), "out: %s", sout);
        free(sout);
        free(serr);
        size_t size = 0;
        unsigned char *code = ts_read_file(out, &size);
        ck_assert_ptr_nonnull(code);
        assert_gfx90a_object(code, size);
        ck_assert(has_symbol(code, size, "kpc_comgr_scale"));
        free(code);
    }
}
END_TEST

/* comgr's action kinds are numbered differently in each major: a comgr that answers to the
 * header's soname but is another major must be refused before any action runs on it */
START_TEST(another_major_of_comgr_is_refused)
{
    const char *tool = getenv("KPC_TOOL");
    ck_assert_msg(tool != NULL, "KPC_TOOL is not set (run through ctest)");
    char libs[4200], link[4300], file[4200], out[4200], env_lib[4300];
    snprintf(libs, sizeof libs, "%s/libs", mf_work);
    snprintf(link, sizeof link, "%s/libamd_comgr.so.%d", libs, AMD_COMGR_INTERFACE_VERSION_MAJOR);
    snprintf(file, sizeof file, "%s/scale.hip", mf_work);
    snprintf(out, sizeof out, "%s/scale.co", mf_work);
    snprintf(env_lib, sizeof env_lib, "LD_LIBRARY_PATH=%s", libs);
    ck_assert_int_eq(kpc__mkdir_p(libs, 0700), 0);
    ck_assert_int_eq(symlink(KPC_FAKE_COMGR, link), 0);
    ts_write_file(file, kernels, strlen(kernels));
    const char *argv[] = {tool, "compile", "--cache-dir", mf_dir, "-t", "gfx90a", "-o", out, file, NULL};
    const char *env[] = {env_lib, NULL};
    char *sout = NULL, *serr = NULL;
    int rc = ts_exec(argv, env, &sout, &serr);
    ck_assert_msg(rc != 0, "the tool compiled with a comgr of another major: %s", sout);
    char want[64];
    snprintf(want, sizeof want, "version %d.0", AMD_COMGR_INTERFACE_VERSION_MAJOR + 1);
    ck_assert_msg(strstr(serr, want) && strstr(serr, "rebuild kpc against this comgr"), "err: %s", serr);
    ck_assert_int_ne(access(out, F_OK), 0);
    free(sout);
    free(serr);
    unlink(link);
    rmdir(libs);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("comgr");
    TCase *tc = tcase_create("compile");
    tcase_add_checked_fixture(tc, mf_setup, mf_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, compiles_a_gfx90a_object_with_the_kernels);
    tcase_add_test(tc, identity_is_comgr_and_the_hip_headers);
    tcase_add_test(tc, second_get_is_a_hit_with_the_same_bytes);
    tcase_add_test(tc, a_header_read_from_disk_is_a_dependency);
    tcase_add_test(tc, in_memory_headers_are_included);
    tcase_add_test(tc, compile_error_returns_the_log);
    tcase_add_test(tc, unknown_target_is_invalid);
    tcase_add_test(tc, no_device_runtime);
    tcase_add_test(tc, kpc_compile_builds_then_hits);
    tcase_add_test(tc, another_major_of_comgr_is_refused);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
