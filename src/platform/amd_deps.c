/*
 * amd_deps.c - the files a hipRTC compile read, from the compiler itself.
 *
 * hipRTC hands its options to comgr's clang driver, and the driver hands -Xclang options
 * to the device compile itself: kpc asks that for a dependency file (-dependency-file
 * <file> -MT <target> -sys-header-deps: what -MD -MF <file> means to it). Not -MD -MF: a
 * newer driver gives those to the host compile only, and a hipRTC compile has none (ROCm 6.4's clang warns "argument unused" and writes nothing). The code object is
 * byte for byte the one it builds without them (checked here with ROCm 5.2.3 and 6.4.3;
 * docs/design.md). comgr compiles from a temporary directory of its own (under comgr
 * 7 a virtual one, with the same names):
 *
 *   kpc-deps: <tmp>/input/<source name> \
 *     <tmp>/include/hiprtc_runtime.h <tmp>/include/<each in-memory header> \
 *     headers/test_header1.h /usr/include/stdint.h ...
 *
 * The source and the in-memory headers are in the request key and hiprtc_runtime.h
 * comes from libhiprtc-builtins (in the compiler identity), so everything under <tmp>
 * is left out. So are the files of the compiler's own installation, which its identity
 * covers (an upgrade changes the build ids it is made of): the HIP headers beside the
 * loaded libamdhip64 (<prefix>/include/hip/ for <prefix>/lib/.../libamdhip64.so; the
 * system's, hashed into its identity, on the comgr platform) and
 * clang's resource headers (.../clang/<version>/include/). Every other file (user
 * headers, host system headers such as libstdc++'s <type_traits>) is a dependency.
 * Without this, every source that includes <hip/hip_runtime.h> would pay a stat per
 * in-memory hit (~3 us on this VM, 20x the hit itself).
 * Paths are kept as clang opened them: relative ones are relative to the working
 * directory, "/../lib/gcc/..." style ones are resolved by the kernel, not by us.
 *
 * A compile that stops on a fatal error (a header not found) writes no dependency
 * file: its outcome has no known dependencies and is not cached (resolve.c).
 */
#define _GNU_SOURCE
#include "platform/amd_deps.h"
#include "base/fault.h"
#include "base/log.h"
#include "base/util.h"
#include "platform/depfile.h"
#include "platform/identity.h"
#include "platform/options.h"

#include <pthread.h>

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The rule's target in the dependency file: only a file with it is one kpc asked for. */
#define DEPS_TARGET "kpc-deps"

size_t kpc_amd_deps_options(const char *depfile, const char **opts)
{
    const char *const tokens[KPC_AMD_DEPS_OPTIONS] = {
        "-Xclang", "-dependency-file", "-Xclang", depfile, "-Xclang", "-MT", "-Xclang", DEPS_TARGET,
        "-Xclang", "-sys-header-deps"};
    for (size_t i = 0; i < KPC_AMD_DEPS_OPTIONS; i++)
        opts[i] = tokens[i];
    return KPC_AMD_DEPS_OPTIONS;
}

/* The HIP headers of the compiler's installation, "<dir>/hip/", set once: beside the
 * loaded libamdhip64 (<prefix>/include/hip/); where no HIP runtime is loaded (the comgr
 * platform, whose compiles include them from disk), those clang finds in the system
 * include directories, which that platform's identity hashes. */
static char hip_headers[4200];
static pthread_once_t hip_headers_once = PTHREAD_ONCE_INIT;

static bool hip_headers_of_runtime(void)
{
    char loaded[4096], path[PATH_MAX];
    uint8_t id[64];
    /* the real path: the loader may name it through a link (/lib -> usr/lib) */
    if (kpc_identity_loaded_build_id("libamdhip64", id, sizeof id, loaded, sizeof loaded) == 0 ||
        realpath(loaded, path) == NULL)
        return false;
    /* <prefix>/lib/..., <prefix>/lib64/... or <prefix>/lib/<multiarch>/... */
    char *lib = strstr(path, "/lib");
    for (char *next = lib; next; next = strstr(next + 1, "/lib"))
        if (strncmp(next, "/lib/", 5) == 0 || strncmp(next, "/lib64/", 7) == 0)
            lib = next;
    if (lib == NULL || lib == path)
        return false;
    *lib = '\0';
    snprintf(hip_headers, sizeof hip_headers, "%s/include/hip/", path);
    return true;
}

static void find_hip_headers(void)
{
    if (hip_headers_of_runtime())
        return;
    for (size_t i = 0; i < KPC_SYSTEM_INCLUDE_DIRS; i++) {
        char header[256], real[PATH_MAX];
        snprintf(header, sizeof header, "%s/hip/hip_runtime.h", kpc_system_include_dirs[i]);
        if (realpath(header, real) != NULL) {
            *strrchr(real, '/') = '\0';
            snprintf(hip_headers, sizeof hip_headers, "%s/", real);
            return;
        }
    }
}

const char *kpc_amd_deps_hip_headers(void)
{
    pthread_once(&hip_headers_once, find_hip_headers);
    return hip_headers[0] ? hip_headers : NULL;
}

/* A file of the compiler's own installation (its identity covers it). The test is on
 * the file's real path (the compiler may name it through links); the path recorded
 * stays the one the compiler used. */
static bool installed(const char *given)
{
    char real[PATH_MAX];
    const char *path = realpath(given, real) ? real : given;
    if (kpc_amd_deps_hip_headers() && strncmp(path, hip_headers, strlen(hip_headers)) == 0)
        return true;
    /* clang's resource headers: .../clang/<version>/include/... */
    for (const char *p = strstr(path, "/clang/"); p; p = strstr(p + 1, "/clang/")) {
        const char *v = p + 7;
        size_t n = strspn(v, "0123456789.");
        if (n > 0 && v[0] != '.' && strncmp(v + n, "/include/", 9) == 0)
            return true;
    }
    return false;
}

/* "<tmp>/input/CompileSource" -> "<tmp>/" (length of the prefix), or 0. */
static size_t comgr_root(const char *input)
{
    const char *end = strrchr(input, '/');
    if (end == NULL || end == input)
        return 0;
    const char *p = end - 1;
    while (p > input && *p != '/')
        p--;
    return *p == '/' && p > input ? (size_t)(p - input) + 1 : 0;
}

kpc_status kpc_amd_deps_collect(const char *depfile, char ***paths, size_t *n)
{
    *paths = NULL;
    *n = 0;
    int fd = kpc_open_regular(AT_FDCWD, depfile, O_RDONLY, 0, NULL);
    void *text = NULL;
    size_t size = 0;
    kpc_status s = fd < 0 ? KPC_E_NOT_FOUND : kpc__read_fd(fd, 64u << 20, &text, &size);
    if (fd >= 0)
        close(fd);
    kpc__unlinkat(AT_FDCWD, depfile, 0);
    if (s != KPC_OK || size == 0) {
        free(text);
        return KPC_E_NOT_FOUND; /* a fatal error: clang wrote nothing */
    }
    char *target, **v;
    size_t count;
    s = kpc_depfile_parse(text, size, &target, &v, &count);
    free(text);
    if (s != KPC_OK)
        return s == KPC_E_NOMEM ? s : KPC_E_NOT_FOUND;
    /* kpc's target; comgr's directory: the input's grandparent */
    size_t root = count > 0 ? comgr_root(v[0]) : 0;
    if (root == 0 || strcmp(target, DEPS_TARGET) != 0) {
        KPC_LOG(KPC_LOG_WARN, "dependency file of an unexpected shape (target %s): dependencies "
                "unknown, the outcome is not cached", target);
        free(target);
        kpc_depfile_paths_free(v, count);
        return KPC_E_NOT_FOUND;
    }
    char *input = v[0]; /* holds the prefix: freed after the loop */
    size_t kept = 0;
    for (size_t i = 1; i < count; i++) {
        if (strncmp(v[i], input, root) == 0 || installed(v[i]))
            free(v[i]);
        else
            v[kept++] = v[i];
    }
    free(input);
    free(target);
    if (kept == 0) {
        free(v);
        return KPC_OK;
    }
    *paths = v;
    *n = kept;
    return KPC_OK;
}
