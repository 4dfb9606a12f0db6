/*
 * house_support.h - what the tests of the house's seams (tests/test_house_*.c) share:
 * the case's cache directory and its fixtures, the cache's counters.
 */
#ifndef KPC_TEST_HOUSE_SUPPORT_H
#define KPC_TEST_HOUSE_SUPPORT_H

#include "support.h"

extern char *dir;
void setup(void);
void teardown(void);

kpc_stats stats_of(kpc_cache *c);

#endif
