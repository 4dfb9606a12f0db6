/*
 * platform.c - the seam's plumbing: which platform is in use, and the remembered list of
 * targets already validated for a compiler identity (v1/targets-<platform>-<id>), which
 * lets a warm process create a context without loading the compiler.
 */
#define _GNU_SOURCE
#include "kpc_internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

void kpc_build_free(kpc_build *b)
{
    free(b->code);
    free(b->names);
    free(b->log);
    memset(b, 0, sizeof *b);
}

static void targets_path(const char *cache_dir, const char *platform, const uint8_t id[16], char *out,
                         size_t cap)
{
    char hex[33];
    kpc__hex(id, 16, hex);
    snprintf(out, cap, "%s/v1/targets-%s-%s", cache_dir, platform, hex);
}

bool kpc_targets_known(const char *cache_dir, const char *platform, const uint8_t id[16],
                       const char *target)
{
    if (cache_dir == NULL || cache_dir[0] == '\0')
        return false;
    char path[4300];
    targets_path(cache_dir, platform, id, path, sizeof path);
    FILE *f = fopen(path, "re");
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

void kpc_targets_remember(const char *cache_dir, const char *platform, const uint8_t id[16],
                          const char *target)
{
    if (cache_dir == NULL || cache_dir[0] == '\0')
        return;
    char path[4300], dir[4200], line[256];
    snprintf(dir, sizeof dir, "%s/v1", cache_dir);
    if (kpc__mkdir_p(dir, 0700) != 0)
        return;
    targets_path(cache_dir, platform, id, path, sizeof path);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    int n = snprintf(line, sizeof line, "%s\n", target);
    if (n > 0 && (size_t)n < sizeof line && kpc__write_all(fd, line, (size_t)n) != 0)
        KPC_LOG(KPC_LOG_DEBUG, "could not remember target %s in %s", target, path);
    close(fd);
}
