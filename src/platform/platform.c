/*
 * platform.c - the seam's plumbing: which platform is in use, and the remembered list of
 * targets already validated for a compiler identity (v1/targets-<platform>-<id>), which
 * lets a warm process create a context without loading the compiler.
 */
#define _GNU_SOURCE
#include "platform/platform.h"
#include "platform/depfile.h"
#include "base/log.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef KPC_TEST_HOOKS
static _Atomic(const kpc_platform *) override;

const kpc_platform *kpc_platform_get(void)
{
    const kpc_platform *p = atomic_load(&override);
    return p ? p : &kpc_platform_builtin;
}

void kpc_platform_set(const kpc_platform *p)
{
    atomic_store(&override, p);
}
#else
const kpc_platform *kpc_platform_get(void)
{
    return &kpc_platform_builtin;
}
#endif

void kpc_platform_build_free(kpc_build *b)
{
    free(b->code);
    free(b->names);
    free(b->log);
    kpc_depfile_paths_free(b->deps, b->num_deps);
    kpc_depfile_paths_free(b->absent, b->num_absent);
    memset(b, 0, sizeof *b);
}

static int targets_path(const kpc_root *root, const char *platform, const uint8_t id[16], char *out,
                        size_t cap)
{
    (void)root;
    char hex[33];
    kpc__hex(id, 16, hex);
    int n = snprintf(out, cap, "targets-%s-%s", platform, hex);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

bool kpc_platform_targets_known(const kpc_root *root, const char *platform, const uint8_t id[16],
                                const char *target)
{
    char path[4300];
    if (root == NULL || targets_path(root, platform, id, path, sizeof path) != 0)
        return false;
    FILE *f = kpc_root_read_memo(root, path);
    if (f == NULL)
        return false;
    char line[256];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        found = strcmp(line, target) == 0;
    }
    fclose(f);
    return found;
}

void kpc_platform_targets_remember(const kpc_root *root, const char *platform, const uint8_t id[16],
                                   const char *target)
{
    char path[4300], line[256];
    if (root == NULL || targets_path(root, platform, id, path, sizeof path) != 0)
        return;
    int fd = kpc_root_open_memo(root, path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd < 0)
        return;
    int n = snprintf(line, sizeof line, "%s\n", target);
    if (n > 0 && (size_t)n < sizeof line && kpc__write_all(fd, line, (size_t)n) != 0)
        KPC_LOG(KPC_LOG_DEBUG, "could not remember target %s in %s", target, path);
    close(fd);
}
