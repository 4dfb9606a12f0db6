/*
 * house_support.c - the house tests' shared fixtures (house_support.h).
 */
#define _GNU_SOURCE
#include "support.h"
#include "platform/compile.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "house_support.h"

char *dir;
void setup(void) { dir = ts_tmpdir(); }
void teardown(void)
{
    kpc_tier_test_add(NULL);
    ts_fake_remove();
    ts_cleanup(dir);
}

kpc_stats stats_of(kpc_cache *c)
{
    kpc_stats st;
    ck_assert_int_eq(kpc_stats_get(c, &st), KPC_OK);
    return st;
}
