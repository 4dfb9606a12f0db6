/*
 * test_sonames.c - the AMD platform finds hipRTC and comgr by the sonames ROCm 5, 6 and 7
 * ship, newest first: given libamdhip64.so.7 / libhiprtc.so.7 / libamd_comgr.so.3 beside
 * the installed ROCm (5: hipRTC inside libamdhip64.so.5, comgr .so.2; 6: libhiprtc.so.6
 * beside libamdhip64.so.6, comgr .so.2 or .so.3), it loads the ROCm 7 names.
 *
 * The ROCm 7 names are symbolic links to this machine's libraries in a temporary
 * directory; a child (this program again, with LD_LIBRARY_PATH pointing there, which the
 * dynamic loader reads only at start) compiles a kernel through kpc and lists the objects
 * it loaded, by the path each was opened under.
 */
#define _GNU_SOURCE
#include "support.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int list_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    FILE *f = arg;
    if (info->dlpi_name && info->dlpi_name[0])
        fprintf(f, "%s\n", info->dlpi_name);
    return 0;
}

/* The child: compile once, print every loaded object's path. */
static int child(const char *cache_dir)
{
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = cache_dir};
    kpc_cache *cache = NULL;
    kpc_context *ctx = NULL;
    kpc_program *prog = NULL;
    kpc_status s = kpc_cache_open(&cfg, &cache);
    if (s == KPC_OK)
        s = kpc_context_create_for_target(cache, "gfx90a", &ctx);
    kpc_source src = {.code = "extern \"C\" __global__ void sonames(int *p) { p[0] = 7; }\n", .name = "sonames.hip"};
    if (s == KPC_OK)
        s = kpc_program_get(ctx, &src, &prog);
    printf("status %s\n", kpc_status_str(s));
    dl_iterate_phdr(list_object, stdout);
    kpc_program_release(prog);
    kpc_context_destroy(ctx);
    kpc_cache_close(cache);
    return s == KPC_OK ? 0 : 1;
}

/* The path a loaded library was opened from, in this process ("" if none). It stays
 * loaded: comgr unloaded and loaded again registers LLVM's options a second time in the
 * libLLVM that stayed (ROCm 5.7's comgr aborts: "Option 'disassemble' registered more than
 * once"). */
static const char *loaded_path(const char *name, char *out, size_t cap)
{
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    out[0] = '\0';
    if (h) {
        struct link_map *lm;
        if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0)
            ck_assert_ptr_nonnull(realpath(lm->l_name, out));
    }
    (void)cap;
    return out;
}

START_TEST(newest_sonames_first)
{
    /* the installed generation: ROCm 6 (its own libhiprtc) or 5 (hipRTC in the runtime) */
    char real_hip[4096], real_rtc[4096], real_comgr[4096], real_builtins[4096], installed_hip[32];
    const char *gen = loaded_path("libamdhip64.so.6", real_hip, sizeof real_hip)[0] ? "6" : "5";
    snprintf(installed_hip, sizeof installed_hip, "libamdhip64.so.%s", gen);
    if (gen[0] == '5')
        loaded_path(installed_hip, real_hip, sizeof real_hip);
    char name[64];
    snprintf(name, sizeof name, "libhiprtc.so.%s", gen);
    if (!loaded_path(name, real_rtc, sizeof real_rtc)[0])
        strcpy(real_rtc, real_hip);
    /* a runtime that links comgr (ROCm 5.7's) brings its own: then the loader answers
     * kpc's dlopen of any comgr name with that one, whatever the name */
    bool runtime_links_comgr = dlopen("libamd_comgr.so.2", RTLD_NOW | RTLD_NOLOAD) != NULL ||
                               dlopen("libamd_comgr.so.3", RTLD_NOW | RTLD_NOLOAD) != NULL;
    if (!loaded_path("libamd_comgr.so.3", real_comgr, sizeof real_comgr)[0])
        loaded_path("libamd_comgr.so.2", real_comgr, sizeof real_comgr);
    snprintf(name, sizeof name, "libhiprtc-builtins.so.%s", gen);
    loaded_path(name, real_builtins, sizeof real_builtins);
    if (!real_hip[0] || !real_comgr[0]) {
        ts_skip("no ROCm 5 or 6 libamdhip64 / libamd_comgr to stand in");
        return;
    }
    char *dir = ts_tmpdir(); /* .../cache; its parent holds the links */
    char libs[4200];
    snprintf(libs, sizeof libs, "%s", dir);
    *strrchr(libs, '/') = '\0';
    strcat(libs, "/lib");
    ck_assert_int_eq(mkdir(libs, 0700), 0);
    const struct { const char *name, *target; } links[] = {
        {"libamdhip64.so.7", real_hip}, {"libhiprtc.so.7", real_rtc},
        {"libamd_comgr.so.3", real_comgr}, {"libhiprtc-builtins.so.7", real_builtins}};
    for (size_t i = 0; i < 4; i++) {
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", libs, links[i].name);
        if (links[i].target[0])
            ck_assert_int_eq(symlink(links[i].target, path), 0);
    }
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    ck_assert_int_gt(n, 0);
    self[n] = '\0';
    char env_lib[4300], env_dir[4300];
    snprintf(env_lib, sizeof env_lib, "LD_LIBRARY_PATH=%s", libs);
    snprintf(env_dir, sizeof env_dir, "KPC_SONAMES_CHILD=%s", dir);
    const char *argv[] = {self, NULL};
    const char *env[] = {env_lib, env_dir, NULL};
    char *out = NULL, *err = NULL;
    int rc = ts_exec(argv, env, &out, &err);
    ck_assert_msg(rc == 0, "child exit %d:\n%s\n%s", rc, out, err);
    char want[4400];
    snprintf(want, sizeof want, "%s/libamdhip64.so.7\n", libs);
    ck_assert_msg(strstr(out, want) != NULL, "libamdhip64.so.7 was not loaded first:\n%s", out);
    snprintf(want, sizeof want, "%s/libamd_comgr.so.3\n", libs);
    ck_assert_msg(runtime_links_comgr || strstr(out, want) != NULL, "libamd_comgr.so.3 was not loaded first:\n%s",
                  out);
    if (strcmp(real_rtc, real_hip) != 0) { /* ROCm 6: hipRTC from its own library */
        snprintf(want, sizeof want, "%s/libhiprtc.so.7\n", libs);
        ck_assert_msg(strstr(out, want) != NULL, "libhiprtc.so.7 was not loaded first:\n%s", out);
    }
    char installed[64];
    snprintf(installed, sizeof installed, "/%s\n", installed_hip);
    ck_assert_msg(strstr(out, installed) == NULL, "the installed name %s was loaded too:\n%s", installed_hip, out);
    free(out), free(err);
    for (size_t i = 0; i < 4; i++) {
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", libs, links[i].name);
        unlink(path);
    }
    rmdir(libs);
    ts_cleanup(dir);
}
END_TEST

int main(void)
{
    const char *child_dir = getenv("KPC_SONAMES_CHILD");
    if (child_dir)
        return child(child_dir);
    Suite *s = suite_create("sonames");
    TCase *tc = tcase_create("amd");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, newest_sonames_first);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
