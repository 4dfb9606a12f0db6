/*
 * bench.h - what the kpc benchmark programs share: a clock and medians, the result rows
 * that scripts/bench.sh turns into one table, temporary cache directories, the HIP
 * sources they compile, and a fake platform for machines without ROCm.
 *
 * Every program prints its rows (one line each, tab-separated, see bn_row) to the file
 * named by $KPC_BENCH_ROWS, or to stdout when that is unset, and its progress to stderr.
 * No program asserts a timing: a missed goal is a row marked "no", never a failure.
 */
#ifndef KPC_BENCH_H
#define KPC_BENCH_H

#include "base/fault.h"
#include "base/log.h"
#include "base/root.h"
#include "core/cache.h"
#include "core/config.h"
#include "core/context.h"
#include "core/key.h"
#include "core/program.h"
#include "platform/names.h"
#include "platform/platform.h"
#include "shm/index.h"
#include "storage/store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* CLOCK_MONOTONIC in ns. */
uint64_t bn_now_ns(void);
/* Median of n values (sorts v in place); 0 for n == 0. */
double bn_median(double *v, size_t n);
int bn_nproc(void);

/* Print "bench: ..." to stderr. */
void bn_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print "bench: ..." and exit 1: for a setup step that failed (never for a timing). */
void bn_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* A result row: the figure, its value, the reference it is held against, their ratio
 * and the goal. value_text and ref_text are formatted with their units ("412 ns");
 * ref_text may be "" (no reference), ratio_text too. met: 1 goal met, 0 missed, -1 no
 * goal. value and unit are also written raw for the JSON. */
void bn_row(const char *id, const char *figure, const char *value_text, const char *reference,
            const char *ref_text, const char *ratio_text, const char *goal, int met, double value,
            const char *unit);
/* Format a duration in seconds with a unit that fits it ("183 ns", "12.4 us", "1.42 s"). */
void bn_fmt_time(char *out, size_t cap, double seconds);

/* A fresh cache directory "<tmp>/kpc-bench-XXXXXX/cache" (malloc'd; not yet created, so
 * kpc creates it 0700). bn_cleanup removes it, its parent and its shm segment. */
char *bn_tmpdir(void);
void bn_cleanup(char *dir);
void bn_rm_rf(const char *path);

/* kpc_cache_open on dir with flags (KPC_NO_SHM, ...) and shm_entries (0: default);
 * exits on failure. */
kpc_cache *bn_open(const char *dir, unsigned flags, size_t shm_entries);
/* A compile-only context for bn_target(); exits on failure. */
kpc_context *bn_context(kpc_cache *c);
/* A rank of a cluster storm, once *go is set (the release of every rank at once): a cache
 * of the environment's directory with the remote tier of url, and a context for
 * bn_target() in *ctx; NULL when either fails (the rank fails: no exit, it may be one of
 * many). bn_rank_close: its builds, the context and cache closed. */
kpc_cache *bn_rank_open(const _Atomic int *go, const char *url, kpc_context **ctx);
uint64_t bn_rank_close(kpc_cache *c, kpc_context *ctx);
/* The compile target of the benchmarks: $KPC_BENCH_TARGET, else gfx90a on the AMD
 * platform and sm_90 on the NVIDIA one. */
const char *bn_target(void);
/* Get a program (exits on failure) and release it; returns its code size. */
size_t bn_get(kpc_context *ctx, const kpc_source *src);

/* Sources. Each is a real HIP source that hipRTC compiles (and hipcc, with its include);
 * on the NVIDIA platform the same kernels without the include, for NVRTC (which knows
 * __global__, threadIdx and blockIdx without one). variant makes it distinct. malloc'd.
 *   bn_padded_source: one small kernel padded with a comment to exactly `bytes` bytes.
 *   bn_slow_source: one kernel of template recursion `depth` deep (~0.1-0.2 s for
 *     depth 100-150 on hipRTC 5.2 here).
 *   bn_multi_source: `kernels` kernels with loops (7 give a code object of ~16 KB). */
char *bn_padded_source(size_t bytes, int variant);
char *bn_slow_source(int variant, int depth);
char *bn_multi_source(int kernels, int variant);

/* The fake platform, for a machine without ROCm: each compile burns `ms` milliseconds of
 * this thread's CPU time (a real compile is CPU-bound, so P x K fake builds compete for
 * the cores as real ones do) and returns a `code_size`-byte fake AMDGPU ELF. Compiles
 * are counted in memory shared with every process forked after the install. */
void bn_fake_install(unsigned ms, size_t code_size);
/* The same, but each compile sleeps `ms` instead of burning CPU: a wall that the
 * machine's cores do not decide (a figure of scheduling alone). */
void bn_fake_install_sleeping(unsigned ms, size_t code_size);
bool bn_fake_on(void);
unsigned bn_fake_compiles(void);
/* Burn ms of this thread's CPU time. */
void bn_spin_cpu_ms(unsigned ms);

/* ---- child processes (the tools, ccache, hipcc) ------------------------------------ */
/* Run argv (argv[0] looked up in PATH) with extra environment entries env ("K=V", NULL
 * terminated; may be NULL), stdout and stderr to /dev/null unless show is set. Returns
 * the wall seconds from fork to exit; *status gets the exit status (-1: killed). */
double bn_run(char *const argv[], char *const env[], bool show, int *status);
/* This program again in a helper mode, its stdout on a pipe: bn_helper_start forks,
 * runs setup(arg) in the child (its environment; setup may be NULL), then execs
 * /proc/self/exe with argv. bn_helper_finish reads the helper's first line of output into
 * line (cap bytes; "" when it wrote none) and waits for it; it returns the wait status. */
typedef struct bn_helper {
    pid_t pid;
    int fd; /* the read end of its stdout */
} bn_helper;
bn_helper bn_helper_start(char *const argv[], void (*setup)(const void *arg), const void *arg);
int bn_helper_finish(bn_helper h, char *line, size_t cap);
/* True if name is an executable in PATH. */
bool bn_in_path(const char *name);
/* The directory of this executable (the bench/ folder of the build tree). */
const char *bn_self_dir(void);
/* Write size bytes to path; exits on failure. */
void bn_write_file(const char *path, const void *data, size_t size);

/* The cost, in seconds, of the first touch of one page of fresh anonymous memory in this
 * process (median over a few batches of 64 pages): what a fresh process pays per page of
 * a code object it reads. On a paravirtualized guest this is tens of microseconds. */
double bn_page_fault_cost(void);
/* The cost, in seconds, of one null system call (getppid) here: a warm disk hit makes a
 * handful, and on a paravirtualized guest each is microseconds. */
double bn_syscall_cost(void);

#endif /* KPC_BENCH_H */
