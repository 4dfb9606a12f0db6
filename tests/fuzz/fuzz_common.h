/*
 * fuzz_common.h - what the libFuzzer targets share: a private temp dir removed at exit,
 * whole-file writes, record paths, and seeds written to $KPC_FUZZ_SEED_DIR/<kind>/.
 * Header-only (static functions): each target is one translation unit.
 */
#ifndef KPC_FUZZ_COMMON_H
#define KPC_FUZZ_COMMON_H

#include "base/log.h"
#include "base/util.h"
#include "core/key.h"
#include "platform/names.h"
#include "storage/record.h"
#include "storage/store.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char fuzz_parent[4096];

static inline int fuzz_rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static inline void fuzz_rm_parent(void)
{
    if (fuzz_parent[0])
        nftw(fuzz_parent, fuzz_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* No log lines: the fuzzer runs millions of refusals, each of which logs. */
static inline void fuzz_quiet(void)
{
    kpc__log_level = 0;
}

/* A fresh cache dir path (not created) inside a private temp dir removed at exit. */
static inline void fuzz_tmpdir(char *out, size_t cap)
{
    const char *base = getenv("TMPDIR");
    snprintf(fuzz_parent, sizeof fuzz_parent, "%s/kpc-fuzz-XXXXXX", base && *base ? base : "/tmp");
    if (mkdtemp(fuzz_parent) == NULL)
        abort();
    atexit(fuzz_rm_parent);
    snprintf(out, cap, "%s/cache", fuzz_parent);
}

static inline void fuzz_write_file(const char *path, const void *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size))
        abort();
    close(fd);
}

static inline bool fuzz_exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

/* <dir>/v1/<target>/<2 hex>/<hex>.<ext> (static buffer) */
static inline const char *fuzz_record_path(const char *dir, const char *target, const kpc_key *key, const char *ext)
{
    static char path[4600];
    char hex[KPC_KEY_HEX];
    kpc_key_hex(key, hex);
    snprintf(path, sizeof path, "%s/v1/%s/%.2s/%s.%s", dir, target, hex, hex, ext);
    return path;
}

/* Copy the file at path to $KPC_FUZZ_SEED_DIR/<name> when that is set. */
static inline void fuzz_copy_seed(const char *path, const char *name)
{
    const char *seeds = getenv("KPC_FUZZ_SEED_DIR");
    if (seeds == NULL || *seeds == '\0')
        return;
    int in = open(path, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        abort();
    static char buf[1 << 20];
    ssize_t n = read(in, buf, sizeof buf);
    close(in);
    if (n < 0)
        abort();
    char out[4600];
    snprintf(out, sizeof out, "%s/seed-%s", seeds, name);
    fuzz_write_file(out, buf, (size_t)n);
}

#endif
