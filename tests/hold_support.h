/*
 * hold_support.h - a compile held open, for the tests that need a build in flight (a
 * builder to kill mid-compile, a waiter to count): the compiler's speed decides nothing.
 * NVRTC compiles a "slow" source in tens of milliseconds, hipRTC the same source in a
 * second; a test that slept for a compile to be under way raced the compiler.
 *
 * ts_hold_arm() wraps the compile of the platform in use (the built-in one or the fake):
 * the first compile to start after it, in this process or in any process forked after it,
 * runs the real compiler and then holds its result, not returning into kpc, until
 * ts_hold_release() (or its process is killed there: a builder that dies mid-compile, as
 * far as kpc can tell). Every later compile runs straight through, the takeover's among
 * them. A holder whose arming process is gone stops holding (a failed test leaves no
 * process behind).
 */
#ifndef KPC_TEST_HOLD_SUPPORT_H
#define KPC_TEST_HOLD_SUPPORT_H

#include <sys/types.h>

/* Arm (or re-arm) the hold: the next compile to start is held. Before the processes that
 * are to compile are forked, and before they open their cache. */
void ts_hold_arm(void);
/* Wait until a compile is held (its compiler has returned): its pid, or 0 when none is
 * within `seconds`. */
pid_t ts_hold_await(double seconds);
/* Let the held compile return into kpc. */
void ts_hold_release(void);
/* Restore the platform that was in use before ts_hold_arm. */
void ts_hold_remove(void);

#endif
