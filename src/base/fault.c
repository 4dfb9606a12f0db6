/*
 * fault.c - the system-call fault seam (test builds only, KPC_TEST_HOOKS): a test makes
 * the Nth call of one kind fail with an errno, as SQLite's syscall table does. A release
 * build has no plan to consult: kpc__sys_fault is an inline 0 (base/fault.h).
 */
#include "base/fault.h"

#ifdef KPC_TEST_HOOKS
#include <errno.h>
#include <stdatomic.h>

/* Fault plan per call: fail with err after skip calls, count times. Tests set it from
 * one thread before the calls they aim at; atomics keep TSan quiet and counts exact. */
static struct {
    atomic_int err;
    atomic_uint skip, count;
} faults[KPC_SYS_COUNT];

void kpc__sys_fault_set(enum kpc_sys_call call, int err, unsigned skip, unsigned count)
{
    atomic_store(&faults[call].err, err);
    atomic_store(&faults[call].skip, skip);
    atomic_store(&faults[call].count, count);
}

int kpc__sys_fault(enum kpc_sys_call call)
{
    if (atomic_load_explicit(&faults[call].count, memory_order_relaxed) == 0)
        return 0;
    unsigned skip = atomic_load(&faults[call].skip);
    while (skip > 0)
        if (atomic_compare_exchange_weak(&faults[call].skip, &skip, skip - 1))
            return 0;
    unsigned count = atomic_load(&faults[call].count);
    while (count > 0)
        if (atomic_compare_exchange_weak(&faults[call].count, &count, count - 1)) {
            errno = atomic_load(&faults[call].err);
            return -1;
        }
    return 0;
}
#endif /* KPC_TEST_HOOKS */
