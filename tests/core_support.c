/*
 * core_support.c - the core tests' shared fixtures (core_support.h).
 */
#define _GNU_SOURCE
#include "support.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core_support.h"

char *dir;
void setup(void) { dir = ts_tmpdir(); }
void teardown(void) { ts_cleanup(dir); }

kpc_stats stats_of(kpc_cache *c)
{
    kpc_stats st;
    ck_assert_int_eq(kpc_stats_get(c, &st), KPC_OK);
    return st;
}
