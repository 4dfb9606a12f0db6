/*
 * test_house_root.c - the cache directory's one owner (base/root.c holds
 * every path), and kpc_stats' sized call: a caller built against the 1.0.0 struct is not
 * overrun.
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

/* ---- the cache directory's owner ---------------------------------------------------- */
START_TEST(root_owns_the_paths)
{
    kpc_root *r;
    ck_assert_int_eq(kpc_root_open(dir, &r), KPC_OK);
    char real[4096];
    ck_assert(kpc_root_realpath(dir, real, sizeof real));
    ck_assert_str_eq(kpc_root_path(r), real);
    ck_assert(kpc_root_fd(r) >= 0 && kpc_root_v1_fd(r) >= 0);
    kpc_key k;
    memset(k.bytes, 0xab, 16);
    char path[4400], d[4400], want[4400];
    ck_assert_int_eq(kpc_root_record_path(r, &k, "gfx90a", "co", path, sizeof path, d, sizeof d), 0);
    snprintf(want, sizeof want, "%s/v1/gfx90a/ab/abababababababababababababababab.co", real);
    ck_assert_str_eq(path, want);
    snprintf(want, sizeof want, "%s/v1/gfx90a/ab", real);
    ck_assert_str_eq(d, want);
    /* the path with its NUL fits exactly, or it is refused: never cut short */
    size_t fit = strlen(path) + 1;
    memset(path, 'x', sizeof path);
    ck_assert_int_eq(kpc_root_record_path(r, &k, "gfx90a", "co", path, fit, d, strlen(want) + 1), 0);
    ck_assert_uint_eq(strlen(path) + 1, fit);
    ck_assert_int_eq(kpc_root_record_path(r, &k, "gfx90a", "co", path, fit - 1, NULL, 0), -1);
    ck_assert_int_eq(kpc_root_record_path(r, &k, "gfx90a", "co", path, fit, d, strlen(want)), -1);
    ck_assert_int_eq(kpc_root_record_path(r, &k, "gfx90a", "co", path, sizeof path, NULL, 0), 0);
    /* relative to the held v1/ directory */
    ck_assert_str_eq(kpc_root_rel(r, path), "gfx90a/ab/abababababababababababababababab.co");
    ck_assert_int_eq(kpc_root_record_path(r, &k, "../x", "co", path, sizeof path, NULL, 0), -1);
    ck_assert_int_eq(kpc_root_record_path(r, &k, "tmp", "co", path, sizeof path, NULL, 0), -1);
    /* the segment name the index and the tools use */
    char a[96], b[96];
    kpc_root_segment_name(kpc_root_path(r), a, sizeof a);
    kpc_root_segment_name(real, b, sizeof b);
    ck_assert_str_eq(a, b);
    ck_assert(strncmp(a, "/kpc-", 5) == 0);
    /* a lock, then the same lock without waiting: held */
    const char *call;
    int fd = kpc_root_lock(r, "house-test", false, &call, NULL, 0);
    ck_assert_int_ge(fd, 0);
    pid_t pid = fork();
    if (pid == 0) {
        kpc_root *r2;
        if (kpc_root_open(dir, &r2) != KPC_OK)
            _exit(2);
        int fd2 = kpc_root_lock(r2, "house-test", true, &call, NULL, 0);
        _exit(fd2 < 0 && errno == EWOULDBLOCK ? 0 : 1);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(fd);
    kpc_root_close(r);
}
END_TEST

/* ---- the ABI: a program built against 1.0.0's kpc.h --------------------------------------- */
/* kpc_stats as 1.0.0 declared it (17 counters), and a canary where the struct ended: the
 * 1.0.0 symbol and a sized call with the old size must fill the fields and never touch
 * the canary (the struct has grown since; memset(sizeof) of the new one overran it). */
typedef struct stats_1_0 {
    uint64_t fields[17];
    uint64_t canary;
} stats_1_0;
#define CANARY 0x5a5a5a5aa5a5a5a5ull

START_TEST(old_size_stats_caller_not_overrun)
{
    _Static_assert(sizeof(((stats_1_0 *)0)->fields) == KPC_STATS_SIZE_1_0, "the 1.0.0 size");
    kpc_cache *c = ts_open(dir, 0, 64);
    kpc_stats now = stats_of(c);
    ck_assert_uint_eq(now.capacity, 64); /* a field of 1.0.0 that is not 0 */
    stats_1_0 old = {.canary = CANARY};
    ck_assert_int_eq((kpc_stats_get)(c, (kpc_stats *)&old), KPC_OK); /* the 1.0.0 symbol */
    ck_assert_uint_eq(old.canary, CANARY);
    ck_assert_uint_eq(old.fields[offsetof(kpc_stats, capacity) / 8], 64);
    memset(&old, 0xff, sizeof old.fields);
    old.canary = CANARY;
    ck_assert_int_eq(kpc_stats_get_sized(c, (kpc_stats *)&old, sizeof old.fields), KPC_OK);
    ck_assert_uint_eq(old.canary, CANARY);
    ck_assert_uint_eq(old.fields[offsetof(kpc_stats, capacity) / 8], 64);
    ck_assert_uint_eq(old.fields[offsetof(kpc_stats, mem_hits) / 8], 0);
    /* a newer caller's larger struct: the tail the library does not know reads 0 */
    struct {
        kpc_stats s;
        uint64_t newer[2];
        uint64_t canary;
    } big;
    memset(&big, 0xff, sizeof big);
    big.canary = CANARY;
    ck_assert_int_eq(kpc_stats_get_sized(c, &big.s, sizeof big.s + sizeof big.newer), KPC_OK);
    ck_assert_uint_eq(big.s.capacity, 64);
    ck_assert_uint_eq(big.newer[0], 0);
    ck_assert_uint_eq(big.newer[1], 0);
    ck_assert_uint_eq(big.canary, CANARY);
    ck_assert_int_eq(kpc_stats_get_sized(c, &big.s, 0), KPC_E_INVALID);
    kpc_cache_close(c);
}
END_TEST

int main(void)
{
    const TTest *tests[] = {root_owns_the_paths, old_size_stats_caller_not_overrun, NULL};
    return ts_main_case("house", "root", 0, setup, teardown, tests);
}
