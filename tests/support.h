/*
 * support.h - what every kpc test shares: temporary cache directories (and their shm
 * segments) that are removed afterwards, real HIP sources, the platform's target and
 * code-object check, a fake platform for fast concurrency tests, and child processes.
 */
#ifndef KPC_TEST_SUPPORT_H
#define KPC_TEST_SUPPORT_H

/* the tests reach every module (they link the test build of the library) */
#include "base/fault.h"
#include "base/log.h"
#include "base/root.h"
#include "base/util.h"
#include "core/cache.h"
#include "core/config.h"
#include "core/context.h"
#include "core/key.h"
#include "core/map.h"
#include "core/program.h"
#include "platform/names.h"
#include "platform/platform.h"
#include "storage/claim.h"
#include "shm/index.h"
#include "storage/record.h"
#include "storage/store.h"
#include "storage/tier.h"

#include <check.h>
#include <stdbool.h>

/* A fresh empty cache directory (malloc'd path); ts_cleanup removes it and its segment.
 * It lies under the suite's scratch root (ts_run_suite), which goes after the suite with
 * every segment of a directory in it, also when a failed case never reached ts_cleanup. */
char *ts_tmpdir(void);
void ts_cleanup(char *dir);
void ts_rm_rf(const char *path);

/* kpc_cache_open on dir with flags and shm_entries (0: default); fails the test on error. */
kpc_cache *ts_open(const char *dir, unsigned flags, size_t shm_entries);
kpc_context *ts_context(kpc_cache *c); /* compile-only context for ts_target() */

/* The compile target tests use on this platform ("gfx90a" on amd, "sm_90" on nvidia). */
const char *ts_target(void);
/* A second valid target ("gfx1030" / "sm_80"). */
const char *ts_target2(void);
/* True if code is a code object of this platform (AMDGPU ELF / CUDA ELF). */
bool ts_is_code_object(const void *code, size_t size);

/* Real sources. ts_kernel_source(i): distinct small kernel source i (static buffer per i
 * up to 64). ts_slow_source(k): k kernels of deep template recursion (~0.08 s each on
 * hipRTC 5.2 here; ~0.5-0.8 s in all on NVRTC 13, whose recursion limit is 200).
 * ts_bad_source(): a source with a syntax error. */
const char *ts_kernel_source(int i);
char *ts_slow_source(int kernels);
const char *ts_bad_source(void);
kpc_source ts_src(const char *code, const char *name);
/* TS_REQUEST_VARIANTS requests into v: the first ts_src("code", "n.hip"), each other
 * different from it in one input (the source, the name, two options in one order and
 * the other, a header's text, a name expression): no two may share a key. */
#define TS_REQUEST_VARIANTS 9
void ts_request_variants(kpc_source v[TS_REQUEST_VARIANTS]);

/* Get a program, assert KPC_OK, and return a malloc'd copy of its code. */
void *ts_get_code(kpc_context *ctx, const kpc_source *src, size_t *size);

/* The fake platform: compiles in microseconds (or sleeps "// sleep_ms=N" from the
 * source), gives bitcode for the option -fgpu-rdc (as hipRTC 5.3 and later), fails for a
 * source containing "#error" (a compile error), reports the file named by "// dep=PATH"
 * (to the end of its line) as one it read, fails every compile
 * as a local fault (b->local) while KPC_FAKE_LOCAL_FAULT is set, and counts its compiles in memory
 * shared by every process forked after ts_fake_install(). */
void ts_fake_install(void);
void ts_fake_remove(void);
unsigned ts_fake_compiles(void);
/* The fake platform's device 0 (of target ts_target()), off unless set after
 * ts_fake_install(); the modules it loaded, and unloaded (each once a program is freed). */
extern bool ts_fake_has_device;
/* The next this many loads are refused as a runtime refuses a damaged or foreign object
 * (KPC_E_CORRUPT), and not counted among the loads. */
extern unsigned ts_fake_refuse_loads;
unsigned ts_fake_loads(void);
unsigned ts_fake_unloads(void);

/* Fork n children that each run fn(i, arg) and exit with its return value; wait for all.
 * Returns how many exited 0. */
int ts_run_children(int n, int (*fn)(int i, void *arg), void *arg);

/* Capture what the library logs: ts_log_begin sets the log level (KPC_LOG_WARN, ...)
 * and sends stderr to a file, ts_log_end restores both and returns the text (malloc'd).
 * Children forked in between log into the same file. */
void ts_log_begin(int level);
char *ts_log_end(void);

/* The key kpc_program_get computes for src on ctx. */
void ts_key(const kpc_context *ctx, const kpc_source *src, kpc_key *out);
/* The path of a record under cache dir `dir` (realpath'ed): v1/<target>/<2 hex>/<hex>.<ext>. */
void ts_record_path(const char *dir, const char *target, const kpc_key *key, const char *ext,
                    char *out, size_t cap);
/* Entries of a directory but . and .. (-1 if it cannot be read); of <realpath of
 * dir>/v1/tmp (staging), 0 when there is no such directory. */
int ts_count_entries(const char *path);
int ts_tmp_entries(const char *dir);
/* The domain (16 hex) this process writes in the staging names of the cache at dir, as
 * the store spells it (base/root.h): a planted name in it is judged by its writer. */
void ts_tmp_domain(const char *dir, char out[17]);
/* A header for the fake platform's "// dep=PATH" to name: dir/inc/h.h holding
 * "#define H 1\n", its path into header, and the option that searches its directory
 * ("-I<dir>/inc") into opt; each buffer holds cap bytes. */
void ts_include_dir(const char *dir, char *header, char *opt, size_t cap);
/* Whole-file helpers: read (malloc'd, NULL if absent) and write-over (fails the test). */
void *ts_read_file(const char *path, size_t *size);
void ts_write_file(const char *path, const void *data, size_t size);

/* Run argv (argv[0] a path) with extra environment entries ("K=V", NULL-terminated, may
 * be NULL); collect stdout and stderr (malloc'd, either pointer may be NULL). Returns the
 * exit status, or -1 if it did not exit normally. */
int ts_exec(const char *const *argv, const char *const *env, char **out, char **err);

/* A case that cannot run here: prints "CASE: skipped: WHY" (CASE the running test's
 * name) on stdout, the form scripts/test.sh counts as a skip; the caller then returns.
 * A skip always names its reason. */
void ts_skip(const char *why_fmt, ...) __attribute__((format(printf, 1, 2)));
/* Whether this build computes request digests (libsodium, which the cluster tier
 * brings): without it a record keeps none (docs/trust.md). */
bool ts_have_request_digest(void);

/* Run a Check suite in fork mode under a scratch root of its own ($TMPDIR for the cases,
 * so every ts_tmpdir and the compiler's temporary files land in it); afterwards the root
 * goes, and every host-index segment of a directory in it, pass or fail: a case that
 * fails ends its process before its teardown, and a test past its CTest timeout is
 * killed whole (a watcher outside its process tree sweeps then). Returns the process
 * exit status. */
int ts_run_suite(Suite *s);

/* A test case of s named name, with the checked fixture setup/teardown (either may be
 * NULL) and a timeout in seconds (0: CK_DEFAULT_TIMEOUT, which CTest sets). */
TCase *ts_case(Suite *s, const char *name, int timeout, SFun setup, SFun teardown);

/* Add tests (NULL-terminated) to tc, in order. */
void ts_add_tests(TCase *tc, const TTest *const *tests);

/* main() of a test executable of one test case: suite `suite`, case `tcase` made by
 * ts_case, running tests (NULL-terminated) through ts_run_suite. */
int ts_main_case(const char *suite, const char *tcase, int timeout, SFun setup, SFun teardown,
                 const TTest *const *tests);

/* main() of a test executable with a process suite and a thread suite: argv[1] names
 * which to run ("processes", the default; "threads", which CTest labels for TSan; "all"). */
int ts_main_processes_threads(int argc, char **argv, Suite *(*processes)(void),
                              Suite *(*threads)(void));

#endif
