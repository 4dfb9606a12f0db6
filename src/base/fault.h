/*
 * fault.h - the system-call fault seam for failure-injection tests (base/fault.c): the
 * library calls kpc__sys_fault(KPC_SYS_x) before a file-system call, and a test may make
 * the Nth call of one kind fail with an errno. Only test builds (KPC_TEST_HOOKS, set by
 * tests/CMakeLists.txt for the library the tests link) have a plan to consult; in a
 * release build the check is an inline 0 and kpc__sys_fault_set does not exist.
 */
#ifndef KPC_BASE_FAULT_H
#define KPC_BASE_FAULT_H

enum kpc_sys_call { KPC_SYS_OPEN, KPC_SYS_WRITE, KPC_SYS_RENAME, KPC_SYS_MKDIR, KPC_SYS_FSYNC,
                    KPC_SYS_COUNT };

#ifdef KPC_TEST_HOOKS
/* 0 to proceed; -1 with errno set when a test asked this call to fail. */
int kpc__sys_fault(enum kpc_sys_call call);
/* Make calls of `call` fail with err after `skip` successful ones, `count` times
 * (count 0 stops). */
void kpc__sys_fault_set(enum kpc_sys_call call, int err, unsigned skip, unsigned count);
#else
static inline int kpc__sys_fault(enum kpc_sys_call call)
{
    (void)call;
    return 0;
}
#endif

#endif /* KPC_BASE_FAULT_H */
