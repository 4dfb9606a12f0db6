/*
 * core_support.h - what the core library's tests (tests/test_core_*.c, test_map.c)
 * share: the case's cache directory, its fixtures, the cache's counters.
 */
#ifndef KPC_TEST_CORE_SUPPORT_H
#define KPC_TEST_CORE_SUPPORT_H

#include "support.h"

extern char *dir;
void setup(void);
void teardown(void);

kpc_stats stats_of(kpc_cache *c);

#endif
