/*
 * index_support.h - what the host-index tests (tests/test_index_*.c) share: the
 * scenario's shared report (`sh`), each case's scratch root and cache directory, the
 * fixtures, forked children and their barrier, the segment's path and bytes, captured
 * logs and kpc-shm-reset runs.
 *
 * Every scenario forks real processes (or starts threads) that share one cache directory
 * and so one segment, then checks exact counts: compiles on the host, takeovers,
 * evictions, entries; and that every process got the same bytes. Children write what
 * they saw into an anonymous shared mapping (`sh`); the parent compares.
 */
#ifndef KPC_TEST_INDEX_SUPPORT_H
#define KPC_TEST_INDEX_SUPPORT_H

#include "support.h"

#define MAXP 32 /* children per scenario */
#define MAXS 8  /* sources per scenario */
#define LOGCAP 2048

/* What the children of one scenario report; zeroed by setup(). */
typedef struct shared {
    _Atomic int arrived; /* children at the barrier */
    _Atomic int ready;   /* a child reached its waiting point */
    _Atomic int go;      /* the parent lets waiting children finish */
    int status[MAXP][MAXS];
    uint64_t hash[MAXP][MAXS];
    uint64_t size[MAXP][MAXS];
    int object_ok[MAXP][MAXS];
    uint64_t builds[MAXP], failures[MAXP], waits[MAXP], disk_hits[MAXP];
    double t_begin[MAXP], t_end[MAXP]; /* seconds, CLOCK_MONOTONIC */
    char log[MAXP][LOGCAP];
    int verdict[MAXP], waited[MAXP];
    uint64_t ev_hash[MAXP][64]; /* eviction workload: the bytes' hash of each shared key */
} shared;

extern char *dir;
extern shared *sh;
extern char base[64];

/*
 * A failed check ends the test process with _exit: no teardown runs there. So the test
 * case's unchecked fixture (run by the runner) owns a scratch root; each test's cache
 * directory lives under it, and each child it spawns is listed in <base>/pids; the case's
 * teardown kills what is left of them, unlinks every segment and removes the root.
 */
void case_setup(void);

void case_teardown(void);

void setup(void);

void teardown(void);

/* ---- helpers ------------------------------------------------------------------------ */
double now_s(void);

void sleep_ms(long ms);

/* Every child of the scenario arrives, then all go at once. */
void barrier(int n);

pid_t spawn(int (*fn)(int, void *), int i, void *arg);

int reap(pid_t p);

void assert_exited_0(int st, const char *who);

char *root_of(const char *d);

void segment_path(const char *d, char *out, size_t cap);

/* Create the cache directory and its segment (capacity entries), so a parent can watch
 * the segment while its children work; no compile. */
void precreate(size_t entries);

/* The host counters (and, with a non-NULL check, whether kpc_index_check passed). */
kpc_stats host_stats(bool *check);

char *scratch_file(const char *name);

/* Run kpc-shm-reset on dir; returns its exit status and its output in out (malloc'd). */
int run_reset(bool force, char **out);

bool segment_exists(void);

/* ---- the request child ------------------------------------------------------------------ */
typedef struct storm_arg {
    int nproc;               /* children at the barrier */
    int nsrc;
    const char *const *codes;
    bool rotate;             /* child i starts at source i % nsrc */
    size_t shm_entries;      /* 0: default */
    const char *log_file;    /* non-NULL: stderr there, KPC_LOG=warn */
    bool wait_go;            /* once open: count itself in sh->ready, wait for sh->go */
} storm_arg;

/* Open the cache, meet the others at the barrier, ask every source, report. */
int storm_child(int i, void *arg);

/* Children [0, n) (skipping `skip`) all got source j, with the same bytes as child ref. */
void assert_same_objects(int n, int nsrc, int skip);

/* The bytes of code as a fresh process sees them now (after the children). */
uint64_t hash_now(kpc_context *ctx, const char *code, size_t *size);

/* ---- crash ------------------------------------------------------------------------------ */
kpc_index *observe(void);

const char *numbered(char *buf, size_t cap, int i);

/* n workers x (50 shared keys + 100 of their own) on a 64-entry table. */
enum { EV_SHARED = 50, EV_OWN = 100 };

int evict_keys(kpc_context *ctx, int w, uint64_t *hashes);

void assert_eviction_outcome(int workers, uint64_t (*hashes)[64], size_t stride);

/* ---- protocol: the index API directly --------------------------------------------------- */
kpc_index *index_open(size_t entries);

kpc_key key_of(int i);

typedef struct begin_arg {
    kpc_key key;
    unsigned flags;
    uint64_t slice_ns; /* non-0: the waiter's futex slice (only a wake ends it sooner) */
    bool wait_go;      /* once attached: count itself in sh->ready, wait for sh->go */
} begin_arg;

/* A child's own handle on the index of dir (entries if it creates it), or NULL. */
kpc_index *child_index(size_t entries);

int begin_child(int i, void *arg);

void wait_for_waits(kpc_index *ix, uint64_t n);

#define HOLD_LOCK 2u /* claim_and_die's flags: stop holding the table mutex, mid-insert */

/* Claim a->key and exit without publishing or closing (a crash); with flags 1, stay
 * building until killed; with HOLD_LOCK, stop (SIGSTOP) holding the table mutex in the
 * middle of inserting it. */
int claim_and_die(int i, void *arg);

/* ---- faults: a damaged or truncated segment, dead and stopped builders ------- */
/* Offsets of docs/design.md ("The host index segment") that the fault tests write. */
enum {
    OFF_NSLOTS = 28, OFF_LOCK = 48, OFF_PROCS_LOCK = 88, OFF_ENTRIES = 184, OFF_SLOTS = 4352,
    SLOT_BYTES = 64, OFF_SLOT_STATE = 16, OFF_SLOT_LAST_USE = 48,
};
#define NO_SUCH_TID 0x3ffffff0u /* a lock word naming it looks held for ever */

void segment_write(off_t off, const void *data, size_t len);

int count_of(const char *text, const char *needle);

#define LOCK_TIMEOUT_MSG "did not answer within"

/* ---- suites ------------------------------------------------------------------------------ */
TCase *tcase(Suite *s, const char *name, int timeout);

/* main() of an index test of one case: the suite "index", the case made by tcase(),
 * running tests (NULL-terminated). */
int index_main(const char *name, int timeout, const TTest *const *tests);

#endif
