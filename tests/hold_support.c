/*
 * hold_support.c - a compile held open (see hold_support.h): the platform in use, its
 * compile wrapped, and the hold's state in memory shared with every process forked after
 * the first ts_hold_arm.
 */
#define _GNU_SOURCE
#include "hold_support.h"
#include "support.h"

#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef struct hold_state {
    _Atomic int armed;    /* the next compile to start takes the hold */
    _Atomic pid_t holder; /* the held compile's process, once its compiler returned */
    _Atomic int released;
    _Atomic pid_t armer;  /* the test process: gone, the holder lets go */
} hold_state;

/* A holder outlives no test: past this it lets go whatever happened (CTest's longest
 * timeout is 600 s). */
#define HOLD_MAX_S 600.0

static hold_state *hs;
static const kpc_platform *inner; /* the platform the hold wraps */
static kpc_platform held;

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void nap_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static kpc_status held_compile(const char *target, const kpc_source *src, kpc_build *b)
{
    int armed = 1;
    bool mine = atomic_compare_exchange_strong(&hs->armed, &armed, 0);
    kpc_status s = inner->compile(target, src, b);
    if (!mine)
        return s;
    atomic_store(&hs->holder, getpid());
    double end = mono_s() + HOLD_MAX_S;
    while (!atomic_load(&hs->released) && kill(atomic_load(&hs->armer), 0) == 0 && mono_s() < end)
        nap_ms(1);
    return s;
}

void ts_hold_arm(void)
{
    if (hs == NULL) {
        hs = mmap(NULL, sizeof *hs, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ck_assert_ptr_ne(hs, MAP_FAILED);
    }
    if (kpc_platform_get() != &held) {
        inner = kpc_platform_get();
        held = *inner;
        held.compile = held_compile;
        kpc_platform_set(&held);
    }
    atomic_store(&hs->holder, 0);
    atomic_store(&hs->released, 0);
    atomic_store(&hs->armer, getpid());
    atomic_store(&hs->armed, 1);
}

pid_t ts_hold_await(double seconds)
{
    double end = mono_s() + seconds;
    pid_t p;
    while ((p = atomic_load(&hs->holder)) == 0 && mono_s() < end)
        nap_ms(2);
    return p;
}

void ts_hold_release(void)
{
    atomic_store(&hs->released, 1);
}

void ts_hold_remove(void)
{
    if (hs && kpc_platform_get() == &held) {
        atomic_store(&hs->armed, 0);
        atomic_store(&hs->released, 1);
        kpc_platform_set(inner);
    }
}
