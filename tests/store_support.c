/*
 * store_support.c - the disk-tree tests' shared fixtures and helpers (store_support.h).
 */
#define _GNU_SOURCE
#include "support.h"
#include "private_mounts.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "store_support.h"

char *dir;
void setup(void) { dir = ts_tmpdir(); }
void teardown(void) { ts_cleanup(dir); }

pid_t spawn(int (*fn)(void *), void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(fn(arg));
    return pid;
}

int reap(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void *shared_mem(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    return p;
}

kpc_stats stats_of(kpc_cache *c)
{
    kpc_stats s;
    ck_assert_int_eq(kpc_stats_get(c, &s), KPC_OK);
    return s;
}

bool is_absent(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) != 0 && errno == ENOENT;
}

/* The record at key must be a valid regular file holding exactly code. */
void assert_record_valid(const char *d, const kpc_key *key, const void *code, size_t size)
{
    char path[4400];
    ts_record_path(d, ts_target(), key, "co", path, sizeof path);
    struct stat sb;
    ck_assert_msg(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode), "%s is not a regular file", path);
    kpc_store *st;
    ck_assert_int_eq(kpc_store_open(d, 1ull << 40, &st), KPC_OK);
    kpc_record rec;
    kpc_status s = kpc_store_read(st, key, ts_target(), KPC_RECORD_CODE, &rec);
    ck_assert_msg(s == KPC_OK, "the record %s does not read back: %s", path, kpc_status_str(s));
    ck_assert_uint_eq(rec.code_size, size);
    ck_assert(memcmp(rec.payload, code, size) == 0);
    kpc_record_free(&rec);
    kpc_store_close(st);
}

/* ---- real sources -------------------------------------------------------------------- */
const char *const tmpl_code =
    "template<typename T> __global__ void scale(T *a, T f) { a[threadIdx.x] *= f; }\n";
const char *const tmpl_exprs[] = {"scale<float>"};

kpc_source real_src(int i)
{
    if (i == 2) {
        kpc_source s = ts_src(tmpl_code, "scale.hip");
        s.name_expressions = tmpl_exprs;
        s.num_name_expressions = 1;
        return s;
    }
    return ts_src(ts_kernel_source(i), "k.hip");
}

/* Build src in a fresh cache handle and remember its record. */
void cache_obj(const char *d, const kpc_source *src, cached_obj *o)
{
    kpc_cache *c = ts_open(d, 0, 0);
    kpc_context *ctx = ts_context(c);
    ts_key(ctx, src, &o->key);
    o->code = ts_get_code(ctx, src, &o->code_size);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ts_record_path(d, ts_target(), &o->key, "co", o->path, sizeof o->path);
    o->file = ts_read_file(o->path, &o->file_size);
    ck_assert_ptr_nonnull(o->file);
    ck_assert_uint_gt(o->file_size, 256 + o->code_size);
}

char fake_code[320][48];
kpc_source fake_src(int i)
{
    snprintf(fake_code[i], sizeof fake_code[i], "fake source %d\n", i);
    return ts_src(fake_code[i], "fake.hip");
}
uint64_t file_mtime(const char *path, uint64_t *size)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return 0;
    if (size)
        *size = (uint64_t)sb.st_size;
    return (uint64_t)sb.st_mtim.tv_sec * 1000000000ull + (uint64_t)sb.st_mtim.tv_nsec;
}

/* Every *.co file under dir/v1: count and bytes (no estimate: the real tree). */
uint64_t tree_bytes, tree_files;
int tree_add(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)ftw;
    size_t n = strlen(path);
    if (flag == FTW_F && n > 3 && strcmp(path + n - 3, ".co") == 0 && strstr(path, "/v1/tmp/") == NULL)
        tree_bytes += (uint64_t)sb->st_size, tree_files++;
    return 0;
}

void tree_usage(const char *d, uint64_t *bytes, uint64_t *files)
{
    char root[4096], v1[4200];
    ck_assert_ptr_nonnull(realpath(d, root));
    snprintf(v1, sizeof v1, "%s/v1", root);
    tree_bytes = tree_files = 0;
    nftw(v1, tree_add, 16, FTW_PHYS);
    *bytes = tree_bytes;
    *files = tree_files;
}
