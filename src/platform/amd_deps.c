/*
 * amd_deps.c - the files a hipRTC compile read, from the compiler itself.
 *
 * hipRTC (ROCm 5.2) hands its options to comgr's clang, which accepts -MD -MF <file>:
 * the compile writes a make-format dependency file and the code object is byte for
 * byte the one it builds without them (checked: tests/test_manifest.c). comgr
 * compiles from a temporary directory of its own:
 *
 *   <tmp>/output/CompileSource.bc: <tmp>/input/CompileSource \
 *     <tmp>/include/hiprtc_runtime.h <tmp>/include/<each in-memory header> \
 *     headers/test_header1.h /usr/include/stdint.h ...
 *
 * The source and the in-memory headers are in the request key and hiprtc_runtime.h
 * comes from libhiprtc-builtins (in the compiler identity), so everything under <tmp>
 * is left out; every other file (user headers, host system headers) is a dependency.
 * Paths are kept as clang opened them: relative ones are relative to the working
 * directory, "/../lib/gcc/..." style ones are resolved by the kernel, not by us.
 *
 * A compile that stops on a fatal error (a header not found) writes no dependency
 * file: its outcome has no known dependencies and is not cached (resolve.c).
 */
#define _GNU_SOURCE
#include "core/manifest.h"
#include "platform/amd_deps.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

kpc_status kpc_amd_deps_open(char *path, size_t cap)
{
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || tmp[0] != '/')
        tmp = "/tmp";
    int n = snprintf(path, cap, "%s/kpc-deps-XXXXXX", tmp);
    if (n < 0 || (size_t)n >= cap)
        return KPC_E_INVALID;
    int fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0) {
        KPC_LOG(KPC_LOG_WARN, "mkostemp(%s): %s: dependencies unknown, the outcome is not cached",
                path, strerror(errno));
        path[0] = '\0';
        return KPC_E_IO;
    }
    close(fd);
    return KPC_OK;
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
    int fd;
    do
        fd = open(depfile, O_RDONLY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    void *text = NULL;
    size_t size = 0;
    kpc_status s = fd < 0 ? KPC_E_NOT_FOUND : kpc__read_fd(fd, 64u << 20, &text, &size);
    if (fd >= 0)
        close(fd);
    unlink(depfile);
    if (s != KPC_OK || size == 0) {
        free(text);
        return KPC_E_NOT_FOUND; /* a fatal error: clang wrote nothing */
    }
    char *target, **v;
    size_t count;
    s = kpc_manifest_parse_depfile(text, size, &target, &v, &count);
    free(text);
    if (s != KPC_OK)
        return s == KPC_E_NOMEM ? s : KPC_E_NOT_FOUND;
    /* comgr's directory: the input's grandparent; the target must lie in it too */
    size_t root = count > 0 ? comgr_root(v[0]) : 0;
    if (root == 0 || strncmp(target, v[0], root) != 0) {
        KPC_LOG(KPC_LOG_WARN, "dependency file of an unexpected shape (target %s): dependencies "
                "unknown, the outcome is not cached", target);
        free(target);
        kpc_manifest_paths_free(v, count);
        return KPC_E_NOT_FOUND;
    }
    char *input = v[0]; /* holds the prefix: freed after the loop */
    size_t kept = 0;
    for (size_t i = 1; i < count; i++) {
        if (strncmp(v[i], input, root) == 0)
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
